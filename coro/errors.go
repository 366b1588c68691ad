package coro

import "errors"

// Sentinel errors.
var (
	ErrNotOwner    = errors.New("coro: guard does not hold the mutex")
	ErrLoopClosed  = errors.New("coro: loop is closed")
	ErrLoopRunning = errors.New("coro: loop is already running")
	ErrNoLoop      = errors.New("coro: no loop to resume on")
	ErrNoCont      = errors.New("coro: LockOn without a continuation")
	ErrWouldBlock  = errors.New("coro: lock is held")
)
