package coro_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/shmlock/shmlock/coro"
)

func TestLoopRunsInOrder(t *testing.T) {
	t.Parallel()
	l := coro.NewLoop()
	const n = 1000
	got := make([]int, 0, n)
	for i := range n {
		if err := l.Post(func() { got = append(got, i) }); err != nil {
			t.Fatalf("Post: got %v, want nil", err)
		}
	}
	closeLoop(t, l) // drains
	for i, v := range got {
		if v != i {
			t.Fatalf("run %d was post %d", i, v)
		}
	}
	if len(got) != n {
		t.Fatalf("ran %d, want %d", len(got), n)
	}
	if err := l.Post(func() {}); !errors.Is(err, coro.ErrLoopClosed) {
		t.Fatalf("Post after Close: got %v, want ErrLoopClosed", err)
	}
	l.Close() // again: no effect
}

// A nil function is refused: queued, the loop's goroutine would call it and
// the process would die of the nil call (it did). The loop goes on.
func TestLoopPostNil(t *testing.T) {
	t.Parallel()
	l := coro.NewLoop()
	if err := l.Post(nil); !errors.Is(err, coro.ErrNoFunc) {
		t.Fatalf("Post(nil): got %v, want ErrNoFunc", err)
	}
	ran := false
	if err := l.Post(func() { ran = true }); err != nil {
		t.Fatalf("Post: got %v, want nil", err)
	}
	closeLoop(t, l)
	if !ran {
		t.Fatal("the loop did not run the function posted after the nil one")
	}
}

func TestLoopClosesItself(t *testing.T) {
	t.Parallel()
	l := coro.NewLoop()
	gate := make(chan struct{})
	ran := false
	_ = l.Post(func() { <-gate })
	_ = l.Post(func() { l.Close() })
	if err := l.Post(func() { ran = true }); err != nil { // before Close: still runs
		t.Fatalf("Post: got %v, want nil", err)
	}
	close(gate)
	<-l.Done()
	if !ran {
		t.Fatal("a function posted before Close did not run")
	}
}

// TestLoopAffinity: the continuation runs on the waiter's loop, never on
// the goroutine that unlocked, even when that goroutine is the loop
// itself (then later, through a post, not inside Unlock).
func TestLoopAffinity(t *testing.T) {
	t.Parallel()
	var m coro.Mutex
	loops := []*coro.Loop{coro.NewLoop(), coro.NewLoop()}
	ids := make([]uint64, len(loops))
	for i, l := range loops {
		ch := make(chan uint64)
		_ = l.Post(func() { ch <- goid() })
		ids[i] = <-ch
	}
	if ids[0] == ids[1] {
		t.Fatal("two loops share a goroutine")
	}

	// Unlocked by a plain goroutine.
	g, _ := m.Lock(context.Background())
	type resumed struct {
		id uint64
		g  coro.Guard
	}
	got := make(chan resumed, 1)
	err := m.LockOn(context.Background(), loops[0], func(g coro.Guard, err error) {
		if err != nil {
			t.Errorf("LockOn: got %v, want nil", err)
		}
		got <- resumed{goid(), g}
	})
	if err != nil {
		t.Fatal(err)
	}
	unlocker := goid()
	unlock(t, g)
	r := <-got
	if r.id != ids[0] || r.id == unlocker {
		t.Fatalf("continuation ran on goroutine %d; want loop %d, not unlocker %d", r.id, ids[0], unlocker)
	}

	// Unlocked on loop 0 by the continuation's holder, for a waiter on
	// loop 1 and then one on loop 0 itself.
	for _, target := range []int{1, 0} {
		inUnlock := make(chan bool, 1)
		unlocking := false
		err = m.LockOn(context.Background(), loops[target], func(g coro.Guard, err error) {
			if target == 0 {
				inUnlock <- unlocking // both on loop 0
			}
			got <- resumed{goid(), g}
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		_ = loops[0].Post(func() {
			unlocking = true
			unlock(t, r.g)
			unlocking = false
			close(done)
		})
		<-done
		if target == 0 && <-inUnlock {
			t.Fatal("the continuation ran inside Unlock")
		}
		r = <-got
		if r.id != ids[target] {
			t.Fatalf("continuation ran on goroutine %d, want loop %d", r.id, ids[target])
		}
	}
	unlock(t, r.g)
	mustFree(t, &m)
	for _, l := range loops {
		closeLoop(t, l)
	}
}

func TestLockOnLoopChoice(t *testing.T) {
	t.Parallel()
	var m coro.Mutex
	if err := m.LockOn(context.Background(), nil, func(coro.Guard, error) {}); !errors.Is(err, coro.ErrNoLoop) {
		t.Fatalf("LockOn without a loop: got %v, want ErrNoLoop", err)
	}
	l := coro.NewLoop()
	ctx := coro.WithLoop(context.Background(), l)
	if coro.LoopFrom(ctx) != l || coro.LoopFrom(context.Background()) != nil {
		t.Fatal("LoopFrom does not return the loop WithLoop stored")
	}
	if err := m.LockOn(ctx, l, nil); !errors.Is(err, coro.ErrNoCont) {
		t.Fatalf("LockOn without a continuation: got %v, want ErrNoCont", err)
	}
	mustFree(t, &m)
	r := <-lockOnAsync(t, &m, ctx, nil) // resumes on LoopFrom(ctx)
	unlock(t, r.g)
	closeLoop(t, l)
	if err := m.LockOn(ctx, nil, func(coro.Guard, error) { t.Error("continuation ran") }); !errors.Is(err, coro.ErrLoopClosed) {
		t.Fatalf("LockOn on a closed loop: got %v, want ErrLoopClosed", err)
	}
	mustFree(t, &m)
}

// TestLoopCloseWaitsForWaiters: a LockOn made before Close still gets its
// continuation run (Close drains), and only then does the loop exit.
func TestLoopCloseWaitsForWaiters(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var m coro.Mutex
		l := coro.NewLoop()
		g, _ := m.Lock(context.Background())
		got := lockOnAsync(t, &m, context.Background(), l)
		l.Close()
		synctest.Wait()
		select {
		case <-l.Done():
			t.Fatal("the loop exited with a continuation pending")
		default:
		}
		unlock(t, g)
		r := <-got
		if r.err != nil {
			t.Fatalf("LockOn: got %v, want nil", r.err)
		}
		unlock(t, r.g)
		<-l.Done()
		mustFree(t, &m)
	})
}

// TestLoopRunOnCaller: a zero Loop takes posts before it runs, runs them on
// the goroutine that calls Run, in order, and Run returns once the loop is
// closed and drained.
func TestLoopRunOnCaller(t *testing.T) {
	t.Parallel()
	var l coro.Loop
	var got []int
	for i := range 3 {
		if err := l.Post(func() { got = append(got, i) }); err != nil {
			t.Fatalf("Post before Run: got %v, want nil", err)
		}
	}
	_ = l.Post(func() {
		_ = l.Post(func() { got = append(got, 3) }) // from the loop itself
		l.Close()
	})
	if err := l.Run(); err != nil {
		t.Fatalf("Run: got %v, want nil", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done is not closed after Run returned")
	}
	if want := []int{0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	if err := l.Run(); !errors.Is(err, coro.ErrLoopRunning) {
		t.Fatalf("second Run: got %v, want ErrLoopRunning", err)
	}
}

func TestLoopRunOfStartedLoop(t *testing.T) {
	t.Parallel()
	l := coro.NewLoop()
	defer closeLoop(t, l)
	if err := l.Run(); !errors.Is(err, coro.ErrLoopRunning) {
		t.Fatalf("Run of a NewLoop: got %v, want ErrLoopRunning", err)
	}
}

// TestLockOnCallerLoop: LockOn resumes on a loop that runs on the test's
// own goroutine, the way a program whose main goroutine is its loop uses it.
func TestLockOnCallerLoop(t *testing.T) {
	t.Parallel()
	var m coro.Mutex
	held, err := m.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var l coro.Loop
	onLoop := false
	if err := l.Post(func() { onLoop = true }); err != nil {
		t.Fatal(err)
	}
	resumed := false
	if err := m.LockOn(context.Background(), &l, func(g coro.Guard, err error) {
		resumed = onLoop && err == nil && g.Held() // onLoop is only set on this goroutine
		_ = g.Unlock()
		l.Close()
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = held.Unlock() }()
	if err := l.Run(); err != nil {
		t.Fatal(err)
	}
	if !resumed {
		t.Fatal("the continuation did not run on the caller's loop with the lock")
	}
}
