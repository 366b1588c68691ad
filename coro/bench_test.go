package coro_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sync/semaphore"

	"github.com/shmlock/shmlock/coro"
)

// Each benchmark runs coro.Mutex beside sync.Mutex (no queue, no
// cancellation, barging allowed) and semaphore.Weighted(1) (FIFO with
// context cancellation, coro's nearest relative), in the same run.

// locker is one goroutine's way to take and drop a lock under test.
type locker struct {
	lock, unlock func()
}

type impl struct {
	name string
	// newLock makes a lock: a factory of per-goroutine lockers, and, for
	// coro, a count of the holds that went through the queue.
	newLock func() (newLocker func() locker, queued func() uint64)
}

var impls = []impl{
	{"coro", func() (func() locker, func() uint64) {
		m := new(coro.Mutex)
		return func() locker {
			var g coro.Guard
			ctx := context.Background()
			return locker{
				lock:   func() { g, _ = m.Lock(ctx) },
				unlock: func() { _ = g.Unlock() },
			}
		}, func() uint64 { return coro.Queued(m) }
	}},
	{"sync.Mutex", func() (func() locker, func() uint64) {
		m := new(sync.Mutex)
		return func() locker { return locker{m.Lock, m.Unlock} }, nil
	}},
	{"semaphore", func() (func() locker, func() uint64) {
		s := semaphore.NewWeighted(1)
		return func() locker {
			ctx := context.Background()
			return locker{
				lock:   func() { _ = s.Acquire(ctx, 1) },
				unlock: func() { s.Release(1) },
			}
		}, nil
	}},
}

// BenchmarkUncontended: Lock and Unlock by one goroutine, called directly
// (no closures), so the fast paths are measured as callers see them.
func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	b.Run("coro", func(b *testing.B) {
		b.ReportAllocs()
		var m coro.Mutex
		for b.Loop() {
			g, _ := m.Lock(ctx)
			_ = g.Unlock()
		}
	})
	b.Run("coro-TryLock", func(b *testing.B) {
		b.ReportAllocs()
		var m coro.Mutex
		for b.Loop() {
			g, _ := m.TryLock()
			_ = g.Unlock()
		}
	})
	b.Run("sync.Mutex", func(b *testing.B) {
		b.ReportAllocs()
		var m sync.Mutex
		for b.Loop() {
			m.Lock()
			m.Unlock() // empty on purpose: the lock's own cost
		}
	})
	b.Run("semaphore", func(b *testing.B) {
		b.ReportAllocs()
		s := semaphore.NewWeighted(1)
		for b.Loop() {
			_ = s.Acquire(ctx, 1)
			s.Release(1)
		}
	})
}

// BenchmarkContended: n goroutines share b.N lock/unlock pairs around a
// tiny critical section (an increment). Explicit goroutines rather than
// RunParallel, so that n does not depend on GOMAXPROCS. An op is one
// hold. Most holds find the mutex free: a holder usually unlocks before
// anyone has queued (see queued/op).
func BenchmarkContended(b *testing.B) {
	for _, n := range []int{2, 8, 64} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("g=%d/%s", n, im.name), func(b *testing.B) {
				contend(b, n, im.newLock, false)
			})
		}
	}
}

// BenchmarkHandoff is BenchmarkContended with a holder that yields its
// processor inside the critical section, so the others queue up and
// nearly every Unlock hands the lock to a waiter: the FIFO handoff path.
func BenchmarkHandoff(b *testing.B) {
	for _, n := range []int{2, 8, 64} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("g=%d/%s", n, im.name), func(b *testing.B) {
				contend(b, n, im.newLock, true)
			})
		}
	}
}

func contend(b *testing.B, n int, newLock func() (func() locker, func() uint64), yield bool) {
	b.ReportAllocs()
	newLocker, queued := newLock()
	var shared struct {
		_ [64]byte // keep the counter off the lock's cache line
		v int
		_ [64]byte
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		ops := b.N / n
		if i < b.N%n {
			ops++
		}
		l := newLocker()
		wg.Go(func() {
			<-start
			for range ops {
				l.lock()
				shared.v++
				if yield {
					runtime.Gosched()
				}
				l.unlock()
			}
		})
	}
	b.ResetTimer()
	close(start)
	wg.Wait()
	b.StopTimer()
	if shared.v != b.N {
		b.Fatalf("%d increments, want %d: mutual exclusion failed", shared.v, b.N)
	}
	// handoffs/s: holds per second, each passed on from the previous holder.
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handoffs/s")
	if queued != nil {
		// queued/op: the share of holds handed over through the FIFO queue;
		// the rest found the mutex free (its holder had unlocked with
		// nobody waiting) and took the fast path.
		b.ReportMetric(float64(queued())/float64(b.N), "queued/op")
	}
}

// BenchmarkLockOn: the loop form, uncontended: each op locks, runs the
// continuation on the loop, and unlocks there.
func BenchmarkLockOn(b *testing.B) {
	b.ReportAllocs()
	var m coro.Mutex
	l := coro.NewLoop()
	defer l.Close()
	ctx := context.Background()
	done := make(chan struct{})
	cont := func(g coro.Guard, err error) {
		_ = g.Unlock()
		done <- struct{}{}
	}
	for b.Loop() {
		if err := m.LockOn(ctx, l, cont); err != nil {
			b.Fatal(err)
		}
		<-done
	}
}
