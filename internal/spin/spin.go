// Package spin holds what the spinning waiters of shmlock's locks share.
package spin

import (
	"time"

	"github.com/shmlock/shmlock/internal/mono"
)

// KeepOff waits for d on this CPU without touching memory that other
// processes share. A waiter calls it before its first look at a contended
// lock word: that look takes the word's cache line away from the holder,
// and a waiter that looks at once catches the holder's next brief release,
// so that with short critical sections two processes hand the lock back
// and forth every few acquisitions, each handoff two cache-line transfers.
// Keeping off lets the holder run a series. It costs nothing on the
// uncontended path, which never waits.
//
// It returns the time it began (mono.Now), so that a wait that must be
// timed need not read the clock again. The clock is read about every
// 10 ns (the time-stamp counter; 30 ns where mono falls back to the vDSO
// clock); d is meant to be from a few hundred nanoseconds (the spinlock's
// waiters) to a few microseconds (the lock manager's), far below any sleep
// the kernel can do, and short enough that the process's other goroutines
// need not be let run meanwhile (runtime.Gosched would also wake an idle
// runtime thread, a futex wake and a context switch on another CPU, see
// lockmgr's entry.go).
func KeepOff(d time.Duration) (start int64) {
	start = mono.Now()
	for mono.Now()-start < int64(d) {
	}
	return start
}
