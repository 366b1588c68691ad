package coro_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/internal/testproc"
)

// leakWait bounds how long TestMain waits for goroutines to wind down: a
// leak never ends, while a goroutine that is only slow to end (a loaded
// machine, the race detector) must not fail the run.
const leakWait = testproc.Timeout

// TestMain fails the run if goroutines outlive the tests.
// Helper processes (see process_test.go) run instead when the environment
// names one.
func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	testproc.Main(m, helpers, func() error { return noLeak(before) })
}

func noLeak(before int) error {
	deadline := time.Now().Add(leakWait)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return nil
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			return fmt.Errorf("coro: %d goroutines left, want %d:\n%s", n, before, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// goid returns the calling goroutine's id, read from its stack header.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	b = b[:bytes.IndexByte(b, ' ')]
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}

// mustFree checks that m is unlocked, with an empty queue.
func mustFree(tb testing.TB, m *coro.Mutex) {
	tb.Helper()
	locked, ok := coro.Locked(m)
	if !ok {
		tb.Fatal("lock word disagrees with the queue")
	}
	if locked || coro.Waiters(m) != 0 {
		tb.Fatalf("got locked=%v waiters=%d, want a free mutex", locked, coro.Waiters(m))
	}
}

// mustHeld checks that m is locked and has n waiters.
func mustHeld(tb testing.TB, m *coro.Mutex, n int) {
	tb.Helper()
	locked, ok := coro.Locked(m)
	if !ok {
		tb.Fatal("lock word disagrees with the queue")
	}
	if !locked || coro.Waiters(m) != n {
		tb.Fatalf("got locked=%v waiters=%d, want locked with %d waiters", locked, coro.Waiters(m), n)
	}
}

// unlock unlocks g and fails the test on an error.
func unlock(tb testing.TB, g coro.Guard) {
	tb.Helper()
	if err := g.Unlock(); err != nil {
		tb.Fatalf("Unlock: got %v, want nil", err)
	}
}

// closeLoop closes l and waits for it to drain.
func closeLoop(tb testing.TB, l *coro.Loop) {
	tb.Helper()
	l.Close()
	<-l.Done()
}

// result of a Lock run on another goroutine.
type result struct {
	g   coro.Guard
	err error
}

// lockAsync starts Lock(ctx) on a new goroutine.
func lockAsync(m *coro.Mutex, ctx context.Context) <-chan result {
	ch := make(chan result, 1)
	go func() {
		g, err := m.Lock(ctx)
		ch <- result{g, err}
	}()
	return ch
}

// lockOnAsync is LockOn(ctx, l) with its outcome sent on a channel.
func lockOnAsync(tb testing.TB, m *coro.Mutex, ctx context.Context, l *coro.Loop) <-chan result {
	tb.Helper()
	ch := make(chan result, 1)
	if err := m.LockOn(ctx, l, func(g coro.Guard, err error) { ch <- result{g, err} }); err != nil {
		tb.Fatalf("LockOn: got %v, want nil", err)
	}
	return ch
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
