package spinlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/racesync"
	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// How a lock uses the owner slot.
//
// The lock word is PID in PIDTID mode and Token in Token mode: 0 means
// free, and one CAS from 0 acquires. In PIDTID mode the word holds the
// holder's packed process identity, so a waiter can tell from the word
// alone whether the holder still lives; the holder then stores its TID.
// A release clears TID, bumps the generation (Token) and only then stores
// 0 to the lock word, so anyone who sees the word free sees the rest reset,
// and a stale TID can never sit beside a new owner's PID.
//
// Pad is an internal/sleepers word: it counts sleepers and carries a
// wake-pending bit, much like sync.Mutex's mutexWoken. Sleepers
// sleep on a futex over the low 32 bits of the lock word, which are never
// 0 while the lock is held (a token's low half is nonzero; a packed
// identity's holds the pid) and 0 once it is free. A waiter reads the lock
// word, registers in Pad and sleeps only if the low half is unchanged, so:
//   - an unlock that finds Pad zero makes no system call;
//   - a waiter that registers before the holder's release reads Pad is
//     seen by that release (both are sequentially consistent), and one
//     that registers after it finds the futex word changed (the release
//     cleared the lock word before it read Pad) and does not sleep: no
//     wake-up is ever lost. It has to be the lock word: the generation
//     changes before the word is cleared, so a waiter could read the new
//     generation and a still-held word, register after the release looked
//     at Pad, and sleep on a free lock until its liveness check. The low
//     half of a word that a new holder of the same process has taken again
//     may look unchanged, but then the lock is held and sleeping is right;
//   - a release that wakes a sleeper sets wake-pending, and releases that
//     find it set wake nobody: the woken sleeper clears it when it runs,
//     and then either takes the lock or sleeps against a holder whose
//     release will wake the next one. Without the bit, every release made
//     between a wake and the moment the woken process gets a CPU would make
//     another futex call; with more processes than cores that is most of
//     them. A wake that finds nobody in the kernel clears the bit at once;
//     a waiter that gives up (timeout, cancellation) after clearing it
//     passes the wake on if the lock is free.
//
// A sleeper killed while registered leaves the count one too high; that
// costs later unlocks a futex wake with nobody to wake, never correctness,
// and only until a run of such futile wakes drops the count (see
// internal/sleepers).
// One killed between being woken and clearing wake-pending leaves the bit
// set until another sleeper's periodic liveness check clears it.
//
// Fairness: none is promised. A releasing process that locks again at once
// may win against a woken sleeper (as with pthread and Boost mutexes); the
// woken sleeper then sleeps again and the next release wakes it.
//
// The race detector does not see atomics on a segment's words, so every
// grant calls racesync.Acquire on the lock word after the CAS that took it
// (tryAcquire, reclaim, ForceUnlock's takeover) and every release
// racesync.Release before the store or CAS that frees it: Go data that
// goroutines of one process guard with the lock is then not reported as
// racing (internal/racesync). A recursive lock or unlock needs neither,
// and a hold freed for a holder that did not release it (ForceUnlock in
// Token mode) releases nothing.
const (
	maxRecursion = layout.SlotRecursion // RecursionCount's count bits
)

// Lock is one spinlock over one owner slot. Create it with New, Open or
// Named; a Lock is a small handle, and any number of handles, in any
// processes, may share one slot as long as they agree on its Mode. The
// n'th release of the slot synchronizes before the (n+1)'th acquisition.
type Lock struct {
	slot  *layout.OwnerSlot
	word  *atomic.Uint64 // the lock word: slot.PID or slot.Token
	fword *atomic.Uint32 // the low half of the lock word: the futex word
	mode  Mode
	self  uint64 // this process's packed identity (see release)
	alive func(owner uint64) bool
	index int               // the slot's index in its segment; -1 for New
	seg   *shm.Segment      // the segment of Open and Named, whose Close ends the lock; noSegment for New
	named bool              // made by Named: Close drops its reference to the claim
	shut  atomic.Bool       // Close was called
	stats *layout.LockStats // the slot's contention counters (slow paths only); nil for New, OpenAt and a segment without them
	// ours[id.TID%oursWays] is id.TID and the generation of its hold
	// while holder id of this process holds the lock through this handle
	// (pid/tid mode): stored after its CAS, cleared before its release,
	// with plain stores; a holder forced out (ForceUnlock) or released
	// through another handle leaves it until its way's next holder, so it
	// may name a hold that ended: the generation tells (every end of a
	// hold moves it). A waiting acquisition reads it, not the slot, to
	// learn whether its holder may hold the lock already (recursion): see
	// acquireSlow; a release reads it to know, without the slot's PID,
	// that the holder is of this handle: see release. Each way has a cache line
	// of its own, off the line of the fields above: holders of one handle
	// in different goroutines then write different lines (one shared flag
	// made goroutines contending in one process twice as slow, 58 -> 125
	// ns a round, as its line and the handle's went back and forth). Two
	// holders of one way only cost each other the slot read.
	_    [64]byte
	ours [oursWays]oursWay
}

// oursWays is the number of ways of Lock.ours.
const oursWays = 8

// oursWay is one way of Lock.ours, alone on its cache line.
type oursWay struct {
	held atomic.Uint64 // the holder's TID; 0 none
	gen  atomic.Uint64 // the slot's generation (Token) while it holds
	_    [48]byte
}

// oursOf is id's way of Lock.ours.
func (l *Lock) oursOf(id Identity) *oursWay { return &l.ours[id.TID%oursWays] }

// set records that id holds, at generation gen, through this handle.
func (o *oursWay) set(id Identity, gen uint64) {
	memview.StoreRelease64(&o.gen, gen)
	memview.StoreRelease64(&o.held, id.TID)
}

// mine reports whether o says that id holds through this handle the hold
// of generation gen (the slot's now): id is of this process (self) and
// acquired through this handle at that generation, and no release,
// reclaim or takeover has ended that hold since (each moves the
// generation). A stale o (the hold ended through another handle or by
// ForceUnlock) names an older generation.
func (o *oursWay) mine(id Identity, self, gen uint64) bool {
	return id.PID == self && o.held.Load() == id.TID && o.gen.Load() == gen
}

// noSegment stands for the segment of a lock made with New: it is never
// closed, and sparing closed a nil test keeps the fast path short.
var noSegment shm.Segment

// closed reports whether the lock's segment has been closed: from then on
// every acquisition fails with shm.ErrClosed (shm.Segment.Close); releases
// still release in the file, so a hold taken before Close, or by an
// acquisition that Close came under, is given back as its holder unwinds,
// and the holder's Guard.MarkConsistent still clears the mark there.
func (l *Lock) closed() bool { return l.seg.Closed() || l.shut.Load() }

// closedErr is the error of an acquisition refused by closed.
func (l *Lock) closedErr() error {
	if l.shut.Load() {
		return ErrLockClosed
	}
	return shm.ErrClosed
}

// Close ends the handle: it drops the reference to the slot's claim that
// Named took (so that a slot nobody names any more, once free, can be
// claimed for another name), and from then on its acquisitions fail with
// ErrLockClosed. Releases still work, so a Guard taken before may still be
// released, and so does its MarkConsistent (as after the segment's Close).
// ErrLockClosed the second time. Close does not release the lock:
// a lock still held keeps its claim until it is released and claimed anew.
func (l *Lock) Close() error {
	if !l.shut.CompareAndSwap(false, true) {
		return ErrLockClosed
	}
	if l.named {
		return l.seg.Release(layout.KindOwnerSlots, l.index)
	}
	return nil
}

// New returns a lock over slot (a slot of a segment, or one made with
// NewInProcessState). Owners are checked for liveness with the process
// table alone; use Open for a slot of a segment, which also knows when the
// segment's owners come from an earlier boot. New panics on a nil slot or
// an unknown mode, as a constructor given no object does; Open, OpenAt and
// Named return errors instead. The slot must be writable memory: a slot of
// a segment opened read-only (shm.Segment.Slot gives one, for reading) makes
// the first acquisition write through a read-only mapping, a fault that
// kills the process; Open refuses such a segment (shm.ErrReadOnly).
func New(slot *layout.OwnerSlot, mode Mode) *Lock {
	if mode != PIDTID && mode != Token {
		panic(fmt.Sprintf("spinlock: unknown mode %d", mode))
	}
	word := &slot.PID
	if mode == Token {
		word = &slot.Token
	}
	return &Lock{slot: slot, word: word, fword: memview.LowHalf(word), mode: mode, self: proc.Self().Pack(), alive: proc.AlivePacked, index: -1, seg: &noSegment}
}

// NewInProcessState returns a zeroed owner slot in process memory, for a
// lock that only this process's goroutines share.
func NewInProcessState() *layout.OwnerSlot { return new(layout.OwnerSlot) }

// Open returns a lock over owner slot index of seg, which must be writable
// (shm.ErrReadOnly otherwise: every acquisition writes the slot, and a
// write to a read-only mapping kills the process; seg.Slot reads one).
// A slot claimed for the other mode (Named records the mode with its
// claim) is refused with ErrModeMismatch, as Named refuses it: see
// checkClaimedMode. A slot claimed without a mode (shm.Segment.Claim, use
// 0) takes mode, as its claim's use, from its first Open, and later Opens
// for the other mode are refused too; an unclaimed slot is the caller's to
// use in one mode. That first Open waits for the claim directory's lock as
// Named does, for as long as a live process holds it (one stopped in a
// claim holds it until it is continued or dies): OpenContext bounds the
// wait.
func Open(seg *shm.Segment, index int, mode Mode) (*Lock, error) {
	return OpenContext(context.Background(), seg, index, mode)
}

// OpenContext is Open giving up once ctx is done while it waits for the
// claim directory's lock to record mode with a claim that says none (see
// checkClaimedMode), with an error that wraps ctx.Err() and names the
// holder's pid. It then opens nothing and records nothing: going on with
// the mode unrecorded would let the next Open, or Named, take the other
// mode on the slot. For a tool (shmctl unlock --force, shmctl reclaim)
// that must not wait for ever for a process stopped mid-claim. Every other
// step of Open takes no lock.
func OpenContext(ctx context.Context, seg *shm.Segment, index int, mode Mode) (*Lock, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	if mode != PIDTID && mode != Token {
		return nil, fmt.Errorf("%w %d", ErrBadMode, mode)
	}
	if seg.ReadOnly() {
		return nil, fmt.Errorf("spinlock: open slot %d: %w", index, shm.ErrReadOnly)
	}
	slot, err := seg.Slot(index)
	if err != nil {
		return nil, err
	}
	if err := checkClaimedMode(ctx, seg, index, mode); err != nil {
		return nil, err
	}
	l := New(slot, mode)
	l.alive = seg.OwnerAlive
	l.index = index
	l.seg = seg
	l.stats = seg.LockStats(layout.KindOwnerSlots, index)
	return l, nil
}

// OpenAt returns a lock over slot, an owner slot that lives in seg's memory
// outside the owner-slot table: a package's own lock in its own table
// (package txn keeps its allocator's and barrier's there, so that they
// never take one of the slots the user sized). Like Open, it knows seg's
// owners from an earlier boot and ends with seg's Close. Index is -1. seg
// must be writable, as for Open.
func OpenAt(seg *shm.Segment, slot *layout.OwnerSlot, mode Mode) (*Lock, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	if mode != PIDTID && mode != Token {
		return nil, fmt.Errorf("%w %d", ErrBadMode, mode)
	}
	if seg.ReadOnly() {
		return nil, fmt.Errorf("spinlock: open: %w", shm.ErrReadOnly)
	}
	if slot == nil {
		return nil, ErrNoSlot
	}
	if seg.Closed() {
		return nil, shm.ErrClosed
	}
	l := New(slot, mode)
	l.alive = seg.OwnerAlive
	l.seg = seg
	return l, nil
}

// checkClaimedMode refuses mode for owner slot index of seg if the slot's
// claim records the other one: a pid/tid handle and a token handle on one
// slot each read the other's lock word as free or as its own kind (two
// holders at once, or a lock that is never free again).
//
// Only the claim can tell. The slot's words cannot: a free pid/tid slot
// (PID 0, Token its generation) reads exactly as a token slot held with
// that token, and a slot held in pid/tid mode (PID set) says so only while
// it is held, so a check of the words would refuse a wrong mode or not by
// the timing of the Open. A slot claimed without a mode (Claim, use 0)
// takes mode now (shm.Segment.AdoptUse): then the directory knows how to
// read its words, and frees its claim once the lock is released and the
// last reference goes; a released pid/tid slot's words alone read as a
// token held (its generation), and its claim was kept for ever. A slot not
// claimed at all is the caller's to use in one mode. ctx bounds the wait
// for the directory's lock that the record takes.
func checkClaimedMode(ctx context.Context, seg *shm.Segment, index int, mode Mode) error {
	use, err := seg.ClaimUse(layout.KindOwnerSlots, index)
	if err != nil {
		return err
	}
	if had, said := ModeOfClaimUse(use); said && had != mode {
		return fmt.Errorf("%w: %w: owner slot %d is claimed for %v, not %v", ErrModeMismatch, shm.ErrUseMismatch, index, had, mode)
	}
	if use != 0 {
		return nil
	}
	err = seg.AdoptUse(ctx, layout.KindOwnerSlots, index, mode.ClaimUse())
	switch {
	case errors.Is(err, shm.ErrUseMismatch): // another Open, for the other mode, came first
		return fmt.Errorf("%w: %w", ErrModeMismatch, err)
	case err != nil:
		return fmt.Errorf("spinlock: open slot %d: recording %v with its claim: %w", index, mode, err)
	}
	return err
}

// Named claims the owner slot called name in seg (see shm.Segment.ClaimAs)
// and returns a lock over it: every process that names it shares it. The
// mode is recorded with the claim: naming a lock that others use in the
// other mode fails with ErrModeMismatch. An empty name is a
// layout.ErrBadName error (for a private slot, Claim one and Open it).
// Each Named counts one reference to the slot; the Lock's Close drops it.
func Named(seg *shm.Segment, name string, mode Mode) (*Lock, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	if err := layout.CheckName(name); err != nil {
		return nil, err
	}
	if mode != PIDTID && mode != Token {
		return nil, fmt.Errorf("%w %d", ErrBadMode, mode)
	}
	i, err := seg.ClaimAs(layout.KindOwnerSlots, name, mode.ClaimUse())
	if errors.Is(err, shm.ErrUseMismatch) {
		return nil, fmt.Errorf("%w: %w", ErrModeMismatch, err)
	}
	if err != nil {
		return nil, err
	}
	l, err := Open(seg, i, mode)
	if err != nil {
		_ = seg.Release(layout.KindOwnerSlots, i)
		return nil, err
	}
	l.named = true
	return l, nil
}

// Index is the lock's owner slot index in its segment, or -1 for a lock
// made with New.
func (l *Lock) Index() int { return l.index }

// Mode is the lock's mode.
func (l *Lock) Mode() Mode { return l.mode }

// Slot is the owner slot the lock works on.
func (l *Lock) Slot() *layout.OwnerSlot { return l.slot }

// Owner returns the current holder, or false if the lock is free (or its
// segment is closed).
func (l *Lock) Owner() (Identity, bool) {
	if l.mode == Token {
		t := l.slot.Token.Load()
		return Identity{Token: t}, t != 0
	}
	p := l.slot.PID.Load()
	return Identity{PID: p, TID: l.slot.TID.Load()}, p != 0
}

// Inconsistent reports whether the slot is marked inconsistent: a holder
// died holding the lock and no holder has called Guard.MarkConsistent
// since (see Guard.Inconsistent).
func (l *Lock) Inconsistent() bool {
	return l.slot.RecursionCount.Load()&layout.SlotInconsistent != 0
}

// Generation is the number of PIDTID releases and reclaims so far (0 in
// Token mode): a holder can keep it as a fencing token.
func (l *Lock) Generation() uint64 {
	if l.mode == Token {
		return 0
	}
	return l.slot.Token.Load()
}

// lockWord is the value the lock word holds while id holds the lock.
func (l *Lock) lockWord(id Identity) uint64 {
	if l.mode == Token {
		return id.Token
	}
	return id.PID
}

// tryAcquire is the fast path: one CAS of the free lock word. It fails
// once the segment is closed; acquire then says why.
//
// In pid/tid mode the TID store follows the CAS. One 16-byte CAS of PID
// and TID together (CMPXCHG16B, from assembly) was measured instead: the
// uncontended lock+unlock went from 24 to 32 ns and counter fell by a
// fifth. Without the store (for the measurement only: TID is the owner)
// counter moved within noise and pingpong_retry fell 24 %, so the store is
// not what pid/tid mode's counter trails token mode's by.
func (l *Lock) tryAcquire(id Identity) bool {
	if l.closed() {
		return false
	}
	if l.word.CompareAndSwap(0, l.lockWord(id)) {
		if racesync.Enabled {
			racesync.Acquire(l.word)
		}
		if l.mode == PIDTID {
			memview.StoreOwned(&l.slot.TID, id.TID)
			l.oursOf(id).set(id, l.slot.Token.Load())
			if r := l.slot.RecursionCount.Load(); r&layout.SlotRecursion != 0 {
				l.freedWithCount()
			}
		}
		return true
	}
	return false
}

// freedWithCount is for a grant of a free slot whose recursion count is
// not 0, which no release, reclaim or takeover leaves: the slot was
// damaged. The count would keep the holder's release from freeing the
// lock (it would take that many releases), so it goes, and the slot is
// marked inconsistent, as after a reclaim: whoever wrote there may have
// written the guarded data too (FuzzSlot found this).
func (l *Lock) freedWithCount() {
	l.slot.RecursionCount.Store(layout.SlotInconsistent)
}

// heldBy reports whether id holds the lock now.
func (l *Lock) heldBy(id Identity) bool {
	if l.mode == Token {
		return l.slot.Token.Load() == id.Token
	}
	return l.slot.PID.Load() == id.PID && l.slot.TID.Load() == id.TID
}

// Unlock releases one hold of id: in PIDTID mode the innermost recursive
// lock, in Token mode the lock. ErrNotOwner, changing nothing, if id does
// not hold it. Prefer Guard.Release; Unlock is for a holder that kept only
// its identity, such as a token passed to another process.
func (l *Lock) Unlock(id Identity) error {
	if !id.fits(l.mode) {
		return ErrBadIdentity
	}
	return l.release(id)
}

// release is Unlock for an identity known to fit the mode. The holder-only
// fields are written with StoreOwned: the lock word's atomic CAS that
// follows publishes them. locker.Unlock has a copy of the pid/tid path.
//
// In pid/tid mode a holder of this process that holds through this handle
// (ours says so) is not asked for the slot's PID: its own PID is known
// (self), the generation it acquired at is still the slot's (every end of
// a hold, by release, reclaim or takeover, moves it, so ours naming a
// hold that ended elsewhere is not taken for this one), its TID is in the
// slot (every acquisition, reclaim and takeover writes its own TID after
// its CAS of PID, and a release clears TID before PID), and the CAS that
// frees the lock word checks PID at the end. Without the generation, ours
// alone let a holder whose hold had ended through another handle (or by
// ForceUnlock) pass for the holder when another process's holder with the
// same holder id (holder ids are per process: a C holder drawn before a
// fork is the child's too) held: its release cleared that holder's TID
// before its CAS failed, and the lock stayed held until that process died.
// Reading PID first, as the other fields, cost 10-15 %: bench/matrix
// -baseline, 10 rounds, far-placed host, counter 1.16x/1.11x/1.07x at
// 2/4/8 processes (10, 9 and 7 of 10 rounds), pingpong_retry 1.17x (10 of
// 10), uncontended 1.04x; leaving out the TID or recursion loads instead
// gained nothing. Why the load of the word the waiters poll costs what the
// other loads of its line do not, I did not find out. The CAS can fail
// only if the hold was taken over (ForceUnlock) between the checks and the
// CAS; TID and the generation were written by then, as they would have
// been by a release a moment earlier, and the release reports
// ErrNotOwner without freeing the new holder's lock (a plain store would),
// unless the new holder is of this process: the CAS sees the process, not
// the holder (see ForceUnlock on forcing a running holder).
//
// Under contention the first read of the slot may miss (a waiter's poll
// took the line shared) and the stores then need it exclusive: two
// transfers where token mode's CAS needs one. A PREFETCHW of the slot
// before that read, to fetch it exclusive at once, was measured in
// libshmlock (bench/matrix -baseline, 10 rounds): uncontended 1.02x,
// counter 1.03/0.96/1.00x at 2/4/8 processes, pingpong_retry 0.99x, all
// within noise; not kept. Nor a CAS of PID to its own value as the owner
// check (a locked read, which takes the line exclusive at once): slower in
// every round of 10, uncontended 0.76x, counter 0.70x/0.84x at 2/8
// processes, pingpong_retry 0.85x.
func (l *Lock) release(id Identity) error {
	if l.mode == Token {
		if racesync.Enabled { // before the CAS that frees the word; a CAS that fails is a misuse (ErrNotOwner)
			racesync.Release(l.word)
		}
		if !l.slot.Token.CompareAndSwap(id.Token, 0) {
			return ErrNotOwner
		}
	} else {
		s := l.slot
		ours := l.oursOf(id)
		gen := s.Token.Load()
		mine := ours.mine(id, l.self, gen)
		if !mine && s.PID.Load() != id.PID || s.TID.Load() != id.TID {
			return ErrNotOwner
		}
		if r := s.RecursionCount.Load(); r&layout.SlotRecursion > 0 {
			s.RecursionCount.Store(r - 1) // keeps SlotInconsistent
			return nil
		}
		if mine {
			memview.StoreRelease64(&ours.held, 0)
		}
		memview.StoreOwned(&s.TID, 0)
		memview.StoreOwned(&s.Token, gen+1)
		if racesync.Enabled {
			racesync.Release(l.word)
		}
		if !s.PID.CompareAndSwap(id.PID, 0) {
			return ErrNotOwner
		}
	}
	if l.slot.Pad.Load()&layout.PadSleepers != 0 {
		l.wakeOne()
	}
	return nil
}

// wakeOne wakes one sleeper unless none is registered or a woken one has
// not run yet (internal/sleepers: Pad is a sleepers word).
func (l *Lock) wakeOne() {
	if sleepers.WakeOne(&l.slot.Pad, l.fword) {
		l.stats.AddWakeup()
	}
}
