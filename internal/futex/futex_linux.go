package futex

// unsafe is needed to hand the kernel the address of the futex word: the
// futex system call takes a raw pointer, and the word is reached only
// through sync/atomic everywhere else.

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations from linux/futex.h. FUTEX_PRIVATE_FLAG (128) is left off
// on purpose: the word lives in a MAP_SHARED mapping used by several
// processes, and a private futex would be keyed by this process's address
// space, so a waker in another process could never find our waiters.
const (
	futexWait = 0 // FUTEX_WAIT: sleep if *addr == val
	futexWake = 1 // FUTEX_WAKE: wake up to val sleepers
)

func wait(addr *atomic.Uint32, val uint32, timeout time.Duration) error {
	var ts *unix.Timespec // nil: no limit
	if timeout >= 0 {
		t := unix.NsecToTimespec(int64(timeout)) // FUTEX_WAIT's timeout is relative
		ts = &t
	}
	// Syscall, not RawSyscall: the call blocks, and the runtime must be told
	// so it can run other goroutines on another thread meanwhile.
	_, _, errno := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)),
		futexWait, uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
	switch errno {
	case 0, unix.EAGAIN, unix.EINTR: // woken, *addr != val, or a signal
		return nil
	case unix.ETIMEDOUT:
		return ErrTimeout
	default:
		return fmt.Errorf("futex: wait: %w", errno)
	}
}

func wake(addr *atomic.Uint32, n int) (int, error) {
	woken, _, errno := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)),
		futexWake, uintptr(n), 0, 0, 0)
	if errno != 0 {
		return 0, fmt.Errorf("futex: wake: %w", errno)
	}
	return int(woken), nil
}

func yield() {
	// RawSyscall: sched_yield never blocks, so the runtime need not hand
	// this thread's P to another thread, which would cost more than the
	// call.
	_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}

func nap(d time.Duration) {
	// Syscall, not RawSyscall: the thread blocks, and the runtime may give
	// its P to another goroutine meanwhile. A signal (the runtime's
	// preemption signal among them) ends nanosleep early with EINTR and
	// what was left, which is slept then.
	ts := unix.NsecToTimespec(int64(d))
	for {
		var left unix.Timespec
		if err := unix.Nanosleep(&ts, &left); err != unix.EINTR {
			return
		}
		ts = left
	}
}
