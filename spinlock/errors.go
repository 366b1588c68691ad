package spinlock

import "errors"

// Sentinel errors.
var (
	ErrNotOwner    = errors.New("spinlock: not held by this holder")
	ErrWouldBlock  = errors.New("spinlock: lock is held")
	ErrTimeout     = errors.New("spinlock: timed out")
	ErrNotHeld     = errors.New("spinlock: guard holds no lock")
	ErrGuardInUse  = errors.New("spinlock: guard already holds a lock")
	ErrBadIdentity = errors.New("spinlock: identity does not fit the lock's mode")
	ErrRecursion   = errors.New("spinlock: recursion depth limit reached")
	ErrLockClosed  = errors.New("spinlock: lock handle is closed")
	// ErrBadMode: Open or Named was given a Mode that is neither PIDTID
	// nor Token.
	ErrBadMode = errors.New("spinlock: unknown mode")
	// ErrNoSlot: OpenAt was given no owner slot.
	ErrNoSlot = errors.New("spinlock: no owner slot")
	// ErrModeMismatch: Named or Open found the slot claimed for the other
	// mode. It also matches shm.ErrUseMismatch.
	ErrModeMismatch = errors.New("spinlock: the slot is claimed for the other mode")
)
