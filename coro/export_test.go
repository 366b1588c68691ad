package coro

import (
	"context"
	"sync"
)

// SetGrantHook makes m call f(ticket) each time it hands itself to a
// waiter: under its queue lock, after the waiter became notified and
// before it is woken. f may call TryLock and cancel contexts, not Lock.
// Set it before m is shared.
func SetGrantHook(m *Mutex, f func(ticket uint64)) {
	m.q.hooks = &testHooks{granted: func(w *waiter) { f(w.ticket) }}
}

// atGrant maps the waiters of LockTicket and LockOnTicket to the function
// to call when they are granted the mutex.
var atGrant sync.Map // *waiter -> func()

// SetAtGrantHook makes m call the atGrant function of each waiter it
// hands itself to, under its queue lock, before the waiter is woken.
func SetAtGrantHook(m *Mutex) {
	m.q.hooks = &testHooks{granted: func(w *waiter) {
		if f, ok := atGrant.Load(w); ok {
			f.(func())()
		}
	}}
}

// LockTicket is Lock, also reporting the waiter's queue ticket (1, 2, ...
// in the order waiters entered the queue; 0 if it never queued), and
// calling f, if not nil, when the mutex is handed to this waiter (see
// SetAtGrantHook).
func LockTicket(m *Mutex, ctx context.Context, f func()) (Guard, uint64, error) {
	if err := ctx.Err(); err != nil {
		return Guard{}, 0, err
	}
	w := new(waiter)
	if f != nil {
		atGrant.Store(w, f)
		defer atGrant.Delete(w)
	}
	g, err := m.lockSlow(ctx, w)
	return g, w.ticket, err
}

// LockOnTicket is LockOn, passing cont the waiter's queue ticket, and
// calling f, if not nil, when an Unlock hands the mutex to this waiter
// (see SetAtGrantHook).
func LockOnTicket(m *Mutex, ctx context.Context, l *Loop, f func(), cont func(Guard, uint64, error)) error {
	w := new(waiter)
	if f != nil {
		atGrant.Store(w, f)
	}
	err := m.lockOn(ctx, l, w, func(g Guard, err error) {
		atGrant.Delete(w)
		cont(g, w.ticket, err)
	})
	if err != nil {
		atGrant.Delete(w)
	}
	return err
}

// Waiters is the length of m's queue.
func Waiters(m *Mutex) int {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	n := 0
	for w := m.q.head; w != nil; w = w.next {
		n++
	}
	return n
}

// Locked reports m's locked bit, and checks the lock word against the
// queue: the waiters bit is set exactly when the queue is not empty, and
// never without the locked bit.
func Locked(m *Mutex) (locked bool, consistent bool) {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	s := m.state.Load()
	w := s&mutexWaiters != 0
	return s&mutexLocked != 0, w == !m.q.empty() && (!w || s&mutexLocked != 0)
}

// Queued is how many waiters have ever entered m's queue.
func Queued(m *Mutex) uint64 {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	return m.q.tickets
}

// ProcessLocal is m's in-process Mutex, for tests that check that a
// refused call left it free.
func ProcessLocal(m *ProcessMutex) *Mutex { return &m.local }
