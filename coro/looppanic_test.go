package coro_test

import (
	"context"
	"errors"
	"testing"

	"github.com/shmlock/shmlock/coro"
)

// runRecovered runs l on the calling goroutine and returns what a posted
// function panicked with (nil if Run returned).
func runRecovered(tb testing.TB, l *coro.Loop) (v any) {
	tb.Helper()
	defer func() { v = recover() }()
	if err := l.Run(); err != nil {
		tb.Fatalf("Run: got %v, want nil", err)
	}
	return nil
}

// A function posted to a loop that runs on the caller's goroutine (Run)
// panics, and the caller recovers. The functions posted after it, here a
// LockOn continuation that was handed the mutex, must not be lost: the
// loop is neither done (it was not closed) nor dead, and a second Run goes
// on with them. Before, Run's deferred close(done) ran on the panic: Done
// said the loop had drained, Post still took work that never ran, the
// next Run reported ErrLoopRunning, and the mutex handed to the LockOn
// waiter stayed held forever.
func TestLoopRunPanicKeepsTheRest(t *testing.T) {
	t.Parallel()
	var m coro.Mutex
	held, err := m.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var l coro.Loop
	if err := l.Post(func() { panic("posted") }); err != nil {
		t.Fatal(err)
	}
	resumed := false
	if err := m.LockOn(context.Background(), &l, func(g coro.Guard, err error) {
		resumed = err == nil && g.Held()
		_ = g.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	unlock(t, held) // posts the resumption behind the panicking function
	after := false
	if err := l.Post(func() { after = true }); err != nil {
		t.Fatal(err)
	}

	if v := runRecovered(t, &l); v != "posted" {
		t.Fatalf("Run: got panic %v, want the posted function's", v)
	}
	select {
	case <-l.Done():
		t.Fatal("Done is closed, but the loop was not closed")
	default:
	}
	if err := l.Post(l.Close); err != nil {
		t.Fatalf("Post after a recovered panic: got %v, want nil", err)
	}
	if v := runRecovered(t, &l); v != nil {
		t.Fatalf("second Run: got panic %v", v)
	}
	if !resumed || !after {
		t.Fatalf("got resumed=%v after=%v, want the functions after the panic run", resumed, after)
	}
	mustFree(t, &m)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done is not closed after the closed loop drained")
	}
	if err := l.Run(); !errors.Is(err, coro.ErrLoopRunning) {
		t.Fatalf("Run of a drained loop: got %v, want ErrLoopRunning", err)
	}
}
