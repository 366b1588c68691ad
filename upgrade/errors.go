package upgrade

import "errors"

// Sentinel errors.
var (
	ErrNotHeld        = errors.New("upgrade: not held in that mode by this handle")
	ErrNotOwner       = errors.New("upgrade: held in that mode by another handle")
	ErrWouldBlock     = errors.New("upgrade: would block")
	ErrHeld           = errors.New("upgrade: this handle already holds the lock in a conflicting mode")
	ErrOverflow       = errors.New("upgrade: too many shared holds by one handle")
	ErrTooManyReaders = errors.New("upgrade: every reader record of the mutex is in use")
	ErrClosed         = errors.New("upgrade: handle is closed")
	ErrNoFunc         = errors.New("upgrade: WithUnique without a function")
)
