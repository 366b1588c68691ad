package spinlock

import (
	"fmt"

	"github.com/shmlock/shmlock/internal/racesync"
	"github.com/shmlock/shmlock/layout"
)

// ErrChanged is ForceUnlock's error when the lock changed hands while it
// looked: nothing was done, and a second try sees the new holder.
var ErrChanged = fmt.Errorf("spinlock: the lock changed hands meanwhile")

// ForceUnlock frees the lock whoever holds it, alive or not, and returns
// the identity it freed: for an operator who knows the holder is stuck
// (shmctl unlock --force). In PIDTID mode the lock is taken over and
// released, as a reclaim would, so the generation advances past every
// token the holder had, and the slot is marked inconsistent (the holder
// may have stopped half-way); the holder's own release then fails with
// ErrNotOwner. In Token mode the token is cleared, and the holder's
// Unlock fails the same way. ErrNotHeld if the lock is free; ErrChanged
// if its holder changed meanwhile (nothing done).
//
// Forcing a holder that is not stuck but running is a race that no check
// closes: a release (or a nested lock) that has passed its checks before
// the takeover goes on writing the slot without reading it again, and its
// stores may land after the lock was freed, on the next holder's hold:
// TID 0 (that holder's release then fails with ErrNotOwner and the lock
// stays held while it lives), a recursion count (its release then only
// decrements; a later acquisition of a free slot with a count resets it
// and marks the slot inconsistent), or an older generation (fencing
// tokens repeat). Its final CAS of PID fails unless the next holder is of
// the holder's own process, whose hold it then frees (two holders). So
// force only a holder known to be stuck, or dead.
func (l *Lock) ForceUnlock() (Identity, error) {
	if l.closed() {
		return Identity{}, l.closedErr()
	}
	if l.mode == Token {
		t := l.slot.Token.Load()
		if t == 0 {
			return Identity{}, ErrNotHeld
		}
		if !l.slot.Token.CompareAndSwap(t, 0) {
			return Identity{}, ErrChanged
		}
		if l.slot.Pad.Load()&layout.PadSleepers != 0 {
			l.wakeOne()
		}
		return Identity{Token: t}, nil
	}
	s := l.slot
	owner := Identity{PID: s.PID.Load(), TID: s.TID.Load()}
	if owner.PID == 0 {
		return Identity{}, ErrNotHeld
	}
	me := NewHolder()
	if !s.PID.CompareAndSwap(owner.PID, me.PID) {
		return Identity{}, ErrChanged
	}
	if racesync.Enabled { // a takeover, as reclaim's; l.release releases it
		racesync.Acquire(l.word)
	}
	s.TID.Store(me.TID)
	s.RecursionCount.Store(layout.SlotInconsistent)
	s.Token.Add(1)
	testHookForceTakenOver()
	// The holder forced out may be inside its release, past its checks
	// (they passed before the CAS above): its store of TID 0, or of its
	// recursion count less one, may land on this hold. Freeing through
	// release's checks then failed (TID) or only decremented (count), and
	// the lock stayed held by this process for as long as it lived. So the
	// free checks only that the hold is still this one (PID, and TID this
	// or 0: a second forcer's takeover writes its own), and resets the
	// count whatever it is. (Stores of the holder that land after the
	// free: see the doc above.)
	if s.PID.Load() != me.PID {
		return owner, ErrNotOwner
	}
	if t := s.TID.Load(); t != me.TID && t != 0 {
		return owner, ErrNotOwner
	}
	s.TID.Store(0)
	s.RecursionCount.Store(layout.SlotInconsistent)
	s.Token.Add(1)
	if racesync.Enabled {
		racesync.Release(l.word)
	}
	if !s.PID.CompareAndSwap(me.PID, 0) {
		return owner, ErrNotOwner
	}
	if s.Pad.Load()&layout.PadSleepers != 0 {
		l.wakeOne()
	}
	return owner, nil
}

// testHookForceTakenOver runs in ForceUnlock between the takeover and the
// free; tests replace it.
var testHookForceTakenOver = func() {}
