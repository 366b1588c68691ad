package coro

import "errors"

// Sentinel errors.
var (
	ErrNotOwner   = errors.New("coro: guard does not hold the mutex")
	ErrLoopClosed = errors.New("coro: loop is closed")
	ErrNoLoop     = errors.New("coro: no loop to resume on")
	ErrWouldBlock = errors.New("coro: lock is held")
)
