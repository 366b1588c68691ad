package upgrade_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/peerwork"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// The benchmarks put the upgrade mutex beside sync.RWMutex, the in-process
// reference: the same calls, the same workloads. The peers across
// processes (pthread rwlock, Boost's upgradable mutex, fcntl, flock) are
// measured side by side with go run ./bench/matrix (see bench/README.md).

// benchSegment makes a segment with one upgrade mutex and room for 64
// reader records.
func benchSegment(b *testing.B) (*shm.Segment, string) {
	b.Helper()
	path := testproc.SegmentPath(b)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{
		Slots: 1, Upgrades: 1, UpgradeReaders: 64, TxnRecords: -1, TxnArenaBytes: -1, LockMgrEntries: 1,
	}})
	require.NoError(b, err)
	b.Cleanup(func() { _ = seg.Close() })
	return seg, path
}

func benchHandle(b *testing.B, seg *shm.Segment) *upgrade.Mutex {
	b.Helper()
	m, err := upgrade.Open(seg, 0)
	require.NoError(b, err)
	b.Cleanup(func() { _ = m.Close() })
	return m
}

type paddedRW struct {
	_  [64]byte
	mu sync.RWMutex
	_  [64]byte
}

// One goroutine locks and unlocks over and over: the cost of the fast
// paths.
func BenchmarkUncontended(b *testing.B) {
	b.Run("upgrade/shared", func(b *testing.B) {
		seg, _ := benchSegment(b)
		m := benchHandle(b, seg)
		for b.Loop() {
			if err := m.LockShared(); err != nil {
				b.Fatal(err)
			}
			if err := m.UnlockShared(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sync.RWMutex/shared", func(b *testing.B) {
		var rw paddedRW
		for b.Loop() {
			rw.mu.RLock()
			rw.mu.RUnlock() //nolint:staticcheck // an empty critical section is the point
		}
	})
	b.Run("upgrade/unique", func(b *testing.B) {
		seg, _ := benchSegment(b)
		m := benchHandle(b, seg)
		for b.Loop() {
			if err := m.Lock(); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sync.RWMutex/unique", func(b *testing.B) {
		var rw paddedRW
		for b.Loop() {
			rw.mu.Lock()
			rw.mu.Unlock() //nolint:staticcheck // an empty critical section is the point
		}
	})
	// The Context forms, with a context that can be cancelled, as callers
	// pass them: the same fast paths.
	b.Run("upgrade/shared-context", func(b *testing.B) {
		seg, _ := benchSegment(b)
		m := benchHandle(b, seg)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for b.Loop() {
			if err := m.LockSharedContext(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.UnlockShared(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("upgrade/unique-context", func(b *testing.B) {
		seg, _ := benchSegment(b)
		m := benchHandle(b, seg)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for b.Loop() {
			if err := m.LockContext(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("upgrade/upgrade", func(b *testing.B) {
		seg, _ := benchSegment(b)
		m := benchHandle(b, seg)
		for b.Loop() {
			if err := m.LockUpgrade(); err != nil {
				b.Fatal(err)
			}
			if err := m.UnlockUpgrade(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("upgrade/upgrade-to-unique", func(b *testing.B) {
		seg, _ := benchSegment(b)
		m := benchHandle(b, seg)
		require.NoError(b, m.LockUpgrade())
		for b.Loop() {
			if err := m.UpgradeToUnique(); err != nil {
				b.Fatal(err)
			}
			if err := m.UniqueToUpgrade(); err != nil {
				b.Fatal(err)
			}
		}
		require.NoError(b, m.UnlockUpgrade())
	})
}

// The peers' rw90 by goroutines, each with a handle of its own (the
// upgrade mutex) or sharing one sync.RWMutex; b.N operations in all.
func BenchmarkRW90(b *testing.B) {
	for _, g := range []int{2, 4, 8} {
		b.Run("upgrade/goroutines="+strconv.Itoa(g), func(b *testing.B) {
			seg, _ := benchSegment(b)
			handles := make([]*upgrade.Mutex, g)
			for i := range handles {
				handles[i] = benchHandle(b, seg)
			}
			var rec [8]uint64
			runRW90(b, g, func(i int) peerwork.RWLocker { return handles[i].Locker() }, &rec)
		})
		b.Run("sync.RWMutex/goroutines="+strconv.Itoa(g), func(b *testing.B) {
			var rw paddedRW
			var rec [8]uint64
			runRW90(b, g, func(int) peerwork.RWLocker { return &rw.mu }, &rec)
		})
	}
}

func runRW90(b *testing.B, g int, lockerOf func(i int) peerwork.RWLocker, rec *[8]uint64) {
	var torn atomic.Uint64
	var wg sync.WaitGroup
	for i := range g {
		n := b.N / g
		if i < b.N%g {
			n++
		}
		l := lockerOf(i)
		wg.Go(func() {
			_, _, t := peerwork.RW90(l, rec, uint64(n), uint64(i)+1)
			torn.Add(t)
		})
	}
	wg.Wait()
	if torn.Load() != 0 {
		b.Fatalf("%d torn reads", torn.Load())
	}
	// ops/s: operations (reads and writes) per second, all goroutines together.
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}
