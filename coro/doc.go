// Package coro is shmlock's awaitable FIFO mutex: a lock for
// code that waits without blocking a thread, cancels through its context,
// and resumes on the event loop it waited from.
//
// In Go a coroutine is a goroutine, and cancellation is a
// context.Context. Mutex.Lock waits on the calling goroutine and returns
// a Guard; Mutex.LockOn waits for code that lives on a Loop and runs its
// continuation there. Waiters are served first come, first served: Unlock
// hands the mutex straight to the longest waiter, so while anyone waits
// it is never free for a newcomer to take. Cancelling a waiter removes it
// from the queue, or, if the mutex had just been handed to it, passes the
// mutex on. The design's rule that only the owner thread unlocks becomes:
// only the Guard unlocks (goroutines have no identity to check), once; a
// second Unlock, or one by the Guard of an earlier hold, reports
// ErrNotOwner and changes nothing.
//
//	var mu coro.Mutex
//
//	g, err := mu.Lock(ctx)
//	if err != nil {
//		return err // ctx is done; mu is as it was
//	}
//	defer g.Unlock()
//
// On a loop:
//
//	loop := coro.NewLoop()
//	defer loop.Close()
//	err := mu.LockOn(ctx, loop, func(g coro.Guard, err error) {
//		if err != nil {
//			return
//		}
//		defer g.Unlock()
//		// runs on loop's goroutine
//	})
//
// Across processes, ProcessMutex gives a lock of a shared segment the same
// API: the goroutines of one process queue FIFO, the one at the front waits
// for the cross-process lock (a spinlock through SpinLock) until its
// context is done, and a lock whose holder process died is taken over and
// reported by ProcessGuard.Reclaimed and Inconsistent. TryLock never takes
// a dead holder's lock over, as the spinlock's does not: code that only
// ever TryLocks calls ProcessMutex.Reclaim for that.
//
//	lock, _ := spinlock.Named(seg, "jobs", spinlock.PIDTID)
//	mu := coro.NewProcessMutex(coro.SpinLock(lock))
//	g, err := mu.Lock(ctx)
//
// UpgradeUnique and UpgradeUpgradable do the same for the unique and the
// upgrade lock of an upgrade mutex (package upgrade), whose shared holds
// are already awaitable: LockSharedContext.
//
// A Loop runs on a goroutine of its own (NewLoop), or on the goroutine that
// calls Run, for a program whose main goroutine is its event loop.
package coro
