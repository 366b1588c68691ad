package spinlock

import (
	"context"
	"sync"
	"time"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/racesync"
	"github.com/shmlock/shmlock/layout"
)

// Guard is one hold of a lock. The zero Guard holds nothing; its Lock
// methods acquire, Release releases. A Guard of a Token lock may be handed
// to another goroutine (send the *Guard on a channel), which may then
// release it; a Guard of a PIDTID lock is released by its holder.
//
// A Guard must not be copied after first use (go vet reports copies) and
// must not be used by two goroutines at once.
type Guard struct {
	_         noCopy
	lock      *Lock
	id        Identity
	reclaimed bool
	recursive bool
}

// Lock acquires l for id, waiting as long as it takes. If the previous
// holder died, the lock is taken over and Reclaimed reports it.
func (g *Guard) Lock(l *Lock, id Identity) error {
	if g.lock == nil && id.fits(l.mode) && l.tryAcquire(id) {
		g.lock, g.id, g.reclaimed, g.recursive = l, id, false, false
		return nil
	}
	return g.lockContext(context.Background(), l, id, time.Time{}, false)
}

// TryLock acquires l for id only if that needs no waiting; ErrWouldBlock
// otherwise. It never reclaims (see Lock.Reclaim).
func (g *Guard) TryLock(l *Lock, id Identity) error {
	return g.lockContext(context.Background(), l, id, time.Time{}, true)
}

// TryLockFor acquires l for id, waiting at most d; ErrTimeout otherwise.
func (g *Guard) TryLockFor(l *Lock, id Identity, d time.Duration) error {
	if d <= 0 {
		return g.TryLock(l, id)
	}
	return g.lockContext(context.Background(), l, id, time.Now().Add(d), false)
}

// LockContext acquires l for id, waiting until ctx is done; then it
// returns ctx.Err() and the lock is as it was. A context already done
// fails at once, even if the lock is free.
func (g *Guard) LockContext(ctx context.Context, l *Lock, id Identity) error {
	deadline, _ := ctx.Deadline()
	return g.lockContext(ctx, l, id, deadline, false)
}

func (g *Guard) lockContext(ctx context.Context, l *Lock, id Identity, deadline time.Time, try bool) error {
	if g.lock != nil {
		return ErrGuardInUse
	}
	out, err := l.acquire(ctx, id, deadline, try)
	if err != nil {
		if _, fromCtx := ctx.Deadline(); fromCtx && err == ErrTimeout {
			err = context.DeadlineExceeded
		}
		return err
	}
	g.lock, g.id, g.reclaimed, g.recursive = l, id, out.reclaimed, out.recursive
	return nil
}

// Adopt makes g the guard of a hold that id already has on l, for example
// a token received from another process. ErrNotOwner if id does not hold l.
func (g *Guard) Adopt(l *Lock, id Identity) error {
	if g.lock != nil {
		return ErrGuardInUse
	}
	if !id.fits(l.mode) {
		return ErrBadIdentity
	}
	if l.closed() {
		return l.closedErr()
	}
	if !l.heldBy(id) {
		return ErrNotOwner
	}
	g.lock, g.id, g.reclaimed, g.recursive = l, id, false, false
	return nil
}

// Release releases the hold. ErrNotHeld if g holds nothing (it was
// released or detached); ErrNotOwner if the lock no longer records g's
// holder (someone released it with g's token). Either way g is then empty.
func (g *Guard) Release() error {
	if g.lock == nil {
		return ErrNotHeld
	}
	l, id := g.lock, g.id
	g.lock, g.id, g.reclaimed, g.recursive = nil, Identity{}, false, false
	return l.Unlock(id)
}

// Detach empties g without releasing: the lock stays held by g's identity,
// to be released with Lock.Unlock or adopted by another Guard.
func (g *Guard) Detach() { g.lock, g.id, g.reclaimed, g.recursive = nil, Identity{}, false, false }

// Held reports whether g holds a lock.
func (g *Guard) Held() bool { return g.lock != nil }

// Reclaimed reports whether this hold was taken over from a holder that
// died: the data the lock protects may be half-updated. Inconsistent says
// more: whether any holder died since the data was last said to be whole.
func (g *Guard) Reclaimed() bool { return g.reclaimed }

// Inconsistent reports whether the data the lock protects may be
// half-updated: a holder died holding the lock (this hold or an earlier one
// reclaimed it) and no holder has called MarkConsistent since. Every
// holder is told until one does, so a holder that could not repair the
// data, or died too, leaves the news to the next; unlike glibc's robust
// mutex (ENOTRECOVERABLE), the lock stays usable either way. False if g
// holds nothing.
func (g *Guard) Inconsistent() bool {
	return g.lock != nil && g.lock.Inconsistent()
}

// MarkConsistent says that the data the lock protects is whole again (the
// holder repaired it, or found nothing to repair): later holders are no
// longer told. ErrNotHeld if g holds nothing, ErrNotOwner if the lock no
// longer records g's holder. Like Release, it works after the lock's or
// its segment's Close, so a holder that repaired the data as it unwinds
// says so (and so do upgrade's and lockmgr's).
func (g *Guard) MarkConsistent() error {
	if g.lock == nil {
		return ErrNotHeld
	}
	if !g.lock.heldBy(g.id) {
		return ErrNotOwner
	}
	s := g.lock.slot
	if r := s.RecursionCount.Load(); r&layout.SlotInconsistent != 0 {
		s.RecursionCount.Store(r &^ layout.SlotInconsistent) // the holder's word
	}
	return nil
}

// Recursive reports whether this hold is a nested lock by a holder that
// already held the lock.
func (g *Guard) Recursive() bool { return g.recursive }

// Identity is the identity g holds the lock with (zero if none); in Token
// mode its Token may be passed to another process to Adopt or Unlock.
func (g *Guard) Identity() Identity { return g.id }

// Lock acquires l for id and returns a new Guard; see Guard.Lock.
func (l *Lock) Lock(id Identity) (*Guard, error) {
	g := new(Guard)
	return g, g.Lock(l, id)
}

// TryLock is Guard.TryLock with a new Guard.
func (l *Lock) TryLock(id Identity) (*Guard, error) {
	g := new(Guard)
	return g, g.TryLock(l, id)
}

// TryLockFor is Guard.TryLockFor with a new Guard.
func (l *Lock) TryLockFor(id Identity, d time.Duration) (*Guard, error) {
	g := new(Guard)
	return g, g.TryLockFor(l, id, d)
}

// LockContext is Guard.LockContext with a new Guard.
func (l *Lock) LockContext(ctx context.Context, id Identity) (*Guard, error) {
	g := new(Guard)
	return g, g.LockContext(ctx, l, id)
}

// Locker returns a sync.Locker that locks l for id. Its Lock blocks until
// it holds the lock (taking it over from a dead holder silently: use a
// Guard to learn of that); its Unlock panics if id does not hold the lock
// (ErrNotOwner), as sync.Mutex does for an unlocked mutex. Lock, which
// cannot return an error, panics where Guard.Lock would return one: once
// the lock is closed (ErrLockClosed after l's Close, shm.ErrClosed after
// its segment's, a holder's recursive Lock too; a Lock asleep at the
// segment's Close at its next wake) and, in pid/tid mode, past the most
// recursive holds (ErrRecursion). The panic value is a *LockerPanic that
// wraps the error, so a caller that recovers it tells the cases apart with
// errors.Is. Unlock still works after either Close. Locker itself panics,
// the same way, if id does not fit l's mode (ErrBadIdentity).
func (l *Lock) Locker(id Identity) sync.Locker {
	if !id.fits(l.mode) {
		panic(&LockerPanic{Op: "Lock.Locker", Err: ErrBadIdentity})
	}
	return &locker{l: l, id: id}
}

// LockerPanic is the value a Locker (Lock.Locker) panics with where a
// Guard's method would return Err: Op names the method, e.g.
// "Locker.Unlock".
type LockerPanic struct {
	Op  string
	Err error
}

func (p *LockerPanic) Error() string { return p.Op + ": " + p.Err.Error() }

func (p *LockerPanic) Unwrap() error { return p.Err }

type locker struct {
	l  *Lock
	id Identity
}

func (k *locker) Lock() {
	if k.l.tryAcquire(k.id) {
		return
	}
	if k.l.closed() { // acquireSlow would grant a holder's recursion without asking
		panic(&LockerPanic{Op: "Locker.Lock", Err: k.l.closedErr()})
	}
	if _, err := k.l.acquireSlow(context.Background(), k.id, time.Time{}, false); err != nil {
		panic(&LockerPanic{Op: "Locker.Lock", Err: err})
	}
}

// Unlock writes out release's pid/tid path (keep them in step) instead of
// calling it: behind sync.Locker's dynamic call, the call level was a
// fifth of an uncontended Lock+Unlock (shmctl bench, alternated rounds:
// 8.7 -> 6.8 ns). Under -race, a recursive hold, token mode or a misuse,
// release does it all.
func (k *locker) Unlock() {
	l, id := k.l, k.id
	if l.mode == PIDTID && !racesync.Enabled {
		s := l.slot
		ours := l.oursOf(id)
		gen := s.Token.Load()
		if ours.mine(id, l.self, gen) && s.TID.Load() == id.TID && s.RecursionCount.Load()&layout.SlotRecursion == 0 {
			memview.StoreRelease64(&ours.held, 0)
			memview.StoreOwned(&s.TID, 0)
			memview.StoreOwned(&s.Token, gen+1)
			if !s.PID.CompareAndSwap(id.PID, 0) {
				panic(&LockerPanic{Op: "Locker.Unlock", Err: ErrNotOwner})
			}
			if s.Pad.Load()&layout.PadSleepers != 0 {
				l.wakeOne()
			}
			return
		}
	}
	if err := k.l.release(k.id); err != nil {
		panic(&LockerPanic{Op: "Locker.Unlock", Err: err})
	}
}

// noCopy makes go vet's copylocks check report copies of a Guard.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}
