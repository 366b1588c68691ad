package coro_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/spinlock"
)

// A LockOn waiter takes the lock over from a process killed holding it,
// and its context is done before its continuation runs (its loop is busy).
// The news that the holder died must reach an owner: either the
// continuation gets the hold and Reclaimed, or the hold is passed on and
// the next owner learns it. Before, the posted continuation saw the done
// context, released the reclaimed hold and reported Canceled: the next
// owner's Reclaimed was false, and nobody was told that the data may be
// half-updated.
func TestProcessMutexLockOnReclaimThenCancel(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	h := startHolder(t, path, spinlock.PIDTID.String())
	l, m, _ := openSpin(t, path, spinlock.PIDTID)
	loop := coro.NewLoop()
	defer closeLoop(t, loop)

	type outcome struct {
		g   coro.ProcessGuard
		err error
	}
	results := make(chan outcome, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, m.LockOn(ctx, loop, func(g coro.ProcessGuard, err error) { results <- outcome{g, err} }))
	testproc.WaitFor(t, func() bool { return l.Slot().Sleepers() == 1 }, "the LockOn waiter to sleep")

	gate := make(chan struct{})
	require.NoError(t, loop.Post(func() { <-gate })) // holds the continuation back
	self := spinlock.NewHolder().PID
	h.kill()
	testproc.WaitFor(t, func() bool { o, held := l.Owner(); return held && o.PID == self }, "the waiter to take the lock over")
	cancel()
	close(gate)

	r := testproc.Receive(t, results, "the continuation")
	if r.err == nil {
		require.True(t, r.g.Reclaimed(), "the continuation got the hold: it must learn of the reclaim")
		require.NoError(t, r.g.Unlock())
		return
	}
	require.ErrorIs(t, r.err, context.Canceled)
	g, err := m.Lock(context.Background())
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Unlock()) }()
	require.True(t, g.Reclaimed(), "the reclaimed hold was passed on: its next owner must learn of the reclaim")
}
