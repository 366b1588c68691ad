package testproc

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	Main(m, map[string]func([]string) int{"stop-self": stopSelfHelper, "steps": stepsHelper})
}

func init() {
	// The stop-self helper's main goroutine must run on the process's
	// first thread: locked to it in an init function, it keeps it for main.
	if os.Getenv(envHelper) == "stop-self" {
		runtime.LockOSThread()
	}
}

// stopSelfEnv keeps the stop-self helper's runtime off its main thread
// while that thread waits in vforkUntil: no preemption signal, which
// would leave a signal pending there and so let the kernel hand a stop
// sent to the process to another thread (one that takes it at once), no
// garbage collection, whose stop of the world would wait for that thread,
// and a processor for the goroutine that stops itself.
var stopSelfEnv = []string{"GODEBUG=asyncpreemptoff=1", "GOGC=off", "GOMAXPROCS=2"}

// stopSelfHelper calls StopSelf on a thread of its own while its main
// thread, the one a signal sent to the process would go to, waits in a
// vfork (vforkUntil) until the test writes a line to its stdin: that wait
// ends only when the vfork's child exits, not for a stop, so a stop sent
// to the process would stay pending on the main thread and the caller
// would go on. It prints "stopping TID" before the stop, and "past" once
// continued.
func stopSelfHelper([]string) int {
	if syscall.Gettid() != os.Getpid() {
		fmt.Println("FAIL: not on the main thread")
		return 1
	}
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		fmt.Println("FAIL", err)
		return 1
	}
	done := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		var b [1]byte
		if _, err := syscall.Read(fds[0], b[:]); err != nil { // the main thread is in its vfork
			fmt.Println("FAIL", err)
			done <- 1
			return
		}
		fmt.Println("stopping", syscall.Gettid())
		if err := StopSelf(); err != nil {
			fmt.Println("FAIL", err)
			done <- 1
			return
		}
		fmt.Println("past")
		done <- 0
	}()
	if errno := vforkUntil(uintptr(fds[1])); errno != 0 {
		fmt.Println("FAIL: vfork:", errno)
		return 1
	}
	return <-done
}

// vforkUntil makes a child that writes a byte to fd, closes stdout and
// stderr, then reads a byte from stdin and exits, and waits for it to exit (CLONE_VFORK: the wait is
// killable only). The child has a copy of the memory (no CLONE_VM) and
// makes raw system calls only, on no goroutine's behalf.
//
//go:nosplit
//go:norace
func vforkUntil(fd uintptr) syscall.Errno {
	var b [1]byte
	pid, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, syscall.CLONE_VFORK|uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	if pid == 0 {
		syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), 1)
		// Not the helper's output: the test's reader of it would wait
		// for this child too.
		syscall.RawSyscall(syscall.SYS_CLOSE, 1, 0, 0)
		syscall.RawSyscall(syscall.SYS_CLOSE, 2, 0, 0)
		syscall.RawSyscall(syscall.SYS_READ, 0, uintptr(unsafe.Pointer(&b[0])), 1)
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	return 0
}

// threadState is the state letter of thread tid of process pid.
func threadState(t *testing.T, pid int, tid string) byte {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + tid + "/stat")
	if err != nil {
		return 'X' // gone: the helper exited
	}
	i := bytes.LastIndexByte(b, ')')
	require.True(t, i > 0 && i+2 < len(b), "malformed stat %q", b)
	return b[i+2]
}

// A helper that stops itself runs no further: once the thread that called
// StopSelf is stopped, the line it prints right after is not there; it
// comes once the helper is continued. The helper's main thread, which a
// stop sent to the process (kill(getpid(), SIGSTOP)) goes to, cannot take
// a stop until the test lets it (see stopSelfHelper), so such a stop
// always lets the caller go on past it and print, and the test fails at
// once; before the main thread was held so, only a stop that happened to
// come late (one in seven or so) was caught.
func TestStopSelfStopsTheCaller(t *testing.T) {
	t.Parallel()
	c := start(t, true, stopSelfEnv, "stop-self", nil)
	tid := c.WaitLine(t, "stopping ")
	WaitFor(t, func() bool {
		return threadState(t, c.PID(), tid) == 'T' || strings.Contains(c.Out.String(), "past")
	}, "the caller to stop or go on")
	require.NotContains(t, c.Out.String(), "past", "the helper ran on past its stop")
	c.Send(t, "go") // the main thread's vfork ends: it joins the stop
	c.WaitStopped(t)
	require.NotContains(t, c.Out.String(), "past", "the helper ran on past its stop")
	c.signal(t, syscall.SIGCONT)
	c.WaitLine(t, "past")
	c.WaitOK(t)
}
