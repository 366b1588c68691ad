package lockmgr_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

func TestMain(m *testing.M) { testproc.Main(m, helpers) }

// Bounds on the waits of these tests: generous, they only turn a hang into
// a failure on a slow shared machine.
const (
	testTimeout = 30 * time.Second
	pollEvery   = 200 * time.Microsecond
)

// long reports whether the long torture runs were asked for.
func long() bool { return os.Getenv("SHMLOCK_LONG") == "1" }

// helpers are the bodies of the helper processes (see procs_test.go).
var helpers = map[string]func(args []string) int{
	"counter":      counterHelper,      // PATH RESOURCE OWNER MODE ITERS
	"collaborate":  collaborateHelper,  // PATH RESOURCE OWNER N
	"hold":         holdHelper,         // PATH RESOURCE OWNER MODE
	"kill-worker":  killWorkerHelper,   // PATH RECORD (kill_test.go)
	"bench-worker": benchWorkersHelper, // PATH KIND SHARED INDEX ITERS DIR (bench_test.go)
}

// newManager creates a segment with a lock table of entries entries (one
// of them the header) and a Manager over it.
func newManager(tb testing.TB, entries int, opts lockmgr.Options) (*lockmgr.Manager, *shm.Segment) {
	tb.Helper()
	m, seg, _ := newManagerAt(tb, entries, opts)
	return m, seg
}

// scratchBytes is the size of the scratch area of a test segment (its txn
// arena, which no package uses in these tests).
const scratchBytes = 64 << 10

func newManagerAt(tb testing.TB, entries int, opts lockmgr.Options) (*lockmgr.Manager, *shm.Segment, string) {
	tb.Helper()
	path := testproc.SegmentPath(tb)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 1, Upgrades: 1,
		TxnArenaBytes: scratchBytes, LockMgrEntries: entries}})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = seg.Close() })
	m, err := lockmgr.Open(seg, opts)
	require.NoError(tb, err)
	return m, seg, path
}

// fakeClock is a Clock whose Sleep advances it instead of waiting, and
// records every sleep: the backoff schedule becomes exact and instant.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
	// onSleep, if set, runs (without mu) after each sleep.
	onSleep func()
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	f := c.onSleep
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// child is a running helper process; its output is collected, its exit
// awaited by a goroutine.
type child struct {
	name string
	cmd  *exec.Cmd
	out  lockedBuffer
	done chan struct{}
	err  error
}

func startChild(tb testing.TB, name string, args ...string) *child {
	tb.Helper()
	c := &child{name: name, cmd: testproc.Command(name, args...), done: make(chan struct{})}
	// A race-detector build sleeps a second at exit by default.
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

func (c *child) wait(tb testing.TB) error {
	tb.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(testTimeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		tb.Fatalf("helper %s (pid %d) still running after %v; output:\n%s", c.name, c.pid(), testTimeout, c.out.String())
		return nil
	}
}

func (c *child) waitOK(tb testing.TB) string {
	tb.Helper()
	require.NoError(tb, c.wait(tb), "helper %s (pid %d) failed; output:\n%s", c.name, c.pid(), c.out.String())
	return c.out.String()
}

func (c *child) waitKilled(tb testing.TB) {
	tb.Helper()
	err := c.wait(tb)
	var exit *exec.ExitError
	require.ErrorAs(tb, err, &exit, "helper %s: output:\n%s", c.name, c.out.String())
	if ws := exit.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		tb.Fatalf("helper %s: got exit %v, want death by SIGKILL", c.name, err)
	}
}

// waitLine waits for a line of output that starts with prefix.
func (c *child) waitLine(tb testing.TB, prefix string) string {
	tb.Helper()
	var rest string
	waitFor(tb, func() bool {
		for line := range strings.Lines(c.out.String()) {
			if r, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), prefix); ok {
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
	}, "helper "+c.name+" to print "+prefix)
	return rest
}

func waitFor(tb testing.TB, cond func() bool, what string) {
	tb.Helper()
	for deadline := time.Now().Add(testTimeout); !cond(); time.Sleep(pollEvery) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", testTimeout, what)
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
