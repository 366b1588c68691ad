package coro

import (
	"context"
	"errors"

	"github.com/shmlock/shmlock/upgrade"
)

// UpgradeUnique adapts the unique (writer) lock of an upgrade mutex for
// NewProcessMutex: Lock, TryLock and Unlock of m. UpgradeUpgradable adapts
// its upgrade lock, the one hold that may sit beside readers and later
// become unique. Either way m must be a handle of the ProcessMutex's own
// (upgrade.Open or Named for it alone), since a handle is one holder and
// the ProcessMutex decides which of this process's goroutines holds it.
// While a goroutine holds the upgrade lock through the ProcessMutex it may
// call m.UpgradeToUnique and m.UniqueToUpgrade; it must leave the hold in
// the mode it took before Unlock. If it does not (an upgrade lock left
// unique, a unique lock left as the upgrade lock or as the upgrade lock
// upgraded again, either downgraded to a shared hold with UniqueToShared),
// Unlock releases the hold all the same and reports ErrWrongMode, so that
// the lock does not stay held in the file with no guard to release it.
//
// Shared holds need no adapter: a handle's shared holds are counted
// together, so goroutines share one handle's LockSharedContext, which
// already waits until its context is done and then leaves the mutex as it
// was.
//
// A nil m gives an adapter whose methods fail with ErrNoLock.
func UpgradeUnique(m *upgrade.Mutex) ProcessLock {
	if m == nil {
		return &upgradeHold{}
	}
	return &upgradeHold{m: m, lock: m.LockContext, try: m.TryLock, unlock: m.Unlock}
}

// UpgradeUpgradable adapts the upgrade lock of m for NewProcessMutex (see
// UpgradeUnique).
func UpgradeUpgradable(m *upgrade.Mutex) ProcessLock {
	if m == nil {
		return &upgradeHold{}
	}
	return &upgradeHold{m: m, lock: m.LockUpgradeContext, try: m.TryLockUpgrade, unlock: m.UnlockUpgrade}
}

// upgradeHold is one mode of m; with a nil m (and no functions), every
// method fails with ErrNoLock.
type upgradeHold struct {
	m      *upgrade.Mutex
	lock   func(context.Context) error
	try    func() error
	unlock func() error
}

func (u *upgradeHold) adaptsNil() bool { return u.m == nil }

// bind always succeeds: the state of a hold is the handle's, which refuses
// a second unique or upgrade hold itself (upgrade.ErrHeld).
func (u *upgradeHold) bind() bool { return true }

func (u *upgradeHold) LockContext(ctx context.Context) (bool, error) {
	if u.m == nil {
		return false, ErrNoLock
	}
	if err := u.lock(ctx); err != nil {
		return false, err
	}
	return u.m.Reclaimed(), nil
}

func (u *upgradeHold) TryLock() (bool, error) {
	if u.m == nil {
		return false, ErrNoLock
	}
	err := u.try()
	if errors.Is(err, upgrade.ErrWouldBlock) {
		return false, ErrWouldBlock
	}
	if err != nil {
		return false, err
	}
	return u.m.Reclaimed(), nil
}

func (u *upgradeHold) Unlock() error {
	if u.m == nil {
		return ErrNoLock
	}
	err := u.unlock()
	if errors.Is(err, upgrade.ErrNotHeld) && u.unlockLeft() {
		return ErrWrongMode
	}
	return err
}

// unlockLeft releases a hold its holder left in another form than it
// took, and reports whether it found one. Whatever the mode taken, the
// conversions leave the handle with the upgrade lock (from the unique lock
// by UniqueToUpgrade), upgraded or not (UpgradeToUnique; so is a unique
// lock that went to the upgrade lock and back), or with the one shared
// hold of a UniqueToShared (nobody else takes shared holds on the
// ProcessMutex's own handle). A Writer's unique lock cannot be left: no
// conversion leads to it.
func (u *upgradeHold) unlockLeft() bool {
	_ = u.m.UniqueToUpgrade() // an upgraded hold first goes back; nothing else changes
	return u.m.UnlockUpgrade() == nil || u.m.UnlockShared() == nil
}

// Reclaim frees what dead processes hold on the mutex, then takes the
// lock without waiting: ErrWouldBlock if there was nothing to free, or if
// the lock is still not free (see ProcessMutex.Reclaim).
func (u *upgradeHold) Reclaim() error {
	if u.m == nil {
		return ErrNoLock
	}
	rep, err := u.m.Reclaim()
	if err != nil {
		return err
	}
	if rep.Empty() {
		return ErrWouldBlock
	}
	_, err = u.TryLock()
	return err
}

// Inconsistent is upgrade.Mutex.Inconsistent.
func (u *upgradeHold) Inconsistent() bool { return u.m.Inconsistent() }

// MarkConsistent is upgrade.Mutex.MarkConsistent.
func (u *upgradeHold) MarkConsistent() error { return u.m.MarkConsistent() }

// Close closes the upgrade handle (upgrade.Mutex.Close).
func (u *upgradeHold) Close() error {
	if u.m == nil {
		return ErrNoLock
	}
	return u.m.Close()
}
