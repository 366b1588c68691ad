//go:build linux

package futex_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// unsafe is needed here only to print the address of a futex word the way
// the kernel prints it in /proc/<pid>/task/<tid>/syscall.

var selfPID = os.Getpid()

// waitAsleep waits until at least n threads of process pid sleep in a
// shared FUTEX_WAIT on addr (any address when addr is nil), so a test can
// tell "woken" from "never slept". It reads /proc/<pid>/task/*/syscall,
// whose lines start "<nr> <arg0> <arg1>": for futex(2) arg0 is the address
// and arg1 the operation, 0x0 for a shared FUTEX_WAIT (the Go runtime's own
// futexes are private, 0x80). It returns false, after a short sleep, when
// /proc cannot tell, and fails the test when the sleepers never appear.
func waitAsleep(tb testing.TB, pid int, addr *atomic.Uint32, n int) bool {
	tb.Helper()
	asleep, ok := waitSleepers(tb, pid, addr, n, nil)
	if !ok {
		time.Sleep(100 * time.Millisecond)
	}
	return asleep
}

// waitSleepers is waitAsleep's loop: it returns asleep once n threads
// sleep on addr, or not asleep once gone, if not nil, reports that what
// would have slept ended otherwise; ok is false, at once, when /proc
// cannot tell. It fails the test if neither comes within testTimeout.
func waitSleepers(tb testing.TB, pid int, addr *atomic.Uint32, n int, gone func() bool) (asleep, ok bool) {
	tb.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		got, err := futexSleepers(pid, addr)
		if err != nil {
			tb.Logf("cannot count futex sleepers: %v", err)
			return false, false
		}
		if got >= n {
			return true, true
		}
		if gone != nil && gone() {
			return false, true
		}
		if time.Now().After(deadline) {
			if gone != nil {
				tb.Fatalf("got %d threads asleep in futex.Wait, want %d, and the waiter has not returned", got, n)
			}
			tb.Fatalf("got %d threads asleep in futex.Wait, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func futexSleepers(pid int, addr *atomic.Uint32) (int, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("no /proc/%d/task/*/syscall files (%v)", pid, err)
	}
	nr := strconv.Itoa(unix.SYS_FUTEX)
	want := ""
	if addr != nil {
		want = fmt.Sprintf("%#x", uintptr(unsafe.Pointer(addr)))
	}
	count := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if os.IsNotExist(err) {
				continue // the thread exited meanwhile
			}
			return 0, err
		}
		fields := strings.Fields(string(b))
		if len(fields) >= 3 && fields[0] == nr && fields[2] == "0x0" && (want == "" || fields[1] == want) {
			count++
		}
	}
	return count, nil
}
