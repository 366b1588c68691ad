package coro

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/shmlock/shmlock/spinlock"
)

// A ProcessLock is a lock that other processes share, as one process sees
// it: a spinlock of a segment (SpinLock), or a mode of another shmlock
// lock. ProcessMutex calls it from one goroutine at a time, so it may keep
// the state of the current hold. It may have more methods, which the
// ProcessMutex then uses: Reclaim() error (ProcessMutex.Reclaim),
// Inconsistent() bool and MarkConsistent() error (ProcessGuard's), and
// Close() error (ProcessMutex.Close). This package's adapters have them,
// but for Reclaim in the adapter of a Token spinlock.
type ProcessLock interface {
	// LockContext waits until the lock is held or ctx is done; then it
	// returns ctx.Err() and the lock is as it was. reclaimed reports that
	// the previous holder died holding the lock.
	LockContext(ctx context.Context) (reclaimed bool, err error)
	// TryLock locks only if that needs no waiting: ErrWouldBlock (or an
	// error that matches it) otherwise. reclaimed as for LockContext.
	TryLock() (reclaimed bool, err error)
	// Unlock releases the current hold.
	Unlock() error
}

// A ProcessMutex gives a lock shared with other processes the awaitable,
// cancellable API of Mutex. The goroutines of this process queue FIFO on
// a Mutex; the one at the front waits for the cross-process lock, which
// has no order among processes (see package spinlock). Waiting blocks a
// goroutine (and its thread) in the kernel, never a Loop, and stops as
// soon as the waiter's context is done, so a cancelled wait leaves no
// goroutine behind.
//
// Create it with NewProcessMutex; it must not be copied after first use.
type ProcessMutex struct {
	_     noCopy
	local Mutex
	lock  ProcessLock
	// held is the local Guard's word while a hold of the cross-process
	// lock is current, 0 otherwise: Unlock's compare-and-swap on it is what
	// makes a second Unlock of one hold (or of a copy) fail.
	held atomic.Uint64
}

// NewProcessMutex returns a ProcessMutex over lock. Every goroutine of this
// process that uses the lock should go through the one ProcessMutex.
//
// A nil lock, or an adapter of a nil lock (SpinLock(nil),
// UpgradeUnique(nil), UpgradeUpgradable(nil)), gives a ProcessMutex whose
// every locking method fails with ErrNoLock and changes nothing, as does
// the zero ProcessMutex.
//
// An adapter of SpinLock serves one ProcessMutex: it keeps the state of the
// current hold, and in PIDTID mode its holder identity would let a second
// ProcessMutex over it lock again as a nested hold while the first holds
// (two owners). A second NewProcessMutex over the same adapter gives a
// ProcessMutex whose every method fails with ErrAdapterInUse.
func NewProcessMutex(lock ProcessLock) *ProcessMutex {
	if a, ok := lock.(adapter); ok {
		switch {
		case a.adaptsNil():
			lock = nil // so that one comparison serves every method
		case !a.bind():
			lock = adapterInUse{}
		}
	}
	return &ProcessMutex{lock: lock}
}

// adapter is implemented by this package's ProcessLocks, which are never
// nil themselves but may adapt a nil lock. bind reports whether the
// adapter may serve a new ProcessMutex (false if it serves one already
// and must not serve two).
type adapter interface {
	adaptsNil() bool
	bind() bool
}

// adapterInUse is the lock of a ProcessMutex made over an adapter that
// serves another one: every method fails (refused), before it queues.
type adapterInUse struct{}

func (adapterInUse) LockContext(context.Context) (bool, error) { return false, ErrAdapterInUse }
func (adapterInUse) TryLock() (bool, error)                    { return false, ErrAdapterInUse }
func (adapterInUse) Unlock() error                             { return ErrAdapterInUse }

// refused is the error of every method of a ProcessMutex that cannot lock
// at all: ErrNoLock over no lock, ErrAdapterInUse over an adapter that
// serves another ProcessMutex; nil otherwise.
func (m *ProcessMutex) refused() error {
	switch m.lock.(type) {
	case nil:
		return ErrNoLock
	case adapterInUse:
		return ErrAdapterInUse
	}
	return nil
}

// A ProcessGuard is one hold of a ProcessMutex: a small value, which any
// one copy may Unlock once. The zero ProcessGuard holds nothing.
type ProcessGuard struct {
	m         *ProcessMutex
	local     Guard
	reclaimed bool
}

// Lock waits, FIFO among this process's goroutines, until m is held or ctx
// is done; then it returns ctx.Err() and m is as it was. A context already
// done fails at once. ErrNoLock if m has no lock (see NewProcessMutex).
func (m *ProcessMutex) Lock(ctx context.Context) (ProcessGuard, error) {
	if err := m.refused(); err != nil {
		return ProcessGuard{}, err
	}
	g, err := m.local.Lock(ctx)
	if err != nil {
		return ProcessGuard{}, err
	}
	reclaimed, err := m.lock.LockContext(ctx)
	if err != nil {
		_ = g.Unlock()
		return ProcessGuard{}, err
	}
	return m.hold(g, reclaimed), nil
}

// TryLock locks m only if nobody in this process holds or waits for it
// and the cross-process lock is free: ErrWouldBlock otherwise. ErrNoLock if
// m has no lock.
func (m *ProcessMutex) TryLock() (ProcessGuard, error) {
	if err := m.refused(); err != nil {
		return ProcessGuard{}, err
	}
	g, ok := m.local.TryLock()
	if !ok {
		return ProcessGuard{}, ErrWouldBlock
	}
	reclaimed, err := m.lock.TryLock()
	if err != nil {
		_ = g.Unlock()
		return ProcessGuard{}, err
	}
	return m.hold(g, reclaimed), nil
}

// LockOn locks m for a continuation that runs on loop l, as Mutex.LockOn
// does: cont(g, nil) once m is held, or cont(ProcessGuard{}, ctx.Err()) if
// ctx is done first; cont runs exactly once, on l, never inside LockOn.
// While the cross-process lock is held elsewhere, a goroutine waits for it
// and then posts cont to l; it ends when ctx is done. If ctx is done after
// the lock was taken but before cont starts, the lock is passed on at
// once, even while l is busy, as with Mutex.LockOn; except a lock taken
// over from a holder that died, which cont gets all the same (Reclaimed):
// passed on, the news would be lost, since the next owner's acquisition
// reclaims nothing. A nil l means
// LoopFrom(ctx): ErrNoLoop if there is none; ErrLoopClosed if l is closed;
// ErrNoCont if cont is nil; ErrNoLock if m has no lock. On an error cont
// never runs and m is untouched.
func (m *ProcessMutex) LockOn(ctx context.Context, l *Loop, cont func(ProcessGuard, error)) error {
	if err := m.refused(); err != nil {
		return err
	}
	if cont == nil {
		return ErrNoCont
	}
	if l == nil {
		if l = LoopFrom(ctx); l == nil {
			return ErrNoLoop
		}
	}
	if !l.reserve() { // for the post after a wait for another process
		return ErrLoopClosed
	}
	err := m.local.LockOn(ctx, l, func(g Guard, err error) {
		if err != nil {
			l.unreserve()
			cont(ProcessGuard{}, err)
			return
		}
		switch reclaimed, err := m.lock.TryLock(); {
		case err == nil:
			l.unreserve()
			cont(m.hold(g, reclaimed), nil)
			return
		case !errors.Is(err, ErrWouldBlock):
			_ = g.Unlock()
			l.unreserve()
			cont(ProcessGuard{}, err)
			return
		}
		go func() {
			reclaimed, err := m.lock.LockContext(ctx)
			if err != nil {
				_ = g.Unlock() // the next waiter here need not wait for l
				l.postReserved(func() { cont(ProcessGuard{}, err) })
				return
			}
			pg := m.hold(g, reclaimed)
			if reclaimed {
				// Not a lock taken over from a dead holder: its next owner
				// (perhaps in another process) would not learn of the
				// reclaim, so cont gets it, and the news, all the same.
				l.postReserved(func() { cont(pg, nil) })
				return
			}
			// As with Mutex.LockOn: once cont starts with the lock, ctx no
			// longer matters; until then, a done ctx passes the lock on at
			// once, not when l gets to cont, which a stalled loop may never
			// do while every process waits. One CAS decides which.
			var decided atomic.Bool
			passed := make(chan struct{})
			stop := context.AfterFunc(ctx, func() {
				if decided.CompareAndSwap(false, true) {
					_ = pg.Unlock()
					close(passed)
				}
			})
			l.postReserved(func() {
				if decided.CompareAndSwap(false, true) {
					stop()
					cont(pg, nil)
					return
				}
				<-passed // cont never sees the lock still held on its behalf
				cont(ProcessGuard{}, ctx.Err())
			})
		}()
	})
	if err != nil {
		l.unreserve()
	}
	return err
}

func (m *ProcessMutex) hold(g Guard, reclaimed bool) ProcessGuard {
	m.held.Store(g.word)
	return ProcessGuard{m: m, local: g, reclaimed: reclaimed}
}

// Unlock releases the hold: first the cross-process lock, then the turn
// of this process's next waiter. ErrNotOwner if the hold already ended.
func (g ProcessGuard) Unlock() error {
	m := g.m
	if m == nil || g.local.word == 0 || !m.held.CompareAndSwap(g.local.word, 0) {
		return ErrNotOwner
	}
	// The cross-process lock goes first: the next waiter of this process
	// locks it with this process's identity, which must not find it held.
	err := m.lock.Unlock()
	if lerr := g.local.Unlock(); err == nil {
		err = lerr
	}
	return err
}

// Held reports whether g's hold is current.
func (g ProcessGuard) Held() bool {
	return g.m != nil && g.local.word != 0 && g.m.held.Load() == g.local.word
}

// Reclaimed reports whether the cross-process lock was taken over from a
// holder that died: the data it protects may be half-updated (see
// Inconsistent).
func (g ProcessGuard) Reclaimed() bool { return g.reclaimed }

// SpinLock adapts a segment's spinlock for NewProcessMutex. In PIDTID mode
// it locks with a holder of its own (spinlock.NewHolder), so no other code
// of the process shares its identity and its recursion; in Token mode with
// a fresh token for every hold. Only PIDTID mode is robust: a Token lock
// records no process, so a hold of a process that died stays until an
// operator forces it (spinlock.Lock.ForceUnlock), the waiters here wait
// until their contexts are done, and ProcessMutex.Reclaim fails with
// ErrCannotReclaim. A nil l gives an adapter whose methods fail with
// ErrNoLock.
func SpinLock(l *spinlock.Lock) ProcessLock {
	s := &spinHold{lock: l, g: new(spinlock.Guard)}
	if l != nil && l.Mode() == spinlock.PIDTID {
		s.holder = spinlock.NewHolder()
		return pidHold{s} // only it can tell a dead holder: see ProcessMutex.Reclaim
	}
	return s
}

type spinHold struct {
	lock   *spinlock.Lock
	holder spinlock.Identity // PIDTID mode
	g      *spinlock.Guard   // the current hold (Reclaim's guard is a new one)
	bound  atomic.Bool       // serves a ProcessMutex (see NewProcessMutex)
}

// pidHold is the adapter of a PIDTID spinlock: a spinHold that can take
// the lock over from a dead holder.
type pidHold struct{ *spinHold }

// Reclaim takes the lock over if its holder is dead (spinlock.Lock.Reclaim).
func (p pidHold) Reclaim() error {
	g, err := p.lock.Reclaim(p.holder)
	if errors.Is(err, spinlock.ErrWouldBlock) {
		return ErrWouldBlock
	}
	if err != nil {
		return err
	}
	p.g = g
	return nil
}

// Inconsistent is the current hold's spinlock.Guard.Inconsistent.
func (s *spinHold) Inconsistent() bool { return s.g.Inconsistent() }

// MarkConsistent is the current hold's spinlock.Guard.MarkConsistent.
func (s *spinHold) MarkConsistent() error { return s.g.MarkConsistent() }

func (s *spinHold) bind() bool { return s.bound.CompareAndSwap(false, true) }

func (s *spinHold) identity() spinlock.Identity {
	if s.lock.Mode() == spinlock.Token {
		return spinlock.NewToken()
	}
	return s.holder
}

func (s *spinHold) adaptsNil() bool { return s.lock == nil }

func (s *spinHold) LockContext(ctx context.Context) (bool, error) {
	if s.lock == nil {
		return false, ErrNoLock
	}
	if err := s.g.LockContext(ctx, s.lock, s.identity()); err != nil {
		return false, err
	}
	return s.g.Reclaimed(), nil
}

func (s *spinHold) TryLock() (bool, error) {
	if s.lock == nil {
		return false, ErrNoLock
	}
	err := s.g.TryLock(s.lock, s.identity())
	if errors.Is(err, spinlock.ErrWouldBlock) {
		return false, ErrWouldBlock
	}
	if err != nil {
		return false, err
	}
	return s.g.Reclaimed(), nil
}

func (s *spinHold) Unlock() error {
	if s.lock == nil {
		return ErrNoLock
	}
	return s.g.Release()
}

// Close closes the cross-process lock's handle, if it has a Close (the
// adapters of this package pass it on to the spinlock or upgrade handle,
// which drops the reference its Named took): call it when no goroutine of
// this process will use the ProcessMutex again, after the last Unlock. Its
// locking methods fail from then on with the handle's error. ErrNoLock for
// a ProcessMutex over no lock.
func (m *ProcessMutex) Close() error {
	if err := m.refused(); err != nil {
		return err
	}
	if c, ok := m.lock.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// Close closes the spinlock handle (spinlock.Lock.Close).
func (s *spinHold) Close() error {
	if s.lock == nil {
		return ErrNoLock
	}
	return s.lock.Close()
}
