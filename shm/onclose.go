package shm

import "sync"

// OnClose arranges for f to run when Close begins, after Closed reports
// true. Close runs every such f at once, each in a goroutine of its own,
// and returns only when all have returned, so f (or a goroutine it waits
// for) can undo what this process left half-done in the file before Close
// returns: a lock package's waiter that holds part of a lock while it
// waits for the rest wakes, sees Closed and gives that part back. f must
// return soon.
//
// stop cancels the arrangement; it reports false if Close has begun
// (f runs, or is about to) or stop was called before. ok is false, and f
// will not run, if Close had begun already. A nil f is nothing to run:
// stop then reports false, and ok is as for any f.
func (s *Segment) OnClose(f func()) (stop func() bool, ok bool) {
	if f == nil {
		s.onClose.mu.Lock()
		defer s.onClose.mu.Unlock()
		return func() bool { return false }, !s.onClose.ran
	}
	return s.onClose.add(f)
}

// closeHooks are the functions of OnClose.
type closeHooks struct {
	mu   sync.Mutex
	next uint64
	fs   map[uint64]func()
	ran  bool // Close has taken fs
}

func (h *closeHooks) add(f func()) (stop func() bool, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ran {
		return func() bool { return false }, false
	}
	if h.fs == nil {
		h.fs = make(map[uint64]func())
	}
	id := h.next
	h.next++
	h.fs[id] = f
	return func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.fs[id]; !ok {
			return false
		}
		delete(h.fs, id)
		return true
	}, true
}

// run runs every function and returns when all have.
func (h *closeHooks) run() {
	h.mu.Lock()
	fs := h.fs
	h.fs, h.ran = nil, true
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Go(f)
	}
	wg.Wait()
}
