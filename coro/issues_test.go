package coro_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/shmlock/shmlock/coro"
)

// Known bugs of golang.org/x/sync/semaphore, as scenarios for Mutex.

// watchdog bounds a wait that must succeed: running out means a lost
// wake-up, reported as a failure instead of a hung test.
const watchdog = 10 * time.Second

// golang/go#37852, "x/sync: semaphore.Weighted.Acquire should try to
// notify other waiters when canceled": a front waiter that gives up must
// not leave the waiters behind it asleep when they could proceed; and its
// twin, a waiter cancelled at the moment it is granted the lock, must not
// keep (leak) the grant. Scenario: A holds; B (cancellable) waits at the
// front, C behind it. A unlocks while B is cancelled, racing, many times;
// and, deterministically, B is cancelled first and A unlocks after. C
// must always get the mutex, and the mutex must end free.
func TestIssue37852FrontWaiterCancelled(t *testing.T) {
	t.Parallel()
	const rounds = 300
	l := coro.NewLoop()
	defer closeLoop(t, l)
	for _, race := range []bool{true, false} {
		for _, onLoop := range []bool{false, true} {
			for range rounds {
				var m coro.Mutex
				a, _ := m.Lock(context.Background())
				ctxB, cancelB := context.WithCancel(context.Background())
				var b <-chan result
				if onLoop {
					b = lockOnAsync(t, &m, ctxB, l)
				} else {
					b = lockAsync(&m, ctxB)
					for coro.Waiters(&m) != 1 {
						runtime.Gosched()
					}
				}
				ctxC, cancelC := context.WithTimeout(context.Background(), watchdog)
				c := lockAsync(&m, ctxC)
				for coro.Waiters(&m) != 2 {
					runtime.Gosched()
				}
				if race {
					go cancelB()
				} else {
					cancelB()
					rb := <-b
					if !errors.Is(rb.err, context.Canceled) {
						t.Fatalf("B: got %v, want Canceled", rb.err)
					}
				}
				unlock(t, a)
				if race {
					if rb := <-b; rb.err == nil {
						unlock(t, rb.g) // B won the race; then C is next
					}
				}
				rc := <-c
				if rc.err != nil {
					t.Fatalf("C: got %v, want the mutex (lost wake-up)", rc.err)
				}
				unlock(t, rc.g)
				cancelC()
				mustFree(t, &m)
			}
		}
	}
}

// golang/go#63615, "x/sync/semaphore: acquire should fail if context is
// canceled or timed out": Weighted.Acquire used to succeed on a done
// context when tokens were free. Here a context already done fails at
// once with ctx.Err(), even on a free mutex, which stays free; for Lock
// and LockOn alike.
func TestIssue63615DoneContext(t *testing.T) {
	t.Parallel()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	for _, ctx := range []context.Context{canceled, expired} {
		var m coro.Mutex
		if _, err := m.Lock(ctx); err != ctx.Err() || err == nil {
			t.Fatalf("Lock: got %v, want %v", err, ctx.Err())
		}
		mustFree(t, &m)

		l := coro.NewLoop()
		got := lockOnAsync(t, &m, ctx, l)
		if r := <-got; r.err != ctx.Err() {
			t.Fatalf("LockOn: got %v, want %v", r.err, ctx.Err())
		}
		closeLoop(t, l)
		mustFree(t, &m)
	}
}
