package proc

import (
	"syscall"
	"testing"
)

// Parsers, for table tests from package proc_test.
var (
	ParseStat     = parseStat
	ParseUUID     = parseUUID
	ParseBootTime = parseBootTime
	ParseParent   = parseParent
	ParseNSpid    = parseNSpid
	// ParseProcHidesPIDs reads a mountinfo.
	ParseProcHidesPIDs = parseProcHidesPIDs
)

// SetKill replaces the kill(2) used by Alive's fallback until tb ends.
// Tests that call it must not run in parallel.
func SetKill(tb testing.TB, f func(pid int, sig syscall.Signal) error) {
	tb.Helper()
	old := kill
	kill = f
	tb.Cleanup(func() { kill = old })
}
