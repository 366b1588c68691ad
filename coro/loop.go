package coro

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// A Loop is an event loop: one goroutine that runs posted functions one at
// a time in the order they were posted. It is the design's EventLoop:
// Mutex.LockOn resumes its continuation through a post to the waiter's
// loop, so code that lives on a loop keeps running on it.
//
// NewLoop starts a loop on a goroutine of its own. The zero Loop is ready
// to take posts and runs on the goroutine that calls Run, for a program
// whose main goroutine is its loop:
//
//	var loop coro.Loop
//	loop.Post(start)
//	loop.Run() // until something calls loop.Close and the loop drains
//
// The design's EventLoop::current_or_null becomes LoopFrom: Go has no
// goroutine-local state, so code finds the loop it runs on through its
// context (WithLoop).
//
// A function that panics ends the loop's goroutine, as on any goroutine:
// on the goroutine NewLoop started that crashes the program; from Run the
// panic reaches Run's caller. A caller that recovers may call Run again:
// the loop keeps the functions posted after the one that panicked (among
// them, perhaps, the resumption of a LockOn waiter that holds a lock), and
// Done is not closed, since the loop was neither closed nor drained. A
// function that blocks holds up the loop; a continuation waiting for a
// lock should be a LockOn, not a Lock. A Loop must not be copied after
// first use.
type Loop struct {
	once     sync.Once // makes wake and done
	started  atomic.Bool
	mu       sync.Mutex
	queue    []func() // posted, not yet run
	spare    []func() // the previous batch, recycled
	reserved int      // posts promised to LockOn waiters
	closed   bool
	wake     chan struct{} // capacity 1: queue or closed changed
	done     chan struct{} // closed when Run has returned
}

// NewLoop starts a loop on a new goroutine. Close it to let the goroutine
// end.
func NewLoop() *Loop {
	l := new(Loop)
	l.init()
	l.started.Store(true)
	go l.run()
	return l
}

func (l *Loop) init() {
	l.once.Do(func() {
		l.wake = make(chan struct{}, 1)
		l.done = make(chan struct{})
	})
}

// Run runs the loop on the calling goroutine until it is closed and has
// drained (see Close); then Done is closed and Run returns nil. A loop runs
// once: Run returns ErrLoopRunning, at once, for a loop that NewLoop
// started or that Run is running or already ran. The exception is a Run
// that a posted function's panic ended: the loop may be run again.
func (l *Loop) Run() error {
	l.init()
	if !l.started.CompareAndSwap(false, true) {
		return ErrLoopRunning
	}
	l.run()
	return nil
}

// Post queues f to run on the loop. ErrLoopClosed after Close; ErrNoFunc
// for a nil f, which the loop's goroutine would call and crash on.
func (l *Loop) Post(f func()) error {
	if f == nil {
		return ErrNoFunc
	}
	l.init()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrLoopClosed
	}
	l.push(f)
	return nil
}

// Close stops the loop from taking new work; Post and LockOn then fail
// with ErrLoopClosed. It drains: functions posted before Close still run,
// and so do the continuations of LockOn calls made before Close (each
// once its lock is handed over or its context is done: a pending LockOn
// keeps the loop alive until then). Then the goroutine exits and Done is
// closed. Close does not wait, so the loop may close
// itself; it may be called more than once.
func (l *Loop) Close() {
	l.init()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.signal()
}

// Done is closed when a closed loop has drained and its Run (or the
// goroutine NewLoop started) has returned.
func (l *Loop) Done() <-chan struct{} {
	l.init()
	return l.done
}

// reserve promises one later post (postReserved) that cannot fail, even
// after Close; false if the loop is already closed.
func (l *Loop) reserve() bool {
	l.init()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.reserved++
	return true
}

// unreserve gives back a reservation that will not be posted.
func (l *Loop) unreserve() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reserved == 0 {
		panic("coro: loop unreserve without a reservation")
	}
	l.reserved--
	l.signal() // a closed loop may now be able to exit
}

func (l *Loop) postReserved(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reserved == 0 {
		panic("coro: loop post without a reservation")
	}
	l.reserved--
	l.push(f)
}

func (l *Loop) push(f func()) {
	l.queue = append(l.queue, f)
	l.signal()
}

func (l *Loop) signal() {
	select {
	case l.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

func (l *Loop) run() {
	var batch []func()
	next := 0 // batch[next:] has not run
	drained := false
	defer func() {
		if drained {
			close(l.done)
			return
		}
		l.unwind(batch[next:])
	}()
	for {
		l.mu.Lock()
		for len(l.queue) == 0 {
			if l.closed && l.reserved == 0 {
				l.mu.Unlock()
				drained = true
				return
			}
			l.mu.Unlock()
			<-l.wake
			l.mu.Lock()
		}
		batch = l.queue
		l.queue, l.spare = l.spare[:0], nil
		l.mu.Unlock()

		for next = 0; next < len(batch); {
			f := batch[next]
			batch[next] = nil
			next++ // before f runs: a function that panics is not run again
			f()
		}

		l.mu.Lock()
		l.spare = batch
		l.mu.Unlock()
		batch, next = nil, 0
	}
}

// unwind is run's way out when a posted function panicked (or called
// runtime.Goexit): the functions of its batch that did not run go back to
// the front of the queue, and the loop may be run again. The loop is not
// done (only a closed, drained loop is), and what it owes stays owed: the
// resumption of a LockOn waiter that was handed a lock, behind the
// function that panicked, still runs once Run is called again.
func (l *Loop) unwind(rest []func()) {
	l.mu.Lock()
	l.queue = append(slices.Clip(rest), l.queue...)
	l.mu.Unlock()
	l.started.Store(false)
}

type loopKey struct{}

// WithLoop returns a context that carries l, for code that runs on l to
// find its loop (LoopFrom; LockOn with a nil loop).
func WithLoop(ctx context.Context, l *Loop) context.Context {
	return context.WithValue(ctx, loopKey{}, l)
}

// LoopFrom returns the loop ctx carries, or nil.
func LoopFrom(ctx context.Context) *Loop {
	l, _ := ctx.Value(loopKey{}).(*Loop)
	return l
}
