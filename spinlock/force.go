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
	return owner, l.release(me)
}
