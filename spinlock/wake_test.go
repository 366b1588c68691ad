package spinlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/spinlock"
)

// A sleeper count left behind by a killed waiter makes a release try a
// wake that finds nobody in the kernel; the release must then clear
// wake-pending again, or every later release would skip its wake.
func TestWakeWithNobodyAsleepClearsPending(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			l := newLock(mode)
			g, err := l.Lock(holderFor(mode))
			require.NoError(t, err)
			l.Slot().Pad.Store(1) // a registered sleeper that was killed
			require.NoError(t, g.Release())
			pad := l.Slot().Pad.Load()
			require.Equal(t, uint32(1), pad&layout.PadSleepers, "count kept")
			require.Zero(t, pad&layout.PadWakePending, "wake-pending cleared")
			require.Equal(t, uint32(1), (pad&layout.PadFutileWakes)>>layout.PadFutileShift, "one futile wake counted")

			// And a real sleeper is still woken by the next release.
			g, err = l.Lock(holderFor(mode))
			require.NoError(t, err)
			done := make(chan error, 1)
			var w spinlock.Guard
			go func() { done <- w.Lock(l, holderFor(mode)) }()
			waitFor(t, func() bool { return l.Slot().Sleepers() == 2 }, "the waiter to sleep")
			require.NoError(t, g.Release())
			require.NoError(t, <-done)
			require.NoError(t, w.Release())
		})
	}
}

// A wake-pending bit left set by a woken waiter that was killed before it
// ran delays the next wake-up to a sleeper's liveness check; it never loses
// it.
func TestStuckWakePendingHeals(t *testing.T) {
	t.Parallel()
	l := newLock(spinlock.PIDTID)
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	l.Slot().Pad.Store(layout.PadWakePending)

	done := make(chan error, 1)
	var w spinlock.Guard
	go func() { done <- w.Lock(l, spinlock.NewHolder()) }()
	waitFor(t, func() bool { return l.Slot().Sleepers() == 1 }, "the waiter to sleep")
	require.NoError(t, g.Release())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(reclaimBound):
		t.Fatalf("waiter not woken within %v of the release", reclaimBound)
	}
	require.NoError(t, w.Release())
	require.Zero(t, l.Slot().Pad.Load()&^layout.PadEpoch)
}

// Many goroutines, some giving up at random (each may have consumed the
// wake meant to pass the lock on): the counter is exact and Pad returns to
// zero, so no sleeper registration or wake-pending bit leaks.
func TestWakeStormWithCancellations(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			l := newLock(mode)
			const workers, rounds = 16, 2000
			var (
				wg       sync.WaitGroup
				counter  int
				mu       sync.Mutex // only for the success tally
				acquired int
			)
			for w := range workers {
				wg.Go(func() {
					me := holderFor(mode)
					ok := 0
					for r := range rounds {
						ctx := context.Background()
						var cancel context.CancelFunc = func() {}
						if (w+r)%7 == 0 {
							ctx, cancel = context.WithTimeout(ctx, time.Duration(r%50)*time.Microsecond)
						}
						if mode == spinlock.Token {
							me = spinlock.NewToken()
						}
						var g spinlock.Guard
						err := g.LockContext(ctx, l, me)
						cancel()
						if err != nil {
							require.ErrorIs(t, err, context.DeadlineExceeded)
							continue
						}
						counter++
						ok++
						require.NoError(t, g.Release())
					}
					mu.Lock()
					acquired += ok
					mu.Unlock()
				})
			}
			wg.Wait()
			require.Equal(t, acquired, counter)
			require.Positive(t, acquired)
			require.Zero(t, l.Slot().Pad.Load()&^layout.PadEpoch, "sleeper count and wake-pending back to zero (the epoch may have moved: see stateOf)")
			_, held := l.Owner()
			require.False(t, held)
		})
	}
}

// A waiter killed while it sleeps leaves its registration in Pad, and every
// release that finds a registered sleeper makes a futex system call. Those
// wakes find nobody; after a run of them (no live sleeper registering in
// between) the release drops the stale count, so the lock does not pay a
// system call on every unlock for good.
func TestKilledSleeperRegistrationExpires(t *testing.T) {
	seg, path := newSegment(t)
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	me := spinlock.NewHolder()
	var g spinlock.Guard
	for attempt := 0; ; attempt++ {
		require.NoError(t, g.Lock(l, me))
		c := testproc.Start(t, "wait-lock", path)
		waitFor(t, func() bool { return l.Slot().Sleepers() == 1 }, "the waiter registers as a sleeper")
		c.Kill(t)
		if l.Slot().Sleepers() == 1 {
			break // killed while registered
		}
		// Killed in the instant between two sleeps (every liveness
		// interval): nothing stale to test this time.
		require.Less(t, attempt, 3, "the waiter was never killed while registered")
		require.NoError(t, g.Release())
	}
	limit := int(layout.PadFutileWakes >> layout.PadFutileShift)
	for i := 0; l.Slot().Sleepers() != 0; i++ {
		require.LessOrEqual(t, i, limit, "the dead sleeper's registration outlived %d futile wakes", i)
		require.NoError(t, g.Release())
		require.NoError(t, g.Lock(l, me))
	}
	require.NoError(t, g.Release())
	assert.Equal(t, uint32(1)<<layout.PadEpochShift, l.Slot().Pad.Load(), "Pad after the repair: no sleeper, no futile wake, the next epoch")
}
