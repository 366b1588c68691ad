package proc

import (
	"os"
	"testing"
)

// SetReadStatFile replaces the reader of /proc/<pid>/stat until tb ends.
// Tests that call it must not run in parallel.
func SetReadStatFile(tb testing.TB, f func(path string) ([]byte, error)) {
	tb.Helper()
	Self() // compute it from the real /proc first
	old := readStatFile
	readStatFile = f
	tb.Cleanup(func() { readStatFile = old })
}

// SetReadTaskDir replaces the lister of /proc/<pid>/task until tb ends.
// Tests that call it must not run in parallel.
func SetReadTaskDir(tb testing.TB, f func(path string) ([]os.DirEntry, error)) {
	tb.Helper()
	old := readTaskDir
	readTaskDir = f
	tb.Cleanup(func() { readTaskDir = old })
}

// SharesOurVM is sharesOurVM, for its test.
var SharesOurVM = sharesOurVM
