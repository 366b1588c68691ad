package coro_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"

	"github.com/shmlock/shmlock/coro"
)

// Cancellation in each waiter state (design 002, "Cancellation & Races"),
// for goroutine waiters (Lock) and loop waiters (LockOn). The
// interleavings are forced: testing/synctest.Wait lets every goroutine
// settle, the grant hook runs between "notified" and the wake-up, and a
// loop kept busy holds a resumption back.

// Waiting: the waiter leaves the queue; the lock is untouched.
func TestCancelWaiting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var m coro.Mutex
		l := coro.NewLoop()
		g, _ := m.Lock(context.Background())
		ctx, cancel := context.WithCancel(context.Background())
		byGoroutine := lockAsync(&m, ctx)
		synctest.Wait()
		byLoop := lockOnAsync(t, &m, ctx, l)
		synctest.Wait()
		mustHeld(t, &m, 2)

		cancel()
		for _, ch := range []<-chan result{byGoroutine, byLoop} {
			if r := <-ch; !errors.Is(r.err, context.Canceled) || r.g != (coro.Guard{}) {
				t.Fatalf("got %v, %v; want the zero Guard, Canceled", r.g, r.err)
			}
		}
		synctest.Wait()
		mustHeld(t, &m, 0) // still g's
		if !g.Held() {
			t.Fatal("the holder lost the mutex")
		}
		unlock(t, g)
		mustFree(t, &m)
		closeLoop(t, l)
	})
}

// Waiting, by deadline: fake time runs out while the waiter waits.
func TestDeadlineWaiting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var m coro.Mutex
		g, _ := m.Lock(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 5)
		defer cancel()
		if _, err := m.Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock: got %v, want DeadlineExceeded", err)
		}
		mustHeld(t, &m, 0)
		unlock(t, g)
		mustFree(t, &m)
	})
}

// Notified, goroutine waiter: the holder hands B the mutex and, before B
// is woken, B's context is cancelled (from the grant hook). B wakes on
// its context, finds itself notified, and passes the mutex on: to C if C
// waits, else it unlocks. Lock returns ctx.Err() to B.
func TestCancelNotified(t *testing.T) {
	t.Parallel()
	for _, next := range []bool{false, true} {
		name := map[bool]string{false: "alone", true: "with next"}[next]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var m coro.Mutex
				ctxB, cancelB := context.WithCancel(context.Background())
				var granted []uint64
				coro.SetGrantHook(&m, func(ticket uint64) {
					granted = append(granted, ticket)
					if ticket == 1 {
						cancelB()
					}
				})
				g, _ := m.Lock(context.Background())
				b := lockAsync(&m, ctxB)
				synctest.Wait()
				var c <-chan result
				if next {
					c = lockAsync(&m, context.Background())
					synctest.Wait()
				}
				unlock(t, g)
				if r := <-b; !errors.Is(r.err, context.Canceled) {
					t.Fatalf("B: got %v, want Canceled", r.err)
				}
				synctest.Wait()
				if !next {
					mustFree(t, &m)
					if len(granted) != 1 {
						t.Fatalf("grants: got %v, want [1]", granted)
					}
					return
				}
				r := <-c
				if r.err != nil || !r.g.Held() {
					t.Fatalf("C: got %v held=%v, want the mutex", r.err, r.g.Held())
				}
				if r.g.Epoch() != g.Epoch()+2 {
					t.Fatalf("C's epoch: got %d, want %d (one hold for B)", r.g.Epoch(), g.Epoch()+2)
				}
				unlock(t, r.g)
				mustFree(t, &m)
			})
		})
	}
}

// Notified, loop waiter: B's resumption is queued behind a busy loop when
// its context is cancelled; the cancellation passes the mutex on at once
// (to C, or unlocks), and B's continuation later runs with ctx.Err().
func TestLoopCancelNotified(t *testing.T) {
	t.Parallel()
	for _, next := range []bool{false, true} {
		for _, free := range []bool{false, true} {
			// free: B is handed a free mutex at once, inside LockOn.
			name := map[bool]string{false: "handoff", true: "free"}[free] + map[bool]string{false: " alone", true: " with next"}[next]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					var m coro.Mutex
					l := coro.NewLoop()
					gate := make(chan struct{})
					_ = l.Post(func() { <-gate })
					var g coro.Guard
					if !free {
						g, _ = m.Lock(context.Background())
					}
					ctxB, cancelB := context.WithCancel(context.Background())
					b := lockOnAsync(t, &m, ctxB, l)
					var c <-chan result
					if next {
						c = lockAsync(&m, context.Background())
						synctest.Wait()
					}
					if !free {
						unlock(t, g) // to B, which cannot resume yet
					}
					mustHeld(t, &m, map[bool]int{false: 0, true: 1}[next])
					cancelB()
					synctest.Wait()
					if next {
						r := <-c
						if r.err != nil || !r.g.Held() {
							t.Fatalf("C: got %v, want the mutex", r.err)
						}
						unlock(t, r.g)
					}
					mustFree(t, &m)
					close(gate)
					if r := <-b; !errors.Is(r.err, context.Canceled) || r.g != (coro.Guard{}) {
						t.Fatalf("B: got %v, %v; want the zero Guard, Canceled", r.g, r.err)
					}
					closeLoop(t, l)
				})
			})
		}
	}
}

// Resumed: once Lock has returned, or the continuation has started, the
// context no longer matters.
func TestCancelResumed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var m coro.Mutex
		l := coro.NewLoop()
		g, _ := m.Lock(context.Background())
		ctxB, cancelB := context.WithCancel(context.Background())
		ctxC, cancelC := context.WithCancel(context.Background())
		b := lockAsync(&m, ctxB)
		synctest.Wait()
		c := lockOnAsync(t, &m, ctxC, l)
		synctest.Wait()
		unlock(t, g)
		rb := <-b
		if rb.err != nil {
			t.Fatalf("B: got %v, want nil", rb.err)
		}
		cancelB()
		synctest.Wait()
		if !rb.g.Held() {
			t.Fatal("cancelling a resumed waiter's context released its hold")
		}
		unlock(t, rb.g)
		rc := <-c
		if rc.err != nil {
			t.Fatalf("C: got %v, want nil", rc.err)
		}
		cancelC()
		synctest.Wait()
		if !rc.g.Held() {
			t.Fatal("cancelling a resumed continuation's context released its hold")
		}
		unlock(t, rc.g)
		mustFree(t, &m)
		closeLoop(t, l)
	})
}

// The moment of resumption: Unlock and cancellation race, many times. The
// waiter either gets the mutex with a nil error, or ctx.Err() with the
// mutex passed on (here: unlocked); never both, never neither.
func TestCancelAtResumption(t *testing.T) {
	t.Parallel()
	const rounds = 300
	l := coro.NewLoop()
	defer closeLoop(t, l)
	for _, onLoop := range []bool{false, true} {
		var won, lost int
		for range rounds {
			var m coro.Mutex
			g, _ := m.Lock(context.Background())
			ctx, cancel := context.WithCancel(context.Background())
			var got <-chan result
			if onLoop {
				got = lockOnAsync(t, &m, ctx, l)
			} else {
				got = lockAsync(&m, ctx)
				for coro.Waiters(&m) == 0 {
					runtime.Gosched()
				}
			}
			done := make(chan struct{})
			go func() { cancel(); close(done) }()
			unlock(t, g)
			r := <-got
			<-done
			switch {
			case r.err == nil:
				won++
				if !r.g.Held() {
					t.Fatal("nil error without the mutex")
				}
				unlock(t, r.g)
			case errors.Is(r.err, context.Canceled):
				lost++
				if r.g != (coro.Guard{}) {
					t.Fatal("ctx.Err() with a Guard")
				}
			default:
				t.Fatalf("got %v", r.err)
			}
			mustFree(t, &m)
		}
		t.Logf("onLoop=%v: resumed %d, cancelled %d", onLoop, won, lost)
	}
}
