package upgrade_test

import (
	"bufio"
	"bytes"
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
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

func TestMain(m *testing.M) { testproc.Main(m, helpers) }

// Bounds on the waits of these tests: generous, they only turn a hang into
// a failure on a slow shared machine.
const (
	testTimeout = 30 * time.Second
	pollEvery   = 500 * time.Microsecond
)

func long() bool { return os.Getenv("SHMLOCK_LONG") == "1" }

// helpers run in child processes (testproc); each uses upgrade mutex 0 of
// the segment at args[0].
var helpers = map[string]func(args []string) int{
	"rw":   rwHelper,   // PATH ITERS SEED: the mixed workload, prints "writes N torn T"
	"hold": holdHelper, // PATH MODE: take a hold in MODE, print "held", sleep until killed
}

// testOptions size a test segment: two upgrade mutexes with 8 reader
// records each, one lockmgr entry as scratch for the shared record.
var testOptions = shm.Options{Options: layout.Options{
	Slots: 1, Upgrades: 2, UpgradeReaders: 8, TxnRecords: -1, TxnArenaBytes: -1, LockMgrEntries: 1,
}}

func newSegment(tb testing.TB) (*shm.Segment, string) {
	tb.Helper()
	path := testproc.SegmentPath(tb)
	seg, err := shm.Create(path, testOptions)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = seg.Close() })
	return seg, path
}

// open returns a new handle on mutex 0, closed at the end of the test
// (errors ignored: a test may leave it holding).
func open(tb testing.TB, seg *shm.Segment) *upgrade.Mutex {
	tb.Helper()
	m, err := upgrade.Open(seg, 0)
	require.NoError(tb, err)
	return m
}

// child is a running helper process.
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
	c.cmd.Env = append(c.cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
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

func (c *child) wait(tb testing.TB) error {
	tb.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(testTimeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		tb.Fatalf("helper %s still running after %v; output:\n%s", c.name, testTimeout, c.out.String())
		return nil
	}
}

func (c *child) waitOK(tb testing.TB) string {
	tb.Helper()
	require.NoError(tb, c.wait(tb), "helper %s failed; output:\n%s", c.name, c.out.String())
	return c.out.String()
}

// kill sends SIGKILL and waits for the death.
func (c *child) kill(tb testing.TB) {
	tb.Helper()
	require.NoError(tb, c.cmd.Process.Signal(syscall.SIGKILL))
	err := c.wait(tb)
	var exit *exec.ExitError
	require.ErrorAs(tb, err, &exit, "helper %s: output:\n%s", c.name, c.out.String())
}

// waitLine waits until the child prints a line starting with prefix.
func (c *child) waitLine(tb testing.TB, prefix string) string {
	tb.Helper()
	var rest string
	waitFor(tb, func() bool {
		sc := bufio.NewScanner(strings.NewReader(c.out.String()))
		for sc.Scan() {
			if r, ok := strings.CutPrefix(sc.Text(), prefix); ok {
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

func waitFor(tb testing.TB, cond func() bool, what string, args ...any) {
	tb.Helper()
	for deadline := time.Now().Add(testTimeout); !cond(); time.Sleep(pollEvery) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for "+what, append([]any{testTimeout}, args...)...)
		}
	}
}

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
