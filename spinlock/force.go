package spinlock

import (
	"context"
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
// Forces of one slot in PIDTID mode never overlap: each holds the slot's
// operator lock (shm.Segment.TryLockOperator, an fcntl lock on the
// segment's file that the kernel drops if its holder dies) from before
// its first read of the slot to after its last store, and waits for it
// while another force, of any process, runs; ForceUnlock waits for as
// long as that takes (ForceUnlockContext gives up). A force is a takeover
// followed by a release, several plain stores apart, and a second force
// could take over the first's takeover in between: the first's store of
// its TID then landed on the second's hold, both gave up (ErrNotOwner),
// and the slot stayed with the second's process, held by nobody, until
// that process exited; or the first's stores landed after the second
// had freed the slot, on the next holder's hold (its TID, so that its
// release failed and the slot stayed with its process while it lived,
// and its recursion count). A lock made with New or OpenAt has no
// operator lock (it is not an owner slot of a segment's table): its
// forces must not overlap, and the caller sees to that. Token mode needs
// no lock: its force is one CAS of the lock word.
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
// the holder's own process, whose hold it then frees (two holders). A
// holder that had just taken the lock when the force read the slot (an
// acquisition, or a waiter's reclaim of a dead holder, stores its TID
// after its CAS of PID) is forced all the same if its TID lands before
// the free (the TID reported is then the one it stored); one that lands
// after it falls on the next holder's hold, whose release then fails with
// ErrNotOwner, and the lock stays held while that holder's process lives;
// a reclaim's store of the recursion count as well. So force only a
// holder known to be stuck, or dead.
func (l *Lock) ForceUnlock() (Identity, error) {
	return l.ForceUnlockContext(context.Background())
}

// ForceUnlockContext is ForceUnlock, giving up when ctx is done while it
// waits for another force of the same slot (one stopped, or in a
// debugger, mid-force holds the forces' lock for as long): it then
// returns ctx's error, having changed nothing. For a tool, which should
// not wait for ever without a word.
func (l *Lock) ForceUnlockContext(ctx context.Context) (Identity, error) {
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
	if l.index >= 0 {
		unlock, err := l.lockForce(ctx)
		if err != nil {
			return Identity{}, fmt.Errorf("spinlock: force unlock of slot %d: %w", l.index, err)
		}
		defer unlock()
	}
	return l.forcePIDTID()
}

// lockForce takes the operator lock of the lock's slot (see ForceUnlock),
// waiting while another force holds it, and returns its release.
func (l *Lock) lockForce(ctx context.Context) (unlock func(), err error) {
	return l.seg.LockOperator(ctx, layout.KindOwnerSlots, l.index, func() { testHookForceBusy() })
}

// forcePIDTID is ForceUnlock in PIDTID mode, once no other force of the
// slot can run.
func (l *Lock) forcePIDTID() (Identity, error) {
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
	testHookForceTook()
	s.TID.Store(me.TID)
	s.RecursionCount.Store(layout.SlotInconsistent)
	s.Token.Add(1)
	testHookForceTakenOver()
	// The holder forced out may be inside its release, past its checks
	// (they passed before the CAS above): its store of TID 0, or of its
	// recursion count less one, may land on this hold. Freeing through
	// release's checks then failed (TID) or only decremented (count), and
	// the lock stayed held by this process for as long as it lived. So the
	// free checks only that the hold is still this one (PID; no other
	// force writes here, forces serialize), and resets the count whatever
	// it is. (Stores of the holder that land after the free: see the doc
	// above.)
	//
	// The holder may also have been taking the lock when this force read
	// the slot, between its CAS of PID and its store of TID (an
	// acquisition, or a waiter's reclaim of a dead holder): its TID then
	// lands on this hold. While PID is this process's, nobody else writes
	// a TID (acquisitions and reclaims need PID free or dead), so a holder
	// of another process is forced as if its TID had come first. Left
	// held, the lock stayed with this process, held by nobody, for as long
	// as it lived: the holder's release fails on PID. A holder of this
	// process is left its lock: its release frees it, and a TID not this
	// force's may then also be a holder of this process that took the
	// lock after the forced holder's release freed the takeover (its CAS
	// of PID sees the process only).
	if s.PID.Load() != me.PID {
		return owner, ErrNotOwner
	}
	if t := s.TID.Load(); t != me.TID && t != 0 {
		if owner.PID == me.PID {
			return owner, ErrNotOwner
		}
		owner.TID = t
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

// Test hooks: testHookForceBusy runs when a force finds the forces' lock
// held; testHookForceTook when it has taken the lock word over, before its
// other stores; testHookForceTakenOver between the takeover and the free.
var testHookForceBusy, testHookForceTook, testHookForceTakenOver = func() {}, func() {}, func() {}
