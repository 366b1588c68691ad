package clib_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/spinlock"
)

// A C waiter counts its waits in the slot's contention counters as a Go
// one does: N timed-out waits behind a Go holder are N contended waits and
// N timeouts, and the Go holder's release of a C sleeper counts a wake-up.
func TestSpinStatsCWaiter(t *testing.T) {
	t.Parallel()
	const n, name = 4, "clib.spin.stats"
	seg, path, _ := newSpinSegment(t)
	l, err := spinlock.Named(seg, name, spinlock.PIDTID)
	require.NoError(t, err)
	st := seg.LockStats(layout.KindOwnerSlots, l.Index())
	require.NotNil(t, st)

	me := spinlock.NewHolder()
	g, err := l.Lock(me)
	require.NoError(t, err)
	cChild(t, "timeouts", path, name, "pidtid", "4").WaitOK(t)
	require.Equal(t, uint64(n), st.Contended.Load(), "Contended")
	require.Equal(t, uint32(n), st.Timeouts.Load(), "Timeouts")
	require.GreaterOrEqual(t, st.WaitNanos.Load(), uint64(n*10*time.Millisecond), "WaitNanos")
	var hist uint32
	for i := range st.WaitHist {
		hist += st.WaitHist[i].Load()
	}
	require.Equal(t, uint32(n), hist, "waits in the histogram")

	// A C sleeper woken by the Go release: one more contended wait, granted.
	waiter := cChild(t, "wait", path, name, "pidtid")
	waiter.WaitLine(t, "waiting")
	testproc.WaitFor(t, func() bool { return st.Sleeps.Load() > 0 && l.Slot().Sleepers() > 0 }, "the C waiter to sleep")
	time.Sleep(20 * time.Millisecond) // from its registration into the kernel (a sleep lasts up to 50 ms)
	require.NoError(t, g.Release())
	waiter.WaitOK(t)
	require.Equal(t, uint64(n+1), st.Contended.Load(), "Contended")
	require.Equal(t, uint32(n), st.Timeouts.Load(), "Timeouts")
	require.Equal(t, uint64(1), st.Wakeups.Load(), "Wakeups: the release woke the C sleeper")
}
