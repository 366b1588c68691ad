package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/etcdtest"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// The counter of the multi-process tests is a file that each exclusive
// holder reads, adds one to and writes back, with the version it was
// granted: a second holder inside at the same time loses an increment or
// writes a version that goes back. The marker directory exists while a
// holder is inside: a holder that cannot make it met another.
const (
	counterFile = "counter"
	markerDir   = "inside"
	counterRes  = "counter"
)

func fail(format string, args ...any) int {
	fmt.Printf("FAIL "+format+"\n", args...)
	return 1
}

// helperManager is what every helper does first: a Manager on the
// server's endpoint and the test's prefix, with a session of ttl.
func helperManager(endpoint, prefix string, ttl time.Duration) (*etcdlock.Manager, func(), error) {
	c, err := etcdtest.Client(endpoint)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
	defer cancel()
	m, err := etcdlock.New(ctx, c, etcdlock.Options{Prefix: prefix, SessionTTL: ttl})
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return m, func() { _ = m.Close(); _ = c.Close() }, nil
}

// counterHelper takes the counter resource ITERS times, each time adding
// one to the counter file. Args: ENDPOINT PREFIX DIR OWNER ITERS.
func counterHelper(args []string) int {
	m, done, err := helperManager(args[0], args[1], liveSessionTTL)
	if err != nil {
		return fail("%v", err)
	}
	defer done()
	dir, owner := args[2], args[3]
	iters, _ := strconv.Atoi(args[4])
	reclaimed := 0
	for i := range iters {
		ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
		info, err := m.Acquire(ctx, counterRes, owner, lockmgr.Exclusive, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
		cancel()
		if err != nil {
			return fail("acquire %d: %v", i, err)
		}
		if info.Reclaimed {
			reclaimed++
		}
		if err := os.Mkdir(filepath.Join(dir, markerDir), 0o700); err != nil {
			return fail("two holders inside: %v", err)
		}
		n, last, err := readCounter(dir)
		if err != nil {
			return fail("%v", err)
		}
		if info.Version <= last {
			return fail("version went back: %d after %d", info.Version, last)
		}
		if err := writeCounter(dir, n+1, info.Version); err != nil {
			return fail("%v", err)
		}
		if err := os.Remove(filepath.Join(dir, markerDir)); err != nil {
			return fail("%v", err)
		}
		if err := m.Release(counterRes, owner); err != nil {
			return fail("release %d: %v", i, err)
		}
	}
	fmt.Printf("reclaimed %d\n", reclaimed)
	return 0
}

func readCounter(dir string) (n int, version uint64, err error) {
	b, err := os.ReadFile(filepath.Join(dir, counterFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	_, err = fmt.Sscanf(string(b), "%d %d", &n, &version)
	return n, version, err
}

func writeCounter(dir string, n int, version uint64) error {
	tmp := filepath.Join(dir, counterFile+".tmp")
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d", n, version), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, counterFile))
}

// holdHelper takes RESOURCE (exclusive, no TTL: on its session), prints
// its version, and waits to be killed. Args: ENDPOINT PREFIX RESOURCE
// OWNER.
func holdHelper(args []string) int {
	m, done, err := helperManager(args[0], args[1], testSessionTTL) // killed: its hold ends with its session
	if err != nil {
		return fail("%v", err)
	}
	defer done()
	info, err := m.Acquire(context.Background(), args[2], args[3], lockmgr.Exclusive, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
	if err != nil {
		return fail("acquire: %v", err)
	}
	fmt.Printf("version %d\n", info.Version)
	time.Sleep(testproc.Timeout)
	return fail("not killed")
}

// TestProcessesCounter has processes contend for one resource on etcd:
// the counter they keep under it is exact, and no two were inside at once.
func TestProcessesCounter(t *testing.T) {
	t.Parallel()
	prefix, dir := newPrefix(t), t.TempDir()
	const procs, iters = 4, 25
	var children []*testproc.Child
	for i := range procs {
		children = append(children, testproc.Start(t, "counter", server.Members[0].Endpoint, prefix, dir, fmt.Sprintf("p%d", i), strconv.Itoa(iters)))
	}
	for _, c := range children {
		c.WaitOK(t)
	}
	n, _, err := readCounter(dir)
	require.NoError(t, err)
	require.Equal(t, procs*iters, n)
	o, err := newManager(t, prefix).Overview()
	require.NoError(t, err)
	require.EqualValues(t, procs*iters, o.Stats.TotalLocks)
	require.EqualValues(t, procs*iters, o.Stats.Released)
	require.Zero(t, o.Stats.ActiveLocks)
}

// TestKilledHolder kills (SIGKILL) a process that holds the resource
// while others wait for it: its session's lease expires and frees the
// resource, every waiter finishes, the counter is exact, and the grant
// after the dead holder's is told (Reclaimed, Inconsistent) with a higher
// version.
func TestKilledHolder(t *testing.T) {
	t.Parallel()
	prefix, dir := newPrefix(t), t.TempDir()
	ep := server.Members[0].Endpoint
	holder := testproc.Start(t, "hold", ep, prefix, counterRes, "doomed")
	v, err := strconv.ParseUint(holder.WaitLine(t, "version "), 10, 64)
	require.NoError(t, err)
	const procs, iters = 3, 10
	var children []*testproc.Child
	for i := range procs {
		children = append(children, testproc.Start(t, "counter", ep, prefix, dir, fmt.Sprintf("p%d", i), strconv.Itoa(iters)))
	}
	// The waiters are queued behind the holder before it dies.
	watcher := newManager(t, prefix)
	testproc.WaitFor(t, func() bool {
		o, err := watcher.Overview()
		require.NoError(t, err)
		return o.Stats.ConflictsDetected >= procs
	}, "the counters to queue")
	holder.Kill(t)
	reclaimed := 0
	for _, c := range children {
		out := c.WaitOK(t)
		rest, ok := testproc.Line(out, "reclaimed ")
		require.True(t, ok, out)
		n, _ := strconv.Atoi(strings.TrimSpace(rest))
		reclaimed += n
	}
	require.Equal(t, 1, reclaimed, "exactly one grant follows the dead holder's")
	n, last, err := readCounter(dir)
	require.NoError(t, err)
	require.Equal(t, procs*iters, n)
	require.Greater(t, last, v)
	o, err := watcher.Overview()
	require.NoError(t, err)
	require.EqualValues(t, 1, o.Stats.Reclaimed)
	ri, err := watcher.Inspect(counterRes)
	require.NoError(t, err)
	require.True(t, ri.Inconsistent, "nobody marked it consistent")
}
