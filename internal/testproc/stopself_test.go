package testproc

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m, map[string]func([]string) int{"stop-self": stopSelfHelper}) }

// stopSelfHelper calls StopSelf from a thread other than the main one,
// which a signal sent to the process would reach first, and prints "past"
// once continued.
func stopSelfHelper([]string) int {
	runtime.LockOSThread() // kept: the main thread stays this goroutine's
	if syscall.Gettid() == os.Getpid() {
		ch := make(chan int)
		go func() { ch <- stopSelfHelper(nil) }()
		return <-ch
	}
	fmt.Println("stopping")
	if err := StopSelf(); err != nil {
		fmt.Println("FAIL", err)
		return 1
	}
	fmt.Println("past")
	return 0
}

// A helper that stops itself runs no further: once every thread of it is
// stopped, the line it prints right after StopSelf is not there; it comes
// once the helper is continued. Five helpers: a stop sent to the process
// instead let one in seven or so of them stop before printing.
func TestStopSelfStopsTheCaller(t *testing.T) {
	t.Parallel()
	for range 5 {
		c := Start(t, "stop-self")
		c.WaitLine(t, "stopping")
		c.WaitStopped(t)
		require.NotContains(t, c.Out.String(), "past", "the helper ran on past its stop")
		c.signal(t, syscall.SIGCONT)
		c.WaitLine(t, "past")
		c.WaitOK(t)
	}
}
