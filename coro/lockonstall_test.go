package coro_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
)

// gatedLock is a cross-process lock that another process holds until the
// test opens gate: LockContext reports that it waits (entered), then takes
// the lock when gate opens, whatever its context says, so the test decides
// that the wait ended with the lock.
type gatedLock struct {
	other    atomic.Bool // held by the other process
	entered  chan struct{}
	gate     chan struct{}
	unlocked chan struct{}
}

func (g *gatedLock) LockContext(context.Context) (bool, error) {
	g.entered <- struct{}{}
	<-g.gate
	g.other.Store(false)
	return false, nil
}

func (g *gatedLock) TryLock() (bool, error) {
	if g.other.Load() {
		return false, coro.ErrWouldBlock
	}
	return false, nil
}

func (g *gatedLock) Unlock() error {
	g.unlocked <- struct{}{}
	return nil
}

// A ProcessMutex.LockOn waiter that took the cross-process lock after a
// wait, but whose context is done before its loop runs the continuation,
// passes the lock on at once, as a Mutex.LockOn waiter does: not only when
// the loop gets to it, which a stalled loop (a blocking function, a Run
// that a panic ended) may never do, while every process waits.
func TestProcessLockOnCancelOnStalledLoop(t *testing.T) {
	t.Parallel()
	lock := &gatedLock{entered: make(chan struct{}), gate: make(chan struct{}), unlocked: make(chan struct{}, 1)}
	lock.other.Store(true)
	m := coro.NewProcessMutex(lock)
	loop := coro.NewLoop()
	defer func() {
		loop.Close()
		<-loop.Done()
	}()

	got := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, m.LockOn(ctx, loop, func(g coro.ProcessGuard, err error) {
		if err == nil {
			_ = g.Unlock()
		}
		got <- err
	}))
	<-lock.entered // waiting for the other process, off the loop

	stalled, unstall := make(chan struct{}), make(chan struct{})
	require.NoError(t, loop.Post(func() {
		close(stalled)
		<-unstall
	}))
	<-stalled
	var unstallOnce sync.Once
	defer unstallOnce.Do(func() { close(unstall) }) // a failed test must not leave the loop stalled

	close(lock.gate) // the wait ends with the lock; the continuation queues behind the stall
	cancel()
	select {
	case <-lock.unlocked:
	case <-time.After(procTimeout):
		t.Fatal("a cancelled LockOn waiter kept the cross-process lock while its loop stalled")
	}
	g, err := m.TryLock()
	require.NoError(t, err, "the lock was passed on in this process too")
	require.NoError(t, g.Unlock())
	<-lock.unlocked

	unstallOnce.Do(func() { close(unstall) })
	require.ErrorIs(t, <-got, context.Canceled)
}
