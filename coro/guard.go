package coro

// A Guard is one hold of a Mutex, returned by Lock, TryLock and LockOn.
// It is a small value: copying it copies the right to unlock, which any
// one copy may use once. The zero Guard holds nothing.
type Guard struct {
	m    *Mutex
	word uint64 // the lock word of the hold: wordOf(epoch)|mutexLocked
}

func guardOf(m *Mutex, e uint64) Guard { return Guard{m: m, word: wordOf(e) | mutexLocked} }

// Unlock releases the hold: to the longest waiter if anyone waits, or
// else unlocks the mutex. ErrNotOwner if the hold already ended (a second
// Unlock, a Guard of an earlier hold, the zero Guard); the mutex is then
// untouched.
func (g Guard) Unlock() error {
	if m := g.m; m != nil && m.state.CompareAndSwap(g.word, g.word+unlockDelta) {
		return nil
	}
	return g.unlockSlow()
}

// unlockSlow is kept apart so that Unlock stays one CAS (the common case).
func (g Guard) unlockSlow() error {
	m, e := g.m, g.Epoch()
	if m == nil {
		return ErrNotOwner
	}
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	for {
		s := m.state.Load()
		if !heldBy(s, e) {
			return ErrNotOwner
		}
		if s&mutexWaiters != 0 {
			m.passOn(e)
			return nil
		}
		// The last waiter was cancelled after the fast path looked.
		if m.state.CompareAndSwap(s, wordOf(nextEpoch(e))) {
			return nil
		}
	}
}

// Held reports whether g's hold is current: g came from a successful
// lock and has not been unlocked.
func (g Guard) Held() bool { return g.m != nil && heldBy(g.m.state.Load(), g.Epoch()) }

// Epoch numbers g's hold: every hold of one Mutex has a larger epoch than
// the holds before it (modulo 2^62), so it can fence writes made under
// the lock. The zero Guard's epoch is 0.
func (g Guard) Epoch() uint64 { return epochOf(g.word) }
