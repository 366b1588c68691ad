package coro_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/spinlock"
)

// Many waits, each cancelled while the lock is held (here, and in another
// process for the ProcessMutex): a Lock, a LockOn and a ProcessMutex's
// LockOn on one context of a long-lived parent. None leaves a goroutine
// (the cancellation callback, the cross-process wait) or a queue entry
// behind, and the holders keep their locks. Not parallel: it counts the
// goroutines of the whole process.
func TestCancelledWaitsLeaveNothing(t *testing.T) {
	path := newProcessSegment(t)
	h := startHolder(t, path, spinlock.PIDTID.String())
	l, pm, _ := openSpin(t, path, spinlock.PIDTID)
	loop := coro.NewLoop()
	defer closeLoop(t, loop)
	var m coro.Mutex
	g, err := m.Lock(context.Background())
	require.NoError(t, err)
	parent, stop := context.WithCancel(context.Background())
	defer stop()
	owner, _ := l.Owner()

	const waits = 1000
	before := runtime.NumGoroutine()
	for range waits {
		ctx, cancel := context.WithCancel(parent)
		errs := make(chan error, 3)
		go func() {
			_, err := m.Lock(ctx)
			errs <- err
		}()
		require.NoError(t, m.LockOn(ctx, loop, func(_ coro.Guard, err error) { errs <- err }))
		require.NoError(t, pm.LockOn(ctx, loop, func(_ coro.ProcessGuard, err error) { errs <- err }))
		cancel()
		for range 3 {
			require.ErrorIs(t, testproc.Receive(t, errs, "a cancelled wait"), context.Canceled)
		}
	}
	testproc.WaitFor(t, func() bool { return runtime.NumGoroutine() <= before }, "the goroutines of cancelled waits to end")
	mustHeld(t, &m, 0)
	mustFree(t, coro.ProcessLocal(pm))
	now, held := l.Owner()
	require.True(t, held)
	require.Equal(t, owner, now, "the other process still holds the lock")
	require.True(t, g.Held())
	unlock(t, g)
	h.release()
}
