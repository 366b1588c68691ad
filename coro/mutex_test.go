package coro_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/shmlock/shmlock/coro"
)

func TestZeroMutex(t *testing.T) {
	t.Parallel()
	var m coro.Mutex
	g, err := m.Lock(context.Background())
	if err != nil {
		t.Fatalf("Lock: got %v, want nil", err)
	}
	if !g.Held() {
		t.Fatal("Held: got false, want true")
	}
	mustHeld(t, &m, 0)
	unlock(t, g)
	if g.Held() {
		t.Fatal("Held after Unlock: got true, want false")
	}
	mustFree(t, &m)
}

func TestUnlockTwice(t *testing.T) {
	t.Parallel()
	var m coro.Mutex
	g, _ := m.Lock(context.Background())
	unlock(t, g)
	if err := g.Unlock(); !errors.Is(err, coro.ErrNotOwner) {
		t.Fatalf("second Unlock: got %v, want ErrNotOwner", err)
	}
	mustFree(t, &m)

	// A stale guard cannot end a later hold, even the very next one.
	g2, ok := m.TryLock()
	if !ok {
		t.Fatal("TryLock: got false, want true")
	}
	if err := g.Unlock(); !errors.Is(err, coro.ErrNotOwner) {
		t.Fatalf("stale Unlock: got %v, want ErrNotOwner", err)
	}
	if !g2.Held() {
		t.Fatal("stale Unlock released the current hold")
	}
	if g2.Epoch() <= g.Epoch() {
		t.Fatalf("epochs: got %d after %d, want larger", g2.Epoch(), g.Epoch())
	}
	unlock(t, g2)
	if err := (coro.Guard{}).Unlock(); !errors.Is(err, coro.ErrNotOwner) {
		t.Fatalf("zero Guard Unlock: got %v, want ErrNotOwner", err)
	}
}

func TestGuardCopiesUnlockOnce(t *testing.T) {
	t.Parallel()
	var m coro.Mutex
	g, _ := m.Lock(context.Background())
	copies := []coro.Guard{g, g, g}
	errs := make(chan error, len(copies))
	for _, c := range copies {
		go func() { errs <- c.Unlock() }()
	}
	var ok, notOwner int
	for range copies {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, coro.ErrNotOwner):
			notOwner++
		default:
			t.Fatalf("Unlock: got %v", err)
		}
	}
	if ok != 1 || notOwner != 2 {
		t.Fatalf("got %d unlocks and %d ErrNotOwner, want 1 and 2", ok, notOwner)
	}
	mustFree(t, &m)
}

func TestTryLock(t *testing.T) {
	t.Parallel()
	var m coro.Mutex
	g, ok := m.TryLock()
	if !ok {
		t.Fatal("TryLock on a free mutex: got false, want true")
	}
	if _, ok := m.TryLock(); ok {
		t.Fatal("TryLock on a held mutex: got true, want false")
	}
	unlock(t, g)
	mustFree(t, &m)
}

// TestFIFO: waiters get the mutex in the order they queued.
func TestFIFO(t *testing.T) {
	t.Parallel()
	const waiters = 20
	synctest.Test(t, func(t *testing.T) {
		var m coro.Mutex
		g, _ := m.Lock(context.Background())
		order := make(chan int, waiters)
		for i := range waiters {
			go func() {
				g, err := m.Lock(context.Background())
				if err != nil {
					t.Errorf("Lock: got %v, want nil", err)
					return
				}
				order <- i
				unlock(t, g)
			}()
			synctest.Wait() // waiter i is queued before i+1 starts
		}
		mustHeld(t, &m, waiters)
		unlock(t, g)
		for want := range waiters {
			if got := <-order; got != want {
				t.Fatalf("grant %d went to waiter %d", want, got)
			}
		}
		synctest.Wait()
		mustFree(t, &m)
	})
}

// TestNoBarging: once the holder unlocks with waiters queued, the mutex
// belongs to the front waiter before it even runs: TryLock fails and a
// new Lock queues behind.
func TestNoBarging(t *testing.T) {
	t.Parallel()
	t.Run("goroutine waiter", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var m coro.Mutex
			var barged, hooked bool
			coro.SetGrantHook(&m, func(uint64) {
				// Notified, not yet woken: the moment a barger would win.
				hooked = true
				if g, ok := m.TryLock(); ok {
					barged = true
					_ = g.Unlock()
				}
			})
			g, _ := m.Lock(context.Background())
			got := lockAsync(&m, context.Background())
			synctest.Wait()
			unlock(t, g)
			r := <-got
			if !hooked || barged {
				t.Fatalf("hook ran %v, TryLock succeeded %v; want true, false", hooked, barged)
			}
			unlock(t, r.g)
			mustFree(t, &m)
		})
	})
	t.Run("loop waiter", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var m coro.Mutex
			l := coro.NewLoop()
			gate := make(chan struct{})
			_ = l.Post(func() { <-gate }) // the resumption waits behind this
			g, _ := m.Lock(context.Background())
			got := lockOnAsync(t, &m, context.Background(), l)
			unlock(t, g) // handed to the loop waiter, which cannot run yet
			if _, ok := m.TryLock(); ok {
				t.Fatal("TryLock after a handoff: got true, want false")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1)
			defer cancel()
			if _, err := m.Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Lock after a handoff: got %v, want DeadlineExceeded", err)
			}
			mustHeld(t, &m, 0)
			close(gate)
			r := <-got
			if r.err != nil {
				t.Fatalf("LockOn: got %v, want nil", r.err)
			}
			unlock(t, r.g)
			mustFree(t, &m)
			closeLoop(t, l)
		})
	})
}
