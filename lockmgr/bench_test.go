package lockmgr_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shmlock/shmlock/lockmgr"
)

// reportOps reports ops/s where one acquire and one release are two ops,
// as the issue counts them.
func reportOps(b *testing.B, pairs int, d time.Duration) {
	b.ReportMetric(float64(2*pairs)/d.Seconds(), "ops/s") // acquires + releases per second
}

func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("lockmgr/1goroutine", func(b *testing.B) {
		m, _ := newManager(b, 64, lockmgr.Options{})
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			if _, err := m.Acquire(ctx, "bench:0", "owner", lockmgr.Exclusive, lockmgr.AcquireOptions{}); err != nil {
				b.Fatal(err)
			}
			if err := m.Release("bench:0", "owner"); err != nil {
				b.Fatal(err)
			}
		}
		reportOps(b, b.N, time.Since(start))
	})
	b.Run("mutexmap/1goroutine", func(b *testing.B) {
		r := newRefMap()
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			if err := r.acquire("bench:0", "owner"); err != nil {
				b.Fatal(err)
			}
			r.release("bench:0", "owner")
		}
		reportOps(b, b.N, time.Since(start))
	})
}

// refMap is the in-process reference: what design 004's TypeScript manager
// does, a map of resource to holder behind a sync.Mutex.
type refMap struct {
	mu    sync.Mutex
	locks map[string]refLock
}

type refLock struct {
	owner    string
	acquired time.Time
	version  uint64
}

func newRefMap() *refMap { return &refMap{locks: make(map[string]refLock)} }

func (r *refMap) acquire(resource, owner string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.locks[resource]; ok {
		return fmt.Errorf("held by %s", l.owner)
	}
	r.locks[resource] = refLock{owner: owner, acquired: time.Now(), version: 1}
	return nil
}

func (r *refMap) release(resource, owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.locks[resource]; ok && l.owner == owner {
		delete(r.locks, resource)
	}
}
