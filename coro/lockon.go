package coro

import "context"

// LockOn locks m for a continuation that runs on loop l: cont(g, nil) once
// m is held, or cont(Guard{}, ctx.Err()) if ctx is done first. It never
// blocks. cont runs exactly once, on l's goroutine, always through a post
// to l, never on the goroutine that unlocked m nor inside LockOn; it must
// Unlock g (it may do so later, from anywhere).
//
// A nil l means LoopFrom(ctx); ErrNoLoop if ctx carries none. ErrLoopClosed
// if l is closed, ErrNoCont if cont is nil. On an error cont never runs and
// m is untouched.
//
// Waiting and cancellation are those of Lock: FIFO with the goroutine
// waiters; a waiter cancelled while waiting leaves the queue; one that
// was handed m but whose ctx is done before cont starts passes m on and
// gets ctx.Err(). Once cont has started with a Guard, ctx no longer
// matters.
func (m *Mutex) LockOn(ctx context.Context, l *Loop, cont func(Guard, error)) error {
	return m.lockOn(ctx, l, new(waiter), cont)
}

func (m *Mutex) lockOn(ctx context.Context, l *Loop, w *waiter, cont func(Guard, error)) error {
	if cont == nil {
		return ErrNoCont
	}
	if l == nil {
		if l = LoopFrom(ctx); l == nil {
			return ErrNoLoop
		}
	}
	if !l.reserve() { // from here on, one post to l cannot fail
		return ErrLoopClosed
	}
	if err := ctx.Err(); err != nil {
		l.postReserved(func() { cont(Guard{}, err) })
		return nil
	}
	w.loop, w.q, w.ctx = l, &m.q, ctx
	w.cont = func(e uint64, err error) {
		if err != nil {
			cont(Guard{}, err)
			return
		}
		cont(guardOf(m, e), nil)
	}
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	e, acquired := m.acquireOrQueue()
	if acquired {
		// Handed over at once: notified until it resumes on l, and
		// cancellable in between like any notified waiter.
		w.epoch = e
		w.state.Store(notified)
	} else {
		m.q.push(w)
	}
	if ctx.Done() != nil {
		// Registered under q.mu, so w.stop is set before any resumption
		// is posted; the callback itself waits for q.mu.
		w.stop = context.AfterFunc(ctx, func() { m.q.cancel(w, m) })
	}
	if acquired {
		l.postReserved(w.resume)
	}
	return nil
}
