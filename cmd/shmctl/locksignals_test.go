package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// ignoredSignals reads the SigIgn line of a /proc/PID/status.
func ignoredSignals(tb testing.TB, status string) uint64 {
	tb.Helper()
	for line := range strings.Lines(status) {
		if rest, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			require.NoError(tb, err, "%q", line)
			return mask
		}
	}
	tb.Fatalf("no SigIgn line in %q", status)
	return 0
}

// A signal ignored when shmctl lock starts stays ignored, for shmctl and
// for the command, as with flock(1): nohup's SIGHUP, the SIGINT a shell
// ignores for a command it runs with & without job control. shmctl
// caught them to pass them on, which undid the ignore: the command ran
// with their default action, and the hang-up nohup was meant to survive
// killed it.
func TestLockKeepsIgnoredSignals(t *testing.T) {
	t.Parallel()
	seg, _ := lockSegment(t)
	out, err := shellScript(t, seg.Path(), `trap '' HUP INT; exec "$SHMCTL" lock "$SEG" r -- cat /proc/self/status`)
	require.NoError(t, err, out)
	ign := ignoredSignals(t, out)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		require.NotZero(t, ign&(1<<(sig-1)), "%v: got SigIgn %x, want it ignored", sig, ign)
	}
}
