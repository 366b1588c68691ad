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

func TestWaitValueMismatch(t *testing.T) {
	t.Parallel()
	var word atomic.Uint32
	word.Store(5)
	start := time.Now()
	if err := futex.Wait(&word, 4, testTimeout); err != nil {
		t.Fatalf("Wait: got %v, want nil", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Wait slept %v although *addr != val", d)
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
			start := time.Now()
			err := futex.Wait(&word, 0, tt.timeout)
			elapsed := time.Since(start)
			if !errors.Is(err, futex.ErrTimeout) {
				t.Fatalf("Wait: got %v, want ErrTimeout", err)
			}
			if elapsed < tt.timeout {
				t.Errorf("Wait returned after %v, want at least %v", elapsed, tt.timeout)
			}
		})
	}
}

func TestWakeGoroutine(t *testing.T) {
	t.Parallel()
	var word atomic.Uint32
	errc := make(chan error, 1)
	go func() { errc <- futex.Wait(&word, 0, 3*testTimeout) }()

	// The word is left unchanged, so the only way for the waiter to return
	// nil early is our wake; keep waking until it has gone to sleep.
	deadline := time.Now().Add(testTimeout)
	for {
		n := wake(t, &word, 1)
		if n == 1 {
			break
		}
		if n != 0 {
			t.Fatalf("Wake: got %d woken, want 0 or 1", n)
		}
		if time.Now().After(deadline) {
			t.Fatal("waiter never went to sleep")
		}
		time.Sleep(time.Millisecond)
	}
	if err := <-errc; err != nil {
		t.Errorf("Wait: got %v, want nil", err)
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
	var word atomic.Uint32
	errc := make(chan error, 1)
	go func() { errc <- futex.Wait(&word, 0, 3*testTimeout) }()
	if !waitAsleep(t, selfPID, &word, 1) {
		t.Skip("cannot see futex sleepers in /proc")
	}
	if n := wake(t, &word, 0); n != 0 {
		t.Errorf("Wake(0): got %d woken, want 0", n)
	}
	if n := wake(t, &word, 1); n != 1 {
		t.Errorf("Wake(1): got %d woken, want 1", n)
	}
	if err := <-errc; err != nil {
		t.Errorf("Wait: got %v, want nil", err)
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
