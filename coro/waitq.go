package coro

import (
	"context"
	"sync"
	"sync/atomic"
)

// The wait queue and its handoff protocol know nothing of how a lock is
// owned: the lock (the owner interface) says what ending a hold means and
// numbers its holds with epochs. A waiter moves through the design's states:
//
//	waiting  -> notified  the owner handed it a hold (under q.mu); it is not told yet
//	waiting  -> canceled  its context is done: it leaves the queue (under q.mu) and
//	                      the lock is untouched
//	notified -> resumed   it takes the hold: Lock returns, or its continuation
//	                      starts on its loop
//	notified -> canceled  its context won: the hold is passed on at once, as if
//	                      the waiter had unlocked it (to the next waiter, or unlocked)
//
// resumed and canceled are final. Only q.mu's holder leaves waiting, and
// it unlinks the waiter as it does, so the queue holds exactly the waiting
// waiters and Unlock has no cancelled entries to skip. The two ways out of
// notified can race (a loop runs the resumption while a context fires on
// another goroutine); one compare-and-swap on the state decides, so a
// handed-over hold is either taken or passed on, exactly once.
const (
	waiting uint32 = iota
	notified
	resumed
	canceled
)

// owner is what the queue needs from a lock. Both are called with q.mu held.
type owner interface {
	// passOn ends the hold of epoch e: it grants the front waiter the
	// lock (q.pop, q.grant) or, if none waits, unlocks.
	passOn(e uint64)
	// drained is told that cancellation emptied the queue.
	drained()
}

type waiter struct {
	next, prev *waiter
	state      atomic.Uint32
	ticket     uint64        // position in the queue's history: 1, 2, ...; 0 if never queued
	epoch      uint64        // the hold granted; valid from notified on
	ready      chan struct{} // a goroutine waiter: capacity 1, one send on grant

	// A waiter on a loop (LockOn).
	loop *Loop
	q    *waitq
	ctx  context.Context
	cont func(epoch uint64, err error)
	stop func() bool // unregisters the cancellation callback
}

// waitq is a FIFO of waiters and the lock (the design's state_mu_) under
// which the queue and the owner's slow paths run.
type waitq struct {
	mu         sync.Mutex
	head, tail *waiter
	tickets    uint64
	hooks      *testHooks
}

// testHooks lets tests stop the protocol at chosen points; nil otherwise.
type testHooks struct {
	granted func(w *waiter) // under q.mu: after waiting -> notified, before w is woken
}

func (q *waitq) empty() bool { return q.head == nil }

func (q *waitq) push(w *waiter) {
	q.tickets++
	w.ticket = q.tickets
	w.state.Store(waiting)
	w.prev, w.next = q.tail, nil
	if q.tail == nil {
		q.head = w
	} else {
		q.tail.next = w
	}
	q.tail = w
}

func (q *waitq) remove(w *waiter) {
	if w.prev == nil {
		q.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		q.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.next, w.prev = nil, nil
}

func (q *waitq) pop() *waiter {
	w := q.head
	if w != nil {
		q.remove(w)
	}
	return w
}

// grant hands the hold of epoch e to w, popped by the owner under q.mu,
// and wakes it: a goroutine waiter directly, a loop waiter through a post
// to its loop (reserved by LockOn, so it cannot fail).
func (q *waitq) grant(w *waiter, e uint64) {
	w.epoch = e
	w.state.Store(notified)
	if q.hooks != nil && q.hooks.granted != nil {
		q.hooks.granted(w)
	}
	if w.loop != nil {
		w.loop.postReserved(w.resume)
	} else {
		w.ready <- struct{}{} // never blocks: one grant per queueing
	}
}

// await waits, on the calling goroutine, for w to be granted a hold or
// for ctx to be done. The waiter is resumed when this goroutine receives
// the grant; if it sees ctx first, cancel decides.
func (q *waitq) await(ctx context.Context, w *waiter, o owner) (uint64, error) {
	if done := ctx.Done(); done == nil {
		// A context that is never done (context.Background): a plain
		// receive. A select locks and unlocks both channels around every
		// wait (with selectgo, a tenth of a queued handoff's CPU).
		<-w.ready
	} else {
		select {
		case <-w.ready:
		case <-done:
			q.cancel(w, o)
			return 0, ctx.Err()
		}
	}
	w.state.Store(resumed) // only this goroutine leaves notified
	return w.epoch, nil
}

// cancel withdraws w after its context is done, and reports false if it
// had already resumed (then there is nothing to do).
func (q *waitq) cancel(w *waiter, o owner) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case w.state.CompareAndSwap(waiting, canceled):
		q.remove(w)
		if q.empty() {
			o.drained()
		}
		if w.loop != nil {
			w.loop.postReserved(w.resume)
		}
		return true
	case w.state.CompareAndSwap(notified, canceled):
		o.passOn(w.epoch) // its resumption, already posted, reports ctx.Err()
		return true
	}
	return false
}

// resume runs on a loop waiter's loop, posted once: by the grant, or by
// the cancellation of a waiting waiter.
func (w *waiter) resume() {
	if w.state.CompareAndSwap(notified, resumed) {
		if w.stop != nil {
			w.stop()
		}
		w.cont(w.epoch, nil)
		return
	}
	// Cancelled. If the hold had been handed over, wait until cancel has
	// passed it on (it holds q.mu from its CAS to the end), so that the
	// continuation never sees the mutex still held on its behalf.
	w.q.mu.Lock()
	w.q.mu.Unlock() // empty on purpose: a barrier
	w.cont(0, w.ctx.Err())
}

// Goroutine waiters are recycled: a contended Lock would otherwise
// allocate a waiter every time it queues. Their channels are not: a
// channel made inside a testing/synctest bubble must not be used outside
// it, and a pool would hand it to any goroutine.
var waiterPool = sync.Pool{New: func() any { return new(waiter) }}

func getWaiter() *waiter {
	w := waiterPool.Get().(*waiter)
	w.ready = make(chan struct{}, 1)
	return w
}

// putWaiter recycles a goroutine waiter that is off the queue; its grant,
// if any, has been sent (grant runs under q.mu, and cancel takes it).
func putWaiter(w *waiter) {
	*w = waiter{}
	waiterPool.Put(w)
}
