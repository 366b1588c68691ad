//go:build linux

package futex_test

import (
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmlock/shmlock/internal/futex"
)

// testTimeout bounds every wait in these tests so a broken wake fails the
// test instead of hanging it.
const testTimeout = 10 * time.Second

// TestWaitValueMismatch: a Wait whose word does not hold val returns nil
// without sleeping. Had it slept, it would have timed out: at once with a
// timeout of 0 (ErrTimeout, as TestWaitTimeout's "zero" shows for a word
// that holds val), and after testTimeout with that one. The errors say it,
// not the time taken: a stall of the machine between two readings of the
// clock (a process stopped for 1.1 s) is no sleep of Wait's.
func TestWaitValueMismatch(t *testing.T) {
	t.Parallel()
	var word atomic.Uint32
	word.Store(5)
	for _, timeout := range []time.Duration{0, testTimeout} {
		if err := futex.Wait(&word, 4, timeout); err != nil {
			t.Fatalf("Wait with timeout %v: got %v, want nil (it slept although *addr != val)", timeout, err)
		}
	}
}

func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		timeout time.Duration
	}{
		{"zero", 0},
		{"short", 20 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var word atomic.Uint32
			for attempt := 1; ; attempt++ {
				start := time.Now()
				err := futex.Wait(&word, 0, tt.timeout)
				elapsed := time.Since(start)
				if err == nil && attempt < interruptedAttempts {
					continue // a signal (see interruptedAttempts)
				}
				if !errors.Is(err, futex.ErrTimeout) {
					t.Fatalf("Wait: got %v, want ErrTimeout", err)
				}
				if elapsed < tt.timeout {
					t.Errorf("Wait returned after %v, want at least %v", elapsed, tt.timeout)
				}
				return
			}
		})
	}
}

// interruptedAttempts bounds the tries of a test whose sleeper returned
// early, its sleep interrupted by a signal (EINTR: Wait returns nil, as
// for a wake). A process-wide signal goes to any thread that does not
// block it, the sleeper's too: SIGCHLD, when a child exits (the helper of
// TestWakeOtherProcess, running in parallel, or another test's), cut 8 in
// 300 sleeps of 5 ms short. A Wait that returns early without one does so
// every time, and fails.
const interruptedAttempts = 20

func TestWakeGoroutine(t *testing.T) {
	t.Parallel()
	for attempt := 1; ; attempt++ {
		var word atomic.Uint32
		errc := make(chan error, 1)
		go func() { errc <- futex.Wait(&word, 0, 3*testTimeout) }()

		// The word is left unchanged, so the waiter returns nil early only
		// for our wake, or a signal (then it is tried again); keep waking
		// until it has gone to sleep.
		deadline := time.Now().Add(testTimeout)
		woken := false
		for !woken {
			n := wake(t, &word, 1)
			if n != 0 && n != 1 {
				t.Fatalf("Wake: got %d woken, want 0 or 1", n)
			}
			woken = n == 1
			if !woken && len(errc) > 0 {
				break // it returned without our wake
			}
			if time.Now().After(deadline) {
				t.Fatal("waiter never went to sleep")
			}
			time.Sleep(time.Millisecond)
		}
		if err := <-errc; err != nil {
			t.Errorf("Wait: got %v, want nil", err)
		}
		if woken {
			return
		}
		if attempt == interruptedAttempts {
			t.Fatalf("the waiter returned before a wake found it asleep, %d times", attempt)
		}
	}
}

func TestWakeAll(t *testing.T) {
	t.Parallel()
	const waiters = 4
	var word atomic.Uint32
	errc := make(chan error, waiters)
	for range waiters {
		go func() {
			for word.Load() == 0 {
				if err := futex.Wait(&word, 0, 3*testTimeout); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	asleep := waitAsleep(t, selfPID, &word, waiters)

	word.Store(1)
	n, err := futex.WakeAll(&word)
	if err != nil {
		t.Fatalf("WakeAll: %v", err)
	}
	if asleep && n != waiters || n > waiters {
		t.Errorf("WakeAll: got %d woken, want %d", n, waiters)
	}
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for range waiters {
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Wait: got %v, want nil", err)
			}
		case <-timer.C:
			t.Fatal("a waiter was not woken")
		}
	}
}

func TestWakeNoWaiter(t *testing.T) {
	t.Parallel()
	var word atomic.Uint32
	for _, n := range []int{-1, 0, 1, math.MaxInt} {
		if got := wake(t, &word, n); got != 0 {
			t.Errorf("Wake(n=%d): got %d woken, want 0", n, got)
		}
	}
	got, err := futex.WakeAll(&word)
	if err != nil || got != 0 {
		t.Errorf("WakeAll: got %d, %v; want 0, nil", got, err)
	}
}

func TestWakeZeroWakesNobody(t *testing.T) {
	t.Parallel()
	for attempt := 1; ; attempt++ {
		var word atomic.Uint32
		errc := make(chan error, 1)
		go func() { errc <- futex.Wait(&word, 0, 3*testTimeout) }()
		asleep, ok := waitSleepers(t, selfPID, &word, 1, func() bool { return len(errc) > 0 })
		if !ok {
			t.Skip("cannot see futex sleepers in /proc")
		}
		if asleep {
			n0, n1 := wake(t, &word, 0), wake(t, &word, 1)
			if n0 != 0 {
				t.Errorf("Wake(0): got %d woken, want 0", n0)
			}
			err := <-errc
			if err != nil {
				t.Errorf("Wait: got %v, want nil", err)
			}
			if n1 == 1 {
				return
			}
			// Nobody for Wake(1): the sleeper was gone, for Wake(0) or
			// for a signal; only the second happens on some tries.
		} else if err := <-errc; err != nil {
			t.Fatalf("Wait: got %v, want nil", err)
		}
		if attempt == interruptedAttempts {
			t.Fatalf("Wake(1) found no sleeper, or the sleeper returned before it slept, %d times", attempt)
		}
	}
}

// wake calls futex.Wake and fails the test on an error.
func wake(tb testing.TB, addr *atomic.Uint32, n int) int {
	tb.Helper()
	woken, err := futex.Wake(addr, n)
	if err != nil {
		tb.Fatalf("Wake: %v", err)
	}
	return woken
}

// TestNapLastsAtLeastItsDuration: a nap never returns early, whatever its
// length (a signal, such as the runtime's preemption signal, interrupts
// nanosleep, and Nap sleeps what was left); a negative one returns (the
// kernel refuses it with EINVAL, which Nap does not retry).
func TestNapLastsAtLeastItsDuration(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{-time.Second, 0, time.Microsecond, 300 * time.Microsecond, 20 * time.Millisecond} {
		start := time.Now()
		futex.Nap(d)
		if elapsed := time.Since(start); elapsed < d {
			t.Errorf("Nap(%v) returned after %v", d, elapsed)
		}
	}
}
