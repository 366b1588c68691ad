package lockmgr_test

import (
	"context"
	"sync"
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
	testTimeout = testproc.Timeout
	pollEvery   = testproc.PollEvery
)

// long reports whether the long torture runs were asked for.
var long = testproc.Long

// helpers are the bodies of the helper processes (see procs_test.go).
var helpers = map[string]func(args []string) int{
	"counter":      counterHelper,      // PATH RESOURCE OWNER MODE ITERS
	"collaborate":  collaborateHelper,  // PATH RESOURCE OWNER N
	"hold":         holdHelper,         // PATH RESOURCE OWNER MODE
	"tell":         tellHelper,         // PATH RESOURCE OWNER MARK (consistent_test.go)
	"claim-exit":   claimExitHelper,    // PATH NAME exit|wait (consistent_test.go)
	"wait":         waitHelper,         // PATH RESOURCE OWNER (sleepers_test.go)
	"wait-cpu":     waitCPUHelper,      // PATH MODE (sleep_test.go)
	"kill-worker":  killWorkerHelper,   // PATH RECORD (kill_test.go)
	"bench-worker": benchWorkersHelper, // PATH KIND SHARED INDEX ITERS DIR (bench_test.go)
	"crash-at":     crashAtHelper,      // PATH STEP OP RESOURCE [OWNER MODE] (crash_test.go)
	"hold-many":    holdManyHelper,     // PATH RESOURCE MODE OWNER... (dead_test.go)
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

// waitFor polls cond until it holds, failing the test after testTimeout.
var waitFor = testproc.WaitFor
