package spinlock_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/spinlock"
)

// A process blocked on a held lock for a second sleeps: it uses a small
// fraction of a core. This is not a speed test: a waiter that sleeps uses
// next to nothing however slow the machine, one that spins uses all the
// CPU it is given. Not parallel, so that it runs alone.
func TestBlockedWaiterSleeps(t *testing.T) {
	seg, path := newSegment(t)
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	c := testproc.Start(t, "wait-cpu", path)
	waitFor(t, func() bool { return l.Slot().Sleepers() == 1 }, "the waiter to sleep")
	testproc.RequireSlept(t, c, "blocked waiter", g.Release)
}

func waitCPUHelper(args []string) int {
	seg, l, _, err := openLock(args[0], spinlock.PIDTID)
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	w, err := testproc.StartWaiting()
	if err != nil {
		return fail("%v", err)
	}
	var g spinlock.Guard
	if err := g.TryLockFor(l, spinlock.NewHolder(), testTimeout); err != nil {
		return fail("lock: %v", err)
	}
	if err := w.Report(); err != nil {
		return fail("%v", err)
	}
	if err := g.Release(); err != nil {
		return fail("release: %v", err)
	}
	return 0
}
