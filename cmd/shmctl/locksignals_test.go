package main

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
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

// requireDiedOf checks that a helper's exit error says it died of sig.
func requireDiedOf(tb testing.TB, c *testproc.Child, sig syscall.Signal) {
	tb.Helper()
	err := c.Wait(tb)
	var exit *exec.ExitError
	require.True(tb, errors.As(err, &exit), "got exit %v, want death by %v; output %q", err, sig, c.Out)
	ws := exit.Sys().(syscall.WaitStatus)
	require.True(tb, ws.Signaled() && ws.Signal() == sig, "got exit %v, want death by %v; output %q", err, sig, c.Out)
}

// When SIGINT kills the command, or ends the wait for the lock, shmctl
// lock dies of SIGINT too, once the lock is released, as flock(1) does on
// Ctrl-C. A shell stops its script on Ctrl-C only if the command it waits
// for dies of SIGINT; shmctl exited with status 130, which says the
// command handled it, so Ctrl-C did not stop a loop of shmctl lock
// commands.
func TestLockDiesOfSIGINT(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	c := startLock(t, seg.Path(), "job", "--", "sh", "-c", "kill -INT $$")
	requireDiedOf(t, c, syscall.SIGINT)
	ri, err := m.Inspect("job")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Unlocked, ri.State, "released first")

	// A command that exits 130 is not one SIGINT killed.
	c = startLock(t, seg.Path(), "job", "--", "sh", "-c", "exit 130")
	err = c.Wait(t)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 130, exit.ExitCode())

	_, err = m.Acquire(context.Background(), "job", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	conflicts := m.Stats().ConflictsDetected
	c = startLock(t, seg.Path(), "job", "--", "sh", "-c", "echo ran")
	testproc.WaitFor(t, func() bool { return m.Stats().ConflictsDetected > conflicts }, "shmctl lock waiting")
	require.NoError(t, c.Cmd.Process.Signal(syscall.SIGINT))
	requireDiedOf(t, c, syscall.SIGINT)
	require.Contains(t, c.Out.String(), "interrupted by interrupt while waiting for the lock")
	require.NotContains(t, c.Out.String(), "ran")
	require.NoError(t, m.Release("job", "holder"))
}
