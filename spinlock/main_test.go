package spinlock_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

func TestMain(m *testing.M) { testproc.Main(m, helpers) }

// Bounds on every wait of these tests. They are generous on purpose: the
// machine is shared and slow, and they only turn a hang into a failure.
const (
	testTimeout = 20 * time.Second       // a helper's whole life, a wait for a condition
	pollEvery   = 200 * time.Microsecond // polling step of waitFor and the helpers
)

// long reports whether the long torture runs were asked for.
func long() bool { return os.Getenv("SHMLOCK_LONG") == "1" }

// helpers are the bodies of the helper processes the tests start with
// startChild (testproc re-runs this test binary). Each prints what the parent
// needs on stdout, one fact per line, and reports trouble as a line and a
// non-zero status. Every one uses owner slot 0 of the segment at args[0].
var helpers = map[string]func(args []string) int{
	"counter":        counterHelper,       // PATH MODE ITERS
	"handoff":        handoffHelper,       // PATH TOKEN_IN
	"kill-worker":    killWorkerHelper,    // PATH RECORD SEED
	"hold":           holdHelper,          // PATH DEPTH
	"wait-lock":      waitLockHelper,      // PATH
	"wait-cpu":       waitCPUHelper,       // PATH
	"named":          namedHelper,         // PATH NAME
	"bench-pingpong": benchPingPongHelper, // PATH
}

// newSegment creates a segment for one test (removed when it ends) with room
// for the scratch words of scratch.go.
func newSegment(tb testing.TB) (*shm.Segment, string) {
	tb.Helper()
	path := testproc.SegmentPath(tb)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 8, LockMgrEntries: scratchEntries}})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = seg.Close() })
	return seg, path
}

// openLock is what every helper does first: open the segment and the lock
// over its slot 0.
func openLock(path string, mode spinlock.Mode) (*shm.Segment, *spinlock.Lock, scratch, error) {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		return nil, nil, scratch{}, err
	}
	l, err := spinlock.Open(seg, 0, mode)
	if err != nil {
		_ = seg.Close()
		return nil, nil, scratch{}, err
	}
	sc, err := scratchOf(seg)
	if err != nil {
		_ = seg.Close()
		return nil, nil, scratch{}, err
	}
	return seg, l, sc, nil
}

// child is a running helper process. Its stdout and stderr are collected
// together; its exit is collected by a goroutine, so signals may be sent to
// it at any time until done is closed.
type child struct {
	name string
	cmd  *exec.Cmd
	out  lockedBuffer
	done chan struct{}
	err  error // the exit status, once done is closed
}

func startChild(tb testing.TB, name string, args ...string) *child {
	tb.Helper()
	c := &child{name: name, cmd: testproc.Command(name, args...), done: make(chan struct{})}
	// A race-detector build sleeps a second at exit by default; helpers
	// have nothing to wait for.
	c.cmd.Env = append(c.cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	c.cmd.Stdout = &c.out
	c.cmd.Stderr = &c.out
	require.NoError(tb, c.cmd.Start())
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	tb.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// identity is the child's packed process identity, as a lock records it.
func (c *child) identity(tb testing.TB) uint64 {
	tb.Helper()
	id, err := proc.Lookup(uint32(c.pid()))
	require.NoError(tb, err)
	return id.Pack()
}

// wait returns the child's exit error, killing it and failing the test if
// it does not exit within timeout.
func (c *child) wait(tb testing.TB, timeout time.Duration) error {
	tb.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		tb.Fatalf("helper %s (pid %d) still running after %v; output:\n%s", c.name, c.pid(), timeout, c.out.String())
		return nil
	}
}

// waitOK waits for a clean exit and returns the output.
func (c *child) waitOK(tb testing.TB) string {
	tb.Helper()
	err := c.wait(tb, testTimeout)
	require.NoError(tb, err, "helper %s (pid %d) failed; output:\n%s", c.name, c.pid(), c.out.String())
	return c.out.String()
}

// waitKilled waits for the child to die of SIGKILL.
func (c *child) waitKilled(tb testing.TB) {
	tb.Helper()
	err := c.wait(tb, testTimeout)
	var exit *exec.ExitError
	require.ErrorAs(tb, err, &exit, "helper %s: output:\n%s", c.name, c.out.String())
	ws := exit.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		tb.Fatalf("helper %s: got exit %v, want death by SIGKILL; output:\n%s", c.name, err, c.out.String())
	}
}

// waitLine waits for a line of output that starts with prefix and returns
// the rest of it.
func (c *child) waitLine(tb testing.TB, prefix string) string {
	tb.Helper()
	var rest string
	waitFor(tb, func() bool {
		for _, line := range c.lines() {
			if r, ok := strings.CutPrefix(line, prefix); ok {
				rest = r
				return true
			}
		}
		select {
		case <-c.done:
			tb.Fatalf("helper %s exited (%v) before printing %q; output:\n%s", c.name, c.err, prefix, c.out.String())
		default:
		}
		return false
	}, "helper %s to print %q", c.name, prefix)
	return rest
}

func (c *child) lines() []string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(c.out.String()))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// waitFor polls cond until it holds, failing the test after testTimeout.
func waitFor(tb testing.TB, cond func() bool, what string, args ...any) {
	tb.Helper()
	for deadline := time.Now().Add(testTimeout); !cond(); time.Sleep(pollEvery) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for "+what, append([]any{testTimeout}, args...)...)
		}
	}
}

// waitStopped waits until every thread of the child is in the stopped
// state (after a SIGSTOP), so that it can no longer change the segment and
// everything it wrote is visible. Threads stop one by one: the state of the
// first alone says nothing of the thread running the lock loop.
func (c *child) waitStopped(tb testing.TB) {
	tb.Helper()
	dir := "/proc/" + strconv.Itoa(c.pid()) + "/task"
	waitFor(tb, func() bool {
		tasks, err := os.ReadDir(dir)
		require.NoError(tb, err)
		for _, task := range tasks {
			b, err := os.ReadFile(dir + "/" + task.Name() + "/stat")
			if err != nil {
				return false // a thread exiting as we look
			}
			i := bytes.LastIndexByte(b, ')')
			require.True(tb, i > 0 && i+2 < len(b), "malformed stat %q", b)
			switch b[i+2] {
			case 'T', 't':
			case 'Z', 'X':
				tb.Fatalf("helper %s (pid %d) exited instead of stopping; output:\n%s", c.name, c.pid(), c.out.String())
			default:
				return false
			}
		}
		return len(tasks) > 0
	}, "pid %d to stop", c.pid())
}

// lockedBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// fail prints a helper's failure in the form the parent shows, and returns
// its exit status.
func fail(format string, args ...any) int {
	fmt.Printf("FAIL "+format+"\n", args...)
	return 1
}

// waitWord polls an atomic scratch word (in a helper) until it is at least
// want, for at most testTimeout.
func waitWord(w interface{ Load() uint64 }, want uint64) error {
	for deadline := time.Now().Add(testTimeout); w.Load() < want; time.Sleep(pollEvery) {
		if time.Now().After(deadline) {
			return errors.New("timed out waiting for the parent")
		}
	}
	return nil
}

func parseMode(s string) spinlock.Mode {
	if s == spinlock.Token.String() {
		return spinlock.Token
	}
	return spinlock.PIDTID
}

// slotState is a copy of every word of an owner slot, for before/after
// comparisons.
type slotState struct {
	PID, TID, Token uint64
	Recursion, Pad  uint32
}

func stateOf(s *layout.OwnerSlot) slotState {
	return slotState{s.PID.Load(), s.TID.Load(), s.Token.Load(), s.RecursionCount.Load(), s.Pad.Load()}
}
