package testproc

import (
	"os"
	"runtime"
	"syscall"
)

// StopSelf stops this process (SIGSTOP) before the calling goroutine runs
// another instruction: for a helper that stops at a named step for the test
// to kill it there (Child.WaitStopped, Child.Kill). kill(getpid(), SIGSTOP)
// does not: the kernel gives a signal sent to the process to one of its
// threads, the main one if it can take it, and the group stop begins only
// when that thread runs; the caller, on another thread, went on past its
// step meanwhile, made the changes the test meant to cut off, and at times
// finished and exited before the stop. Sent to the calling thread (tgkill),
// the signal is taken on the system call's way back, so the group stop
// begins there; the goroutine is locked to its thread in between, or the
// thread named could be another's by the time of the call.
func StopSelf() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
