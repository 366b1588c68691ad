package futex

import (
	"errors"
	"math"
	"sync/atomic"
	"time"
)

// Errors returned by Wait and Wake, declared together so callers can test
// them with errors.Is.
var (
	// ErrTimeout is returned by Wait when its timeout passed before a wake.
	ErrTimeout = errors.New("futex: timed out")
	// ErrUnsupported is wrapped by every call on platforms without futexes.
	ErrUnsupported = errors.New("futex: not supported on this platform")
)

// maxWake is the most waiters one FUTEX_WAKE can be asked to wake: the
// kernel reads the count as a C int.
const maxWake = math.MaxInt32

// Wait sleeps while *addr == val, for at most timeout (timeout < 0: no
// limit). The word may live in memory shared with other processes; it must
// stay mapped until Wait returns.
//
// Wait returns nil when woken, when *addr != val on entry, or when a signal
// interrupted the sleep: the caller re-checks its condition in every case.
// It returns ErrTimeout when the timeout passed, and another error, wrapped
// as "futex: wait: ...", only for a real failure such as a bad address.
func Wait(addr *atomic.Uint32, val uint32, timeout time.Duration) error {
	return wait(addr, val, timeout)
}

// Wake wakes up to n waiters sleeping on addr, in any process, and returns
// how many it woke. A count of zero or less wakes nobody; a count above
// math.MaxInt32 is treated as math.MaxInt32.
func Wake(addr *atomic.Uint32, n int) (int, error) {
	if n <= 0 {
		// The kernel would wake one waiter for a count of 0.
		return 0, nil
	}
	return wake(addr, min(n, maxWake))
}

// Yield gives this thread's CPU to another runnable thread, of any
// process, if the CPU has one (sched_yield(2)), and returns at once if not.
// It is for waiters that have spun on a word for a while and want to let
// the holder run, and see the word once more, before they sleep on it.
// Unlike runtime.Gosched it yields the OS thread, not only the goroutine.
func Yield() { yield() }

// Nap blocks the calling goroutine's thread in the kernel for d
// (nanosleep(2)): for pauses of microseconds between looks at a word, which
// time.Sleep, going through the runtime's timers, stretches to a fraction
// of a millisecond (1 us: 336 us against nanosleep's 82 us on a 2-vCPU
// virtual machine; 64 us: 1.1 ms against 122 us). The runtime hands the
// goroutine's P to another thread if the nap lasts.
func Nap(d time.Duration) { nap(d) }

// WakeAll wakes every waiter sleeping on addr and returns how many it woke.
func WakeAll(addr *atomic.Uint32) (int, error) {
	return Wake(addr, maxWake)
}
