package coro_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

// Goroutines of one process increment a plain Go counter under each kind
// of coro lock: a Mutex, one ProcessMutex over each kind of cross-process
// lock, and two ProcessMutexes over one lock (two parts of a program that
// each made their own, over handles of their own). The total must be
// exact, and -race must report nothing: a Mutex's words are in Go memory,
// which the race detector sees, but the cross-process locks' are in the
// segment, which it does not (they tell it through internal/racesync).
func TestPlainCounterAcrossGoroutines(t *testing.T) {
	t.Parallel()
	const goroutines, iters = 6, 2000
	spin := func(mode spinlock.Mode) func(*testing.T, *shm.Segment) *coro.ProcessMutex {
		return func(t *testing.T, seg *shm.Segment) *coro.ProcessMutex {
			l, err := spinlock.Open(seg, 0, mode)
			require.NoError(t, err)
			return coro.NewProcessMutex(coro.SpinLock(l))
		}
	}
	up := func(adapt func(*upgrade.Mutex) coro.ProcessLock) func(*testing.T, *shm.Segment) *coro.ProcessMutex {
		return func(t *testing.T, seg *shm.Segment) *coro.ProcessMutex {
			h, err := upgrade.Open(seg, 0)
			require.NoError(t, err)
			t.Cleanup(func() { _ = h.Close() })
			return coro.NewProcessMutex(adapt(h))
		}
	}
	kinds := []struct {
		name string
		// open returns a new ProcessMutex over the segment's lock; nil for
		// a Mutex.
		open func(*testing.T, *shm.Segment) *coro.ProcessMutex
		// mutexes is how many ProcessMutexes the goroutines share out.
		mutexes int
	}{
		{"Mutex", nil, 1},
		{"spinlock-pidtid", spin(spinlock.PIDTID), 1},
		{"spinlock-token", spin(spinlock.Token), 1},
		{"upgrade-unique", up(coro.UpgradeUnique), 1},
		{"upgrade-upgradable", up(coro.UpgradeUpgradable), 1},
		{"two-over-spinlock", spin(spinlock.PIDTID), 2},
		{"two-over-upgrade", up(coro.UpgradeUnique), 2},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			var lock func(i int) (unlock func() error, err error)
			if k.open == nil {
				var m coro.Mutex
				lock = func(int) (func() error, error) {
					g, err := m.Lock(context.Background())
					return g.Unlock, err
				}
			} else {
				seg, err := shm.Open(newProcessSegment(t), shm.Options{})
				require.NoError(t, err)
				t.Cleanup(func() { _ = seg.Close() })
				ms := make([]*coro.ProcessMutex, k.mutexes)
				for i := range ms {
					ms[i] = k.open(t, seg)
				}
				lock = func(i int) (func() error, error) {
					g, err := ms[i%len(ms)].Lock(context.Background())
					return g.Unlock, err
				}
			}
			counter := 0
			var wg sync.WaitGroup
			start := make(chan struct{}) // all at once: alone, each would finish within its time slice
			for i := range goroutines {
				wg.Go(func() {
					<-start
					for range iters {
						unlock, err := lock(i)
						if err != nil {
							t.Error(err)
							return
						}
						counter++
						if err := unlock(); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			close(start)
			wg.Wait()
			require.Equal(t, goroutines*iters, counter)
		})
	}
}
