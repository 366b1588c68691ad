package coro

import "errors"

// Sentinel errors.
var (
	ErrNotOwner    = errors.New("coro: guard does not hold the mutex")
	ErrLoopClosed  = errors.New("coro: loop is closed")
	ErrLoopRunning = errors.New("coro: loop is already running")
	ErrNoLoop      = errors.New("coro: no loop to resume on")
	ErrNoCont      = errors.New("coro: LockOn without a continuation")
	ErrNoFunc      = errors.New("coro: Post without a function")
	ErrWouldBlock  = errors.New("coro: lock is held")
	// ErrWrongMode is what a ProcessGuard's Unlock reports when its holder
	// left a hold of an upgrade mutex in another mode than the one it
	// took (see UpgradeUnique); the hold was released all the same.
	ErrWrongMode = errors.New("coro: hold left in another mode than it was taken in (released)")
	// ErrNoLock is what every locking method of a ProcessMutex made over
	// no lock returns (NewProcessMutex(nil), the zero ProcessMutex, or an
	// adapter of a nil lock: SpinLock(nil), UpgradeUnique(nil),
	// UpgradeUpgradable(nil)), and what such an adapter's own methods
	// return. Nothing is locked or queued.
	ErrNoLock = errors.New("coro: no lock to wait for (nil)")
	// ErrCannotReclaim is what ProcessMutex.Reclaim returns over a lock
	// that cannot tell whether its holder lives (a spinlock in Token mode,
	// or a ProcessLock without a Reclaim method). Nothing is locked.
	ErrCannotReclaim = errors.New("coro: the lock cannot tell whether its holder lives")
	// ErrAdapterInUse is what every method of a ProcessMutex returns that
	// was made over a SpinLock adapter already serving another
	// ProcessMutex (see NewProcessMutex). Nothing is locked or queued.
	ErrAdapterInUse = errors.New("coro: the lock's adapter serves another ProcessMutex")
)
