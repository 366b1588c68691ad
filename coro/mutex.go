package coro

import (
	"context"
	"sync/atomic"
)

// The lock word, Mutex.state:
//
//	bit 0      mutexLocked   the mutex is held: by a Guard, or by a waiter it was handed to
//	bit 1      mutexWaiters  the wait queue is not empty
//	bits 2..63 epoch         numbers the holds; a Guard remembers the epoch of its hold
//
// The logical states are U = !locked, L0 = locked && !waiters and
// L1 = locked && waiters; waiters without locked never occurs. Transitions:
//
//	Lock, fast path          U  -> L0        one CAS, without the queue lock
//	Lock, queued             L0 -> L1, L1    under the queue lock (q.mu)
//	Unlock, fast path        L0 -> U         one CAS on exactly epoch|locked; epoch+1
//	Unlock with waiters      L1 -> L1 or L0  under q.mu: epoch+1, still locked, and
//	                                         the front waiter owns it (handoff)
//	waiting waiter cancels   L1 -> L1 or L0  under q.mu; the holder keeps the mutex
//	notified waiter cancels  as its Unlock   under q.mu: the hold it was handed
//	                                         moves on (to the next waiter, or U)
//
// Every change of hands advances the epoch, so the Guard of an earlier hold
// fails the fast CAS and its Unlock reports ErrNotOwner. While anyone waits
// the word never passes through U: a waiter is never overtaken by TryLock
// or by a Lock that arrives later. Strict FIFO is what the design asks for;
// its price is a convoy under contention (every handoff waits for the
// scheduler to run the next holder), which sync.Mutex avoids by barging.
// With the waiters bit set the word changes only under q.mu, so the
// handoff can rewrite it without a retry loop.
const (
	mutexLocked     = 1 << iota // held
	mutexWaiters                // the wait queue is not empty
	mutexEpochShift = iota      // the epoch counts from this bit

	epochMask   = 1<<(64-mutexEpochShift) - 1      // epochs wrap after 2^62 holds
	unlockDelta = 1<<mutexEpochShift - mutexLocked // added to a hold's word: epoch+1, unlocked
)

func epochOf(s uint64) uint64        { return s >> mutexEpochShift }
func nextEpoch(e uint64) uint64      { return (e + 1) & epochMask }
func wordOf(e uint64) uint64         { return e << mutexEpochShift }
func heldBy(s uint64, e uint64) bool { return s&mutexLocked != 0 && epochOf(s) == e }

// A Mutex is a mutual exclusion lock whose Lock waits in FIFO order and
// can be cancelled through its context. Unlock hands the mutex straight to
// the longest waiter that is still interested, and a waiter on a Loop is
// resumed on that loop (LockOn).
//
// The zero Mutex is unlocked and ready to use. A Mutex must not be copied
// after first use (go vet reports copies).
//
// Only the Guard that Lock returns unlocks, once. The Guard is a value
// (the mutex and the epoch of the hold), so locking allocates nothing, and
// a stale Guard is harmless: its epoch no longer matches. In the terminology of
// the Go memory model, the n'th successful Unlock synchronizes before the
// m'th Lock returns a Guard, for any n < m.
type Mutex struct {
	_     noCopy
	state atomic.Uint64
	q     waitq
}

// Lock locks m, waiting in FIFO order while it is held. If ctx is done
// first, Lock returns ctx.Err() and m is as it was; a context already done
// fails at once, even when m is free. If ctx is done just as m is handed
// over, one step on the waiter decides: either Lock returns the held Guard
// and nil, or it passes m on (to the next waiter, or unlocks it) and
// returns ctx.Err(); never both, never neither. The waiting goroutine
// resumes itself: no goroutine is started for it.
func (m *Mutex) Lock(ctx context.Context) (Guard, error) {
	if err := ctx.Err(); err != nil {
		return Guard{}, err
	}
	if s := m.state.Load(); s&(mutexLocked|mutexWaiters) == 0 && m.state.CompareAndSwap(s, s|mutexLocked) {
		return guardOf(m, epochOf(s)), nil
	}
	return m.lockSlow(ctx, nil)
}

// TryLock locks m only if it is free and nobody waits; it never waits.
func (m *Mutex) TryLock() (Guard, bool) {
	if s := m.state.Load(); s&(mutexLocked|mutexWaiters) == 0 && m.state.CompareAndSwap(s, s|mutexLocked) {
		return guardOf(m, epochOf(s)), true
	}
	return Guard{}, false
}

// lockSlow is kept apart so that Lock stays a context check and one CAS.
// w, if not nil, is the waiter to queue (tests read its ticket).
func (m *Mutex) lockSlow(ctx context.Context, w *waiter) (Guard, error) {
	pooled := w == nil
	if pooled {
		w = getWaiter() // most likely needed: the mutex was held a moment ago
	} else {
		w.ready = make(chan struct{}, 1)
	}
	m.q.mu.Lock()
	if e, ok := m.acquireOrQueue(); ok {
		m.q.mu.Unlock()
		if pooled {
			putWaiter(w)
		}
		return guardOf(m, e), nil
	}
	m.q.push(w)
	m.q.mu.Unlock()
	e, err := m.q.await(ctx, w, m)
	if pooled {
		putWaiter(w) // off the queue and granted or cancelled: nobody refers to it
	}
	if err != nil {
		return Guard{}, err
	}
	return guardOf(m, e), nil
}

// acquireOrQueue, under q.mu, locks m if it is free (then the queue is
// empty) and reports the epoch of the hold; otherwise it sets the waiters
// bit, and the caller must queue its waiter before releasing q.mu.
func (m *Mutex) acquireOrQueue() (uint64, bool) {
	for {
		s := m.state.Load()
		if s&mutexLocked == 0 {
			if m.state.CompareAndSwap(s, s|mutexLocked) {
				return epochOf(s), true
			}
			continue
		}
		if s&mutexWaiters != 0 || m.state.CompareAndSwap(s, s|mutexWaiters) {
			return 0, false
		}
	}
}

// passOn ends the hold of epoch e, under q.mu: the front waiter is handed
// the mutex (no moment unlocked in between), or, if none waits, m unlocks.
// Only the hold's owner gets here (unlockSlow checked the epoch; a
// cancelled waiter owns the epoch it was handed and has no Guard), so the
// word cannot change under us: with the waiters bit set only q.mu's holder
// changes it, and without it only an Unlock of epoch e could.
func (m *Mutex) passOn(e uint64) {
	s := m.state.Load()
	if !heldBy(s, e) {
		panic("coro: handoff of a hold the mutex does not record")
	}
	next := wordOf(nextEpoch(e))
	w := m.q.pop()
	if w != nil {
		next |= mutexLocked
		if !m.q.empty() {
			next |= mutexWaiters
		}
	}
	if !m.state.CompareAndSwap(s, next) {
		panic("coro: lock word changed during a handoff")
	}
	if w != nil {
		m.q.grant(w, nextEpoch(e))
	}
}

// drained clears the waiters bit when the last waiter was cancelled. The
// mutex stays held by its holder, whose Unlock may now take the fast path.
func (m *Mutex) drained() { m.state.And(^uint64(mutexWaiters)) }

// noCopy makes go vet's copylocks check report copies of a Mutex.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}
