package testproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shmlock/shmlock/internal/proc"
)

// Bounds on the waits of Child and WaitFor. They are generous on purpose:
// the machine is shared and slow, and they only turn a hang into a failure.
const (
	Timeout   = 30 * time.Second       // a helper's whole life, a wait for a condition
	PollEvery = 200 * time.Microsecond // polling step of the waits
)

// Child is a running helper process. Its stdout and stderr are collected
// together in Out; its exit is collected by a goroutine, so signals may be
// sent to it at any time until Done is closed. It is killed when the test
// ends, if it still runs.
type Child struct {
	Name  string
	Cmd   *exec.Cmd
	Out   *Output
	stdin io.WriteCloser // StartWithStdin only
	done  chan struct{}
	err   error // the exit status, once done is closed
}

// Start starts helper name with args (see Command). The helper's stdin is
// empty.
func Start(tb testing.TB, name string, args ...string) *Child {
	tb.Helper()
	return start(tb, false, nil, name, args)
}

// StartWithStdin is Start with a pipe to the helper's stdin, for a helper
// that waits for the test's word (a line it reads) before a step: Send
// writes the lines.
func StartWithStdin(tb testing.TB, name string, args ...string) *Child {
	tb.Helper()
	return start(tb, true, nil, name, args)
}

// start starts helper name with args, env added to its environment, and
// with a pipe to its stdin if pipe.
func start(tb testing.TB, pipe bool, env []string, name string, args []string) *Child {
	tb.Helper()
	c, err := startChild(tb, pipe, func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, env...) }, name, args)
	if err != nil {
		tb.Fatalf("start helper %s: %v", name, err)
	}
	return c
}

// startChild starts helper name with args, its command changed by
// prepare before it starts, with a pipe to its stdin if pipe; it returns
// the error of a start that failed.
func startChild(tb testing.TB, pipe bool, prepare func(*exec.Cmd), name string, args []string) (*Child, error) {
	tb.Helper()
	c := &Child{Name: name, Cmd: Command(name, args...), Out: new(Output), done: make(chan struct{})}
	prepare(c.Cmd)
	c.Cmd.Stdout, c.Cmd.Stderr = c.Out, c.Out
	if pipe {
		var err error
		if c.stdin, err = c.Cmd.StdinPipe(); err != nil {
			return nil, fmt.Errorf("stdin: %w", err)
		}
	}
	if err := c.Cmd.Start(); err != nil {
		return nil, err
	}
	go func() { c.err = c.Cmd.Wait(); close(c.done) }()
	tb.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.Cmd.Process.Kill()
			<-c.done
		}
	})
	return c, nil
}

// Send writes line and a newline to the child's stdin (StartWithStdin).
func (c *Child) Send(tb testing.TB, line string) {
	tb.Helper()
	if c.stdin == nil {
		tb.Fatalf("helper %s: Send needs StartWithStdin", c.Name)
	}
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		tb.Fatalf("helper %s (pid %d): sending %q: %v; output:\n%s", c.Name, c.PID(), line, err, c.Out)
	}
}

// PID is the child's process id.
func (c *Child) PID() int { return c.Cmd.Process.Pid }

// Done is closed when the child has exited.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is the child's exit status, once Done is closed.
func (c *Child) Err() error { return c.err }

// Identity is the child's packed process identity, as a lock records it.
func (c *Child) Identity(tb testing.TB) uint64 {
	tb.Helper()
	id, err := proc.Lookup(uint32(c.PID()))
	if err != nil {
		tb.Fatalf("helper %s (pid %d): %v", c.Name, c.PID(), err)
	}
	return id.Pack()
}

// Wait returns the child's exit error, killing it and failing the test if
// it does not exit within Timeout.
func (c *Child) Wait(tb testing.TB) error {
	tb.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(Timeout):
		_ = c.Cmd.Process.Kill()
		<-c.done
		tb.Fatalf("helper %s (pid %d) still running after %v; output:\n%s", c.Name, c.PID(), Timeout, c.Out)
		return nil
	}
}

// WaitOK waits for a clean exit and returns the output.
func (c *Child) WaitOK(tb testing.TB) string {
	tb.Helper()
	if err := c.Wait(tb); err != nil {
		tb.Fatalf("helper %s (pid %d) failed: %v; output:\n%s", c.Name, c.PID(), err, c.Out)
	}
	return c.Out.String()
}

// RunLine runs helper name with args to a clean exit and returns the rest
// of its output line that starts with prefix: one step of a protocol test
// whose every step is a process of its own.
func RunLine(tb testing.TB, prefix, name string, args ...string) string {
	tb.Helper()
	c := Start(tb, name, args...)
	line := c.WaitLine(tb, prefix)
	c.WaitOK(tb)
	return line
}

// WaitKilled waits for the child to die of SIGKILL.
func (c *Child) WaitKilled(tb testing.TB) {
	tb.Helper()
	err := c.Wait(tb)
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		tb.Fatalf("helper %s: got exit %v, want death by SIGKILL; output:\n%s", c.Name, err, c.Out)
	}
	if ws := exit.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		tb.Fatalf("helper %s: got exit %v, want death by SIGKILL; output:\n%s", c.Name, err, c.Out)
	}
}

// Kill sends SIGKILL and waits for the death.
func (c *Child) Kill(tb testing.TB) {
	tb.Helper()
	c.signal(tb, syscall.SIGKILL)
	c.WaitKilled(tb)
}

// Stop sends SIGSTOP and waits until the child is stopped (WaitStopped).
func (c *Child) Stop(tb testing.TB) {
	tb.Helper()
	c.signal(tb, syscall.SIGSTOP)
	c.WaitStopped(tb)
}

// RequireRunning fails the test if the child has exited: for a helper
// that runs until told to stop, an exit is a failure it found.
func (c *Child) RequireRunning(tb testing.TB) {
	tb.Helper()
	select {
	case <-c.done:
		tb.Fatalf("helper %s (pid %d) exited (%v); output:\n%s", c.Name, c.PID(), c.err, c.Out)
	default:
	}
}

func (c *Child) signal(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	if err := c.Cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("helper %s (pid %d): %v: %v; output:\n%s", c.Name, c.PID(), sig, err, c.Out)
	}
}

// KillIfRunning kills the child unless it exited already.
func (c *Child) KillIfRunning(tb testing.TB) {
	tb.Helper()
	select {
	case <-c.done:
		return
	default:
	}
	if err := c.Cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		tb.Fatalf("kill %s: %v", c.Name, err)
	}
	<-c.done
}

// WaitLine waits for a line of output that starts with prefix and returns
// the rest of it. It fails the test if the child exits first.
func (c *Child) WaitLine(tb testing.TB, prefix string) string {
	tb.Helper()
	var rest string
	WaitFor(tb, func() bool {
		var ok bool
		if rest, ok = Line(c.Out.String(), prefix); ok {
			return true
		}
		select {
		case <-c.done:
			// The output is complete once the child is waited for: it may
			// have come between the look above and the exit.
			if rest, ok = Line(c.Out.String(), prefix); ok {
				return true
			}
			tb.Fatalf("helper %s exited (%v) before printing %q; output:\n%s", c.Name, c.err, prefix, c.Out)
		default:
		}
		return false
	}, "helper %s to print %q", c.Name, prefix)
	return rest
}

// Line returns the rest of the first line of out that starts with prefix.
func Line(out, prefix string) (rest string, ok bool) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if r, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return r, true
		}
	}
	return "", false
}

// WaitStopped waits until every thread of the child is in the stopped
// state (after a SIGSTOP), so that it can no longer change the segment and
// everything it wrote is visible. Threads stop one by one: the state of the
// first alone says nothing of the thread running the lock loop.
func (c *Child) WaitStopped(tb testing.TB) {
	tb.Helper()
	dir := "/proc/" + strconv.Itoa(c.PID()) + "/task"
	WaitFor(tb, func() bool {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			tb.Fatalf("helper %s (pid %d): %v; output:\n%s", c.Name, c.PID(), err, c.Out)
		}
		for _, task := range tasks {
			b, err := os.ReadFile(dir + "/" + task.Name() + "/stat")
			if err != nil {
				return false // a thread exiting as we look
			}
			i := bytes.LastIndexByte(b, ')')
			if i <= 0 || i+2 >= len(b) {
				tb.Fatalf("malformed stat %q", b)
			}
			switch b[i+2] {
			case 'T', 't':
			case 'Z', 'X':
				tb.Fatalf("helper %s (pid %d) exited instead of stopping; output:\n%s", c.Name, c.PID(), c.Out)
			default:
				return false
			}
		}
		return len(tasks) > 0
	}, "pid %d to stop", c.PID())
}

// WaitFor polls cond until it holds, failing the test after Timeout. what
// and args say what it waits for, as a format.
func WaitFor(tb testing.TB, cond func() bool, what string, args ...any) {
	tb.Helper()
	for deadline := time.Now().Add(Timeout); !cond(); time.Sleep(PollEvery) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for "+what, append([]any{Timeout}, args...)...)
		}
	}
}

// Output is a bytes.Buffer safe for one writer and concurrent readers.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Output) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Output) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Receive returns the next value from ch, failing the test if none comes
// within Timeout; what says what was awaited.
func Receive[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Timeout):
		tb.Fatalf("timed out after %v waiting for %s", Timeout, what)
		panic("unreachable")
	}
}

// ExitedIdentity is the packed identity of a process that has exited (and
// been reaped): what a lock word of a holder killed at some step records,
// for tests that play that holder in the test's own process.
func ExitedIdentity(tb testing.TB) uint64 {
	tb.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	id, err := proc.Lookup(uint32(cmd.Process.Pid))
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		tb.Fatal(err)
	}
	return id.Pack()
}
