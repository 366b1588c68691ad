package coro

// Reclaim takes m over from a process that died holding the cross-process
// lock, without waiting, and says so: the guard's Reclaimed is true, and
// its Inconsistent tells whether the data may be half-updated. It is for
// code that only ever TryLocks. TryLock never takes a dead holder's lock
// over, as the spinlock's and the upgrade mutex's TryLock do not (their
// Reclaim does it); Lock and LockOn do it by themselves as they wait.
//
// ErrWouldBlock, changing nothing, if a goroutine of this process holds or
// waits for m (a waiter takes the lock over by itself), if the
// cross-process lock is free (TryLock takes it), or if its holder lives.
// Over an upgrade mutex (UpgradeUnique, UpgradeUpgradable) it frees what
// dead processes hold on it (upgrade.Mutex.Reclaim: a dead writer, upgrade
// holder or reader) and then tries the lock: ErrWouldBlock if there was
// nothing dead to free, or if another process took the lock first once it
// was free (a dead unique holder's news is then that one's: the mutex
// stays inconsistent until a unique holder marks it consistent).
//
// ErrCannotReclaim, changing nothing, if the lock cannot tell whether its
// holder lives: a SpinLock in Token mode records no process, so the hold
// of a process that died stays until an operator forces it
// (spinlock.Lock.ForceUnlock); so does a ProcessLock without a method
// Reclaim() error, which takes the lock over if its holder is dead
// (ErrWouldBlock otherwise). ErrNoLock if m has no lock, ErrAdapterInUse
// as for TryLock.
func (m *ProcessMutex) Reclaim() (ProcessGuard, error) {
	if err := m.refused(); err != nil {
		return ProcessGuard{}, err
	}
	r, ok := m.lock.(interface{ Reclaim() error })
	if !ok {
		return ProcessGuard{}, ErrCannotReclaim
	}
	g, ok := m.local.TryLock()
	if !ok {
		return ProcessGuard{}, ErrWouldBlock
	}
	if err := r.Reclaim(); err != nil {
		_ = g.Unlock()
		return ProcessGuard{}, err
	}
	return m.hold(g, true), nil
}

// consistency is implemented by a ProcessLock that records whether the
// data it protects may be half-updated since a holder died.
type consistency interface {
	Inconsistent() bool
	MarkConsistent() error
}

// Inconsistent reports whether the data the lock protects may be
// half-updated: a holder of the cross-process lock died (this hold or an
// earlier one took the lock over) and no holder has said since that the
// data is whole (MarkConsistent). Every holder is told until one does, as
// by the guards of the spinlock and the upgrade mutex. False if g's hold
// is not current. Over a ProcessLock without methods Inconsistent() bool
// and MarkConsistent() error, it is Reclaimed.
func (g ProcessGuard) Inconsistent() bool {
	if !g.Held() {
		return false
	}
	if c, ok := g.m.lock.(consistency); ok {
		return c.Inconsistent()
	}
	return g.reclaimed
}

// MarkConsistent says that the data the lock protects is whole again (the
// holder repaired it, or found nothing to repair): later holders are no
// longer told. ErrNotOwner if g's hold is not current; otherwise the
// lock's answer (the upgrade mutex takes it only from a unique holder:
// upgrade.ErrNotHeld from the upgrade lock that has not upgraded). Nothing
// to do, nil, over a ProcessLock that keeps no such record. Like Unlock, it
// works after the lock's segment is closed over the adapters of this
// package (the spinlock's and the upgrade mutex's MarkConsistent do).
func (g ProcessGuard) MarkConsistent() error {
	if !g.Held() {
		return ErrNotOwner
	}
	if c, ok := g.m.lock.(consistency); ok {
		return c.MarkConsistent()
	}
	return nil
}
