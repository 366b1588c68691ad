package metrics_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/metrics"
	"github.com/shmlock/shmlock/metrics/dashboard"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

func TestMain(m *testing.M) { testproc.Main(m, helpers) }

var helpers = map[string]func(args []string) int{
	// hold PATH: take the spinlock "queue", a shared hold of the upgrade
	// mutex "table" and the resource "job" (owner "w1"), print "held",
	// and release all three at the first line read from stdin.
	"hold": holdHelper,
}

func holdHelper(args []string) int {
	fail := func(err error) int { fmt.Println("error:", err); return 1 }
	ls, err := openLocks(args[0])
	if err != nil {
		return fail(err)
	}
	defer ls.close()
	l, u, m := ls.spin, ls.rw, ls.mgr
	g, err := l.Lock(spinlock.NewHolder())
	if err != nil {
		return fail(err)
	}
	if err := u.LockShared(); err != nil {
		return fail(err)
	}
	if _, err := m.Acquire(context.Background(), "job", "w1", lockmgr.Exclusive, lockmgr.AcquireOptions{}); err != nil {
		return fail(err)
	}
	fmt.Println("held")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	for _, err := range []error{g.Release(), u.UnlockShared(), m.Release("job", "w1")} {
		if err != nil {
			return fail(err)
		}
	}
	fmt.Println("released")
	return 0
}

// locks are a helper's handles of the segment at path: the spinlock
// "queue", the upgrade mutex "table" and the lock manager.
type locks struct {
	seg  *shm.Segment
	spin *spinlock.Lock
	rw   *upgrade.Mutex
	mgr  *lockmgr.Manager
}

func openLocks(path string) (ls *locks, err error) {
	ls = &locks{}
	defer func() {
		if err != nil {
			ls.close()
		}
	}()
	if ls.seg, err = shm.Open(path, shm.Options{}); err != nil {
		return ls, err
	}
	if ls.spin, err = spinlock.Named(ls.seg, "queue", spinlock.PIDTID); err != nil {
		return ls, err
	}
	if ls.rw, err = upgrade.Named(ls.seg, "table"); err != nil {
		return ls, err
	}
	ls.mgr, err = lockmgr.Open(ls.seg, lockmgr.Options{})
	return ls, err
}

func (ls *locks) close() {
	if ls.rw != nil {
		_ = ls.rw.Close()
	}
	if ls.spin != nil {
		_ = ls.spin.Close()
	}
	if ls.seg != nil {
		_ = ls.seg.Close()
	}
}

// sizes are the test segments' tables: small, so that the capacities in
// the expected text are short.
var sizes = layout.Options{Slots: 4, Upgrades: 2, UpgradeReaders: 2, TxnRecords: -1, LockMgrEntries: 4, DataBytes: 4096}

// newSegment creates a segment with the named locks of the hold helper
// (so that they stay in the tables after its release), the resource "job"
// declared and a data region of 100 bytes; it returns its path.
func newSegment(t testing.TB) string {
	t.Helper()
	return newSegmentOf(t, sizes)
}

// newSegmentOf is newSegment with tables of the given sizes.
func newSegmentOf(t testing.TB, opts layout.Options) string {
	t.Helper()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{Options: opts})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	l, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	u, err := upgrade.Named(seg, "table")
	require.NoError(t, err)
	t.Cleanup(func() { _ = u.Close() })
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	require.NoError(t, m.Declare("job"))
	_, err = seg.Data("q", 100)
	require.NoError(t, err)
	return path
}

// holding starts the hold helper on the segment at path and waits until it
// holds its spinlock, upgrade mutex and resource; it waits on stdin to
// release them.
func holding(t *testing.T, path string) *testproc.Child {
	t.Helper()
	h := testproc.StartWithStdin(t, "hold", path)
	h.WaitLine(t, "held")
	return h
}

// openRO opens path read-only, as a monitor does, until the test ends.
func openRO(t testing.TB, path string) *shm.Segment {
	t.Helper()
	seg, err := shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	return seg
}

// acquired is when the hold of resource began.
func acquired(t *testing.T, seg *shm.Segment, resource string) time.Time {
	t.Helper()
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	ri, err := m.Inspect(resource)
	require.NoError(t, err)
	require.Len(t, ri.Holders, 1)
	return ri.Holders[0].AcquiredAt
}

// The per-lock and per-table series, while a helper process holds a
// spinlock, an upgrade mutex's shared lock and a resource, and after it
// released them. (shmlock_lockmgr_hold_seconds_total, the real length of
// the hold, is checked apart.)
func TestScrape(t *testing.T) {
	t.Parallel()
	path := newSegment(t)
	seg := openRO(t, path)
	h := holding(t, path)

	at := acquired(t, seg, "job")
	c := metrics.NewCollector(seg, metrics.SegmentLabel("test"),
		metrics.Clock(func() time.Time { return at.Add(1500 * time.Millisecond) }))
	names := []string{"shmlock_lock_held", "shmlock_lock_holders", "shmlock_lock_dead_holders", "shmlock_lock_waiters",
		"shmlock_lock_inconsistent", "shmlock_lock_hold_age_seconds", "shmlock_lockmgr_grants_total",
		"shmlock_lockmgr_releases_total", "shmlock_lockmgr_conflicts_total", "shmlock_lockmgr_expired_total",
		"shmlock_lockmgr_reclaimed_total", "shmlock_lockmgr_active_holds", "shmlock_lockmgr_expired_holds",
		"shmlock_table_capacity", "shmlock_table_used", "shmlock_data_size_bytes", "shmlock_data_used_bytes",
		"shmlock_data_regions"}
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(heldText), names...))

	// Read names the holders' processes with the counts it reports.
	v, err := metrics.Read(seg, at)
	require.NoError(t, err)
	got := map[string][]metrics.Process{}
	for _, l := range v.Locks {
		require.Len(t, l.Processes, l.Holders, "%s %s", l.Kind, l.Label)
		got[l.Label] = l.Processes
	}
	pid := h.PID()
	require.Equal(t, []metrics.Process{{PID: pid, Alive: true}}, got["queue"])
	require.Equal(t, []metrics.Process{{PID: pid, Alive: true, Mode: "shared"}}, got["table"])
	require.Equal(t, []metrics.Process{{PID: pid, Alive: true, Mode: "exclusive", Owner: "w1"}}, got["job"])

	h.Send(t, "release")
	h.WaitLine(t, "released")
	h.WaitOK(t)
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(releasedText), names...))

	// The hold's real length, as the lock manager summed it.
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	held := m.Stats().HoldTime
	require.Positive(t, held)
	want := fmt.Sprintf(`# HELP shmlock_lockmgr_hold_seconds_total Total length of the released lock-manager holds.
# TYPE shmlock_lockmgr_hold_seconds_total counter
shmlock_lockmgr_hold_seconds_total{segment="test"} %v
`, held.Seconds())
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "shmlock_lockmgr_hold_seconds_total"))
}

// A hold taken after the moment a scrape measures ages to (the scrape's
// clock read before it came to the lock manager's table, or the lock
// manager's clock a little ahead of time.Now) is a hold of age 0, not one
// whose age is unrecorded: the held resource keeps its age series.
func TestHoldAgeOfAHoldNewerThanTheScrape(t *testing.T) {
	t.Parallel()
	path := newSegment(t)
	seg := openRO(t, path)
	h := holding(t, path)

	before := acquired(t, seg, "job").Add(-time.Millisecond)
	v, err := metrics.Read(seg, before)
	require.NoError(t, err)
	var job *metrics.Lock
	for i := range v.Locks {
		if v.Locks[i].Kind == metrics.KindLockMgr && v.Locks[i].Label == "job" {
			job = &v.Locks[i]
		}
	}
	require.NotNil(t, job, "the held resource is listed")
	require.True(t, job.Held)
	require.Equal(t, time.Duration(0), job.HoldAge)

	c := metrics.NewCollector(seg, metrics.SegmentLabel("test"), metrics.Clock(func() time.Time { return before }))
	want := `# HELP shmlock_lock_hold_age_seconds Age of the lock's oldest hold (recorded for lockmgr resources only).
# TYPE shmlock_lock_hold_age_seconds gauge
shmlock_lock_hold_age_seconds{kind="lockmgr",lock="job",segment="test"} 0
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "shmlock_lock_hold_age_seconds"))
	h.Send(t, "release")
	h.WaitLine(t, "released")
	h.WaitOK(t)
}

// Text of the series TestScrape compares; the HELP lines are the
// collector's.
const (
	heldText = `# HELP shmlock_data_regions Data regions claimed.
# TYPE shmlock_data_regions gauge
shmlock_data_regions{segment="test"} 1
# HELP shmlock_data_size_bytes Size of the segment's data area.
# TYPE shmlock_data_size_bytes gauge
shmlock_data_size_bytes{segment="test"} 4096
# HELP shmlock_data_used_bytes Bytes of the data area its regions take.
# TYPE shmlock_data_used_bytes gauge
shmlock_data_used_bytes{segment="test"} 128
# HELP shmlock_lock_dead_holders Holders of the lock whose process is gone (shmctl reclaim frees them).
# TYPE shmlock_lock_dead_holders gauge
shmlock_lock_dead_holders{kind="lockmgr",lock="job",segment="test"} 0
shmlock_lock_dead_holders{kind="spinlock",lock="queue",segment="test"} 0
shmlock_lock_dead_holders{kind="upgrade",lock="table",segment="test"} 0
# HELP shmlock_lock_held Whether the lock is held (1) or free (0).
# TYPE shmlock_lock_held gauge
shmlock_lock_held{kind="lockmgr",lock="job",segment="test"} 1
shmlock_lock_held{kind="spinlock",lock="queue",segment="test"} 1
shmlock_lock_held{kind="upgrade",lock="table",segment="test"} 1
# HELP shmlock_lock_hold_age_seconds Age of the lock's oldest hold (recorded for lockmgr resources only).
# TYPE shmlock_lock_hold_age_seconds gauge
shmlock_lock_hold_age_seconds{kind="lockmgr",lock="job",segment="test"} 1.5
# HELP shmlock_lock_holders Holders of the lock: a spinlock's holder, an upgrade mutex's readers and unique or upgrade holder, a resource's holds.
# TYPE shmlock_lock_holders gauge
shmlock_lock_holders{kind="lockmgr",lock="job",segment="test"} 1
shmlock_lock_holders{kind="spinlock",lock="queue",segment="test"} 1
shmlock_lock_holders{kind="upgrade",lock="table",segment="test"} 1
# HELP shmlock_lock_inconsistent Whether a holder died holding the lock and nobody has marked its data consistent since (1) or not (0).
# TYPE shmlock_lock_inconsistent gauge
shmlock_lock_inconsistent{kind="lockmgr",lock="job",segment="test"} 0
shmlock_lock_inconsistent{kind="spinlock",lock="queue",segment="test"} 0
shmlock_lock_inconsistent{kind="upgrade",lock="table",segment="test"} 0
# HELP shmlock_lock_waiters Waiters asleep on the lock (not recorded for lockmgr resources).
# TYPE shmlock_lock_waiters gauge
shmlock_lock_waiters{kind="spinlock",lock="queue",segment="test"} 0
shmlock_lock_waiters{kind="upgrade",lock="table",segment="test"} 0
# HELP shmlock_lockmgr_active_holds Lock-manager holds now, not expired.
# TYPE shmlock_lockmgr_active_holds gauge
shmlock_lockmgr_active_holds{segment="test"} 1
# HELP shmlock_lockmgr_conflicts_total Lock-manager acquisitions that met a conflict (once each).
# TYPE shmlock_lockmgr_conflicts_total counter
shmlock_lockmgr_conflicts_total{segment="test"} 0
# HELP shmlock_lockmgr_expired_holds Lock-manager holds past their TTL that nobody has ended yet.
# TYPE shmlock_lockmgr_expired_holds gauge
shmlock_lockmgr_expired_holds{segment="test"} 0
# HELP shmlock_lockmgr_expired_total Lock-manager holds ended because their TTL passed.
# TYPE shmlock_lockmgr_expired_total counter
shmlock_lockmgr_expired_total{segment="test"} 0
# HELP shmlock_lockmgr_grants_total Lock-manager holds granted.
# TYPE shmlock_lockmgr_grants_total counter
shmlock_lockmgr_grants_total{segment="test"} 1
# HELP shmlock_lockmgr_reclaimed_total Lock-manager holds ended because their processes died.
# TYPE shmlock_lockmgr_reclaimed_total counter
shmlock_lockmgr_reclaimed_total{segment="test"} 0
# HELP shmlock_lockmgr_releases_total Lock-manager holds ended by their owner's release.
# TYPE shmlock_lockmgr_releases_total counter
shmlock_lockmgr_releases_total{segment="test"} 0
# HELP shmlock_table_capacity Entries the table has: owner slots, upgrade mutexes, resources, transaction records.
# TYPE shmlock_table_capacity gauge
shmlock_table_capacity{kind="lockmgr",segment="test"} 3
shmlock_table_capacity{kind="spinlock",segment="test"} 4
shmlock_table_capacity{kind="upgrade",segment="test"} 2
# HELP shmlock_table_used Entries of the table in use: claimed slots and mutexes, resources, live transactions.
# TYPE shmlock_table_used gauge
shmlock_table_used{kind="lockmgr",segment="test"} 1
shmlock_table_used{kind="spinlock",segment="test"} 1
shmlock_table_used{kind="upgrade",segment="test"} 1
`
)

var releasedText = strings.NewReplacer(
	`shmlock_lock_held{kind="lockmgr",lock="job",segment="test"} 1`, `shmlock_lock_held{kind="lockmgr",lock="job",segment="test"} 0`,
	`shmlock_lock_held{kind="spinlock",lock="queue",segment="test"} 1`, `shmlock_lock_held{kind="spinlock",lock="queue",segment="test"} 0`,
	`shmlock_lock_held{kind="upgrade",lock="table",segment="test"} 1`, `shmlock_lock_held{kind="upgrade",lock="table",segment="test"} 0`,
	`shmlock_lock_holders{kind="lockmgr",lock="job",segment="test"} 1`, `shmlock_lock_holders{kind="lockmgr",lock="job",segment="test"} 0`,
	`shmlock_lock_holders{kind="spinlock",lock="queue",segment="test"} 1`, `shmlock_lock_holders{kind="spinlock",lock="queue",segment="test"} 0`,
	`shmlock_lock_holders{kind="upgrade",lock="table",segment="test"} 1`, `shmlock_lock_holders{kind="upgrade",lock="table",segment="test"} 0`,
	// no hold, no age
	"# HELP shmlock_lock_hold_age_seconds Age of the lock's oldest hold (recorded for lockmgr resources only).\n"+
		"# TYPE shmlock_lock_hold_age_seconds gauge\n"+
		`shmlock_lock_hold_age_seconds{kind="lockmgr",lock="job",segment="test"} 1.5`+"\n", "",
	`shmlock_lockmgr_active_holds{segment="test"} 1`, `shmlock_lockmgr_active_holds{segment="test"} 0`,
	`shmlock_lockmgr_releases_total{segment="test"} 0`, `shmlock_lockmgr_releases_total{segment="test"} 1`,
).Replace(heldText)

// promlint finds nothing wrong with the names, units, types or help of
// any series, on a segment with every kind of lock in use.
func TestLint(t *testing.T) {
	t.Parallel()
	path := newSegment(t)
	h := holding(t, path)
	problems, err := testutil.CollectAndLint(metrics.NewCollector(openRO(t, path)))
	require.NoError(t, err)
	require.Empty(t, problems)
	h.Send(t, "release")
	h.WaitOK(t)
}

// A holder killed with kill -9 is counted as a dead holder until someone
// reclaims its holds.
func TestDeadHolder(t *testing.T) {
	t.Parallel()
	path := newSegment(t)
	h := holding(t, path)
	h.Kill(t)
	h.WaitKilled(t)
	want := `# HELP shmlock_lock_dead_holders Holders of the lock whose process is gone (shmctl reclaim frees them).
# TYPE shmlock_lock_dead_holders gauge
shmlock_lock_dead_holders{kind="lockmgr",lock="job",segment="test"} 1
shmlock_lock_dead_holders{kind="spinlock",lock="queue",segment="test"} 1
shmlock_lock_dead_holders{kind="upgrade",lock="table",segment="test"} 1
`
	c := metrics.NewCollector(openRO(t, path), metrics.SegmentLabel("test"))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "shmlock_lock_dead_holders"))
}

// Collectors of two segments share a registry; the segment label tells
// their series apart. A scrape after a segment is closed fails.
func TestTwoSegments(t *testing.T) {
	t.Parallel()
	a, b := openRO(t, newSegment(t)), openRO(t, newSegment(t))
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector(a)))
	require.NoError(t, reg.Register(metrics.NewCollector(b)))
	require.Error(t, reg.Register(metrics.NewCollector(b)), "the same segment twice")
	n, err := testutil.GatherAndCount(reg, "shmlock_table_capacity")
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.NoError(t, b.Close())
	_, err = reg.Gather()
	require.ErrorIs(t, err, shm.ErrClosed)
	require.ErrorContains(t, err, "segment "+b.Path()+": ", "which of the two")
}

// The contention counters of format version 4, as counters and a
// histogram of the wait times, with the values written into the segment.
func TestContention(t *testing.T) {
	t.Parallel()
	path := newSegment(t)
	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer seg.Close()
	st := seg.LockStats(layout.KindOwnerSlots, 0) // "queue", the first slot claimed
	require.NotNil(t, st)
	st.RecordWait(5*time.Microsecond, false)
	st.RecordWait(2*time.Millisecond, false)
	st.RecordWait(time.Second, true)
	st.AddSleep()
	st.AddSleep()
	st.AddWakeup()
	st.AddReclaim()
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	ri, err := m.Inspect("job")
	require.NoError(t, err)
	require.Positive(t, ri.Entry)
	seg.LockStats(layout.KindLockMgr, ri.Entry).RecordWait(50*time.Millisecond, false)

	want := `# HELP shmlock_lock_contended_total Acquisitions of the lock that did not get it at the first try.
# TYPE shmlock_lock_contended_total counter
shmlock_lock_contended_total{kind="lockmgr",lock="job",segment="test"} 1
shmlock_lock_contended_total{kind="spinlock",lock="queue",segment="test"} 3
shmlock_lock_contended_total{kind="upgrade",lock="table",segment="test"} 0
# HELP shmlock_lock_reclaims_total Holds of the lock taken from, or ended for, dead processes.
# TYPE shmlock_lock_reclaims_total counter
shmlock_lock_reclaims_total{kind="lockmgr",lock="job",segment="test"} 0
shmlock_lock_reclaims_total{kind="spinlock",lock="queue",segment="test"} 1
shmlock_lock_reclaims_total{kind="upgrade",lock="table",segment="test"} 0
# HELP shmlock_lock_sleeps_total Futex sleeps of the lock's waiters.
# TYPE shmlock_lock_sleeps_total counter
shmlock_lock_sleeps_total{kind="lockmgr",lock="job",segment="test"} 0
shmlock_lock_sleeps_total{kind="spinlock",lock="queue",segment="test"} 2
shmlock_lock_sleeps_total{kind="upgrade",lock="table",segment="test"} 0
# HELP shmlock_lock_timeouts_total Waits for the lock that gave up (timeout, cancellation, close).
# TYPE shmlock_lock_timeouts_total counter
shmlock_lock_timeouts_total{kind="lockmgr",lock="job",segment="test"} 0
shmlock_lock_timeouts_total{kind="spinlock",lock="queue",segment="test"} 1
shmlock_lock_timeouts_total{kind="upgrade",lock="table",segment="test"} 0
# HELP shmlock_lock_wait_seconds Waits for the lock that did not get it at the first try, to the grant or the give-up; a wait granted while spinning counts in the first bucket with no time in the sum.
# TYPE shmlock_lock_wait_seconds histogram
shmlock_lock_wait_seconds_bucket{kind="lockmgr",lock="job",segment="test",le="1e-05"} 0
shmlock_lock_wait_seconds_bucket{kind="lockmgr",lock="job",segment="test",le="0.0001"} 0
shmlock_lock_wait_seconds_bucket{kind="lockmgr",lock="job",segment="test",le="0.001"} 0
shmlock_lock_wait_seconds_bucket{kind="lockmgr",lock="job",segment="test",le="0.01"} 0
shmlock_lock_wait_seconds_bucket{kind="lockmgr",lock="job",segment="test",le="0.1"} 1
shmlock_lock_wait_seconds_bucket{kind="lockmgr",lock="job",segment="test",le="+Inf"} 1
shmlock_lock_wait_seconds_sum{kind="lockmgr",lock="job",segment="test"} 0.05
shmlock_lock_wait_seconds_count{kind="lockmgr",lock="job",segment="test"} 1
shmlock_lock_wait_seconds_bucket{kind="spinlock",lock="queue",segment="test",le="1e-05"} 1
shmlock_lock_wait_seconds_bucket{kind="spinlock",lock="queue",segment="test",le="0.0001"} 1
shmlock_lock_wait_seconds_bucket{kind="spinlock",lock="queue",segment="test",le="0.001"} 1
shmlock_lock_wait_seconds_bucket{kind="spinlock",lock="queue",segment="test",le="0.01"} 2
shmlock_lock_wait_seconds_bucket{kind="spinlock",lock="queue",segment="test",le="0.1"} 2
shmlock_lock_wait_seconds_bucket{kind="spinlock",lock="queue",segment="test",le="+Inf"} 3
shmlock_lock_wait_seconds_sum{kind="spinlock",lock="queue",segment="test"} 1.002005
shmlock_lock_wait_seconds_count{kind="spinlock",lock="queue",segment="test"} 3
shmlock_lock_wait_seconds_bucket{kind="upgrade",lock="table",segment="test",le="1e-05"} 0
shmlock_lock_wait_seconds_bucket{kind="upgrade",lock="table",segment="test",le="0.0001"} 0
shmlock_lock_wait_seconds_bucket{kind="upgrade",lock="table",segment="test",le="0.001"} 0
shmlock_lock_wait_seconds_bucket{kind="upgrade",lock="table",segment="test",le="0.01"} 0
shmlock_lock_wait_seconds_bucket{kind="upgrade",lock="table",segment="test",le="0.1"} 0
shmlock_lock_wait_seconds_bucket{kind="upgrade",lock="table",segment="test",le="+Inf"} 0
shmlock_lock_wait_seconds_sum{kind="upgrade",lock="table",segment="test"} 0
shmlock_lock_wait_seconds_count{kind="upgrade",lock="table",segment="test"} 0
# HELP shmlock_lock_wakeups_total Wakes by a release of the lock that woke a sleeper.
# TYPE shmlock_lock_wakeups_total counter
shmlock_lock_wakeups_total{kind="lockmgr",lock="job",segment="test"} 0
shmlock_lock_wakeups_total{kind="spinlock",lock="queue",segment="test"} 1
shmlock_lock_wakeups_total{kind="upgrade",lock="table",segment="test"} 0
`
	c := metrics.NewCollector(openRO(t, path), metrics.SegmentLabel("test"))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "shmlock_lock_contended_total",
		"shmlock_lock_sleeps_total", "shmlock_lock_wakeups_total", "shmlock_lock_reclaims_total",
		"shmlock_lock_timeouts_total", "shmlock_lock_wait_seconds"))
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// Names come from shared memory: a damaged byte in one (here in a claimed
// slot's name and a resource's) must not kill the exporter. A Prometheus
// label that is not valid UTF-8 made client_golang's Must constructors
// panic on the registry's goroutine; now the invalid bytes read as U+FFFD,
// and the segment label (a caller's string) likewise.
func TestDamagedNames(t *testing.T) {
	t.Parallel()
	path := newSegment(t)
	raw, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	for kind, name := range map[layout.Kind]string{layout.KindSlotDirectory: "queue", layout.KindLockMgr: "job"} {
		mem, err := raw.Region(kind)
		require.NoError(t, err)
		i := bytes.Index(mem, []byte(name))
		require.GreaterOrEqual(t, i, 0, "%q in the %v table", name, kind)
		mem[i] = 0xff
	}
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector(openRO(t, path), metrics.SegmentLabel("seg\xff"))))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				require.True(t, utf8.ValidString(lp.GetValue()), "%s %s=%q", mf.GetName(), lp.GetName(), lp.GetValue())
				seen[lp.GetName()+"="+lp.GetValue()] = true
			}
		}
	}
	require.True(t, seen["lock=\uFFFDueue"], "the slot, under its damaged name")
	require.True(t, seen["lock=\uFFFDob"], "the resource, under its damaged name")
	require.True(t, seen["segment=seg\uFFFD"])
}

// A nil segment (an Open that failed, unchecked) is an error, not a panic:
// Read says so, and a collector of it fails every scrape.
func TestNilSegment(t *testing.T) {
	t.Parallel()
	_, err := metrics.Read(nil, time.Now())
	require.ErrorIs(t, err, shm.ErrNoSegment)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector(nil)))
	_, err = reg.Gather()
	require.ErrorContains(t, err, shm.ErrNoSegment.Error())
}

// Clock(nil) keeps the default clock, time.Now, as dashboard.Options.Now
// nil does, and a nil Option changes nothing: a scrape with the first
// panicked on the nil func (on the registry's goroutine, which killed the
// process), and NewCollector panicked on the second.
func TestNilOptions(t *testing.T) {
	t.Parallel()
	seg := openRO(t, newSegment(t))
	for _, opt := range []metrics.Option{metrics.Clock(nil), nil} {
		reg := prometheus.NewRegistry()
		require.NotPanics(t, func() {
			require.NoError(t, reg.Register(metrics.NewCollector(seg, opt)))
			n, err := testutil.GatherAndCount(reg, "shmlock_segment_up")
			require.NoError(t, err)
			require.Equal(t, 1, n)
		})
	}
}

// A following collector of a nil Follower is as a collector of a nil
// segment: every scrape reports shm.ErrNoSegment (it panicked on the
// Follower's Path).
func TestNilFollower(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	require.NotPanics(t, func() { require.NoError(t, reg.Register(metrics.NewFollowingCollector(nil))) })
	_, err := reg.Gather()
	require.ErrorContains(t, err, shm.ErrNoSegment.Error())
}

// Two entries of a damaged directory under the same name are two series
// all the same: the second gets "#" and its index. A scrape with two
// series of the same labels fails whole (FuzzRead found it).
func TestDuplicateNames(t *testing.T) {
	t.Parallel()
	path := newSegment(t)
	raw, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	l, err := spinlock.Named(raw, "quell", spinlock.PIDTID)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	dir, err := raw.Region(layout.KindSlotDirectory)
	require.NoError(t, err)
	i := bytes.Index(dir, []byte("quell"))
	require.GreaterOrEqual(t, i, 0)
	copy(dir[i:], "queue") // now two slots say "queue"
	v, err := metrics.Read(openRO(t, path), time.Now())
	require.NoError(t, err)
	var labels []string
	for _, lk := range v.Locks {
		if lk.Kind == metrics.KindSpinlock {
			labels = append(labels, lk.Label)
		}
	}
	require.ElementsMatch(t, []string{"queue", fmt.Sprintf("queue#%d", l.Index())}, labels)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector(openRO(t, path))))
	_, err = reg.Gather()
	require.NoError(t, err)
}

// A segment file cut short under the mapping (only a writer of the file
// can) makes the next read of the lost pages a SIGBUS: Read, which runs on
// a monitor's own goroutines, reports shm.ErrFault instead of dying, and so
// does a scrape (shmctl serve died of it).
func TestTruncatedUnderTheMapping(t *testing.T) {
	t.Parallel()
	// A segment with a claimed name and no handle left on it: the cleanups
	// of newSegment's handles would read the lost pages themselves.
	path := testproc.SegmentPath(t)
	w, err := shm.Create(path, shm.Options{Options: sizes})
	require.NoError(t, err)
	_, err = w.Claim(layout.KindOwnerSlots, "queue")
	require.NoError(t, err)
	require.NoError(t, w.Close())
	seg := openRO(t, path)
	v, err := metrics.Read(seg, time.Now())
	require.NoError(t, err)
	require.NotEmpty(t, v.Locks)
	require.NoError(t, os.Truncate(path, 0))
	_, err = metrics.Read(seg, time.Now())
	require.ErrorIs(t, err, shm.ErrFault)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector(seg)))
	_, err = reg.Gather()
	require.ErrorContains(t, err, shm.ErrFault.Error())
}

// shmlock_segment_up is 1 while the segment can be read and 0 once it
// cannot (here cut short under the mapping, then closed), beside the
// scrape's error: the other series are gone then, and an alert needs a
// series to fire on. Before, there was no such series.
func TestSegmentUp(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	w, err := shm.Create(path, shm.Options{Options: sizes})
	require.NoError(t, err)
	require.NoError(t, w.Close()) // no handle that would read the lost pages
	seg := openRO(t, path)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector(seg, metrics.SegmentLabel("s"))))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shmlock_segment_up Whether the segment could be read at this scrape (1) or not (0: removed, damaged, closed; its other series are absent).
# TYPE shmlock_segment_up gauge
shmlock_segment_up{segment="s"} 1
`), "shmlock_segment_up"))
	require.NoError(t, os.Truncate(path, 0))
	requireDown(t, reg, "damaged", shm.ErrFault)
	require.NoError(t, seg.Close())
	requireDown(t, reg, "closed", shm.ErrClosed)
}

// requireDown: a scrape of reg fails with cause and has one series,
// shmlock_segment_up 0.
func requireDown(t *testing.T, reg *prometheus.Registry, why string, cause error) {
	t.Helper()
	mfs, err := reg.Gather()
	require.ErrorIs(t, err, cause, "%s: the scrape still fails", why)
	var got []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got = append(got, fmt.Sprintf("%s %v %g", mf.GetName(), mf.GetType(), m.GetGauge().GetValue()))
		}
	}
	require.Equal(t, []string{"shmlock_segment_up GAUGE 0"}, got, why)
}

// A following collector reads the file its path names at each scrape: up
// 0 while there is none, the new file's locks once it is made again.
// After the follower's Close, ErrClosed.
func TestFollowingCollector(t *testing.T) {
	t.Parallel()
	path := newSegment(t)
	f, err := metrics.Follow(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewFollowingCollector(f, metrics.SegmentLabel("s"))))
	up := func() {
		t.Helper()
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shmlock_segment_up Whether the segment could be read at this scrape (1) or not (0: removed, damaged, closed; its other series are absent).
# TYPE shmlock_segment_up gauge
shmlock_segment_up{segment="s"} 1
`), "shmlock_segment_up"))
	}
	up()
	require.NoError(t, shm.Remove(path))
	requireDown(t, reg, "removed", fs.ErrNotExist)
	w, err := shm.Create(path, shm.Options{Options: sizes})
	require.NoError(t, err)
	defer w.Close()
	up()
	n, err := testutil.GatherAndCount(reg, "shmlock_lock_held")
	require.NoError(t, err)
	require.Zero(t, n, "the new segment has no locks; the old one had two")
	require.NoError(t, f.Close())
	_, err = f.Segment()
	require.ErrorIs(t, err, shm.ErrClosed)
	requireDown(t, reg, "closed", shm.ErrClosed)
}

// A scrape (or a dashboard's snapshot) that has the followed segment in
// hand when another finds it replaced and moves to the new one shows the
// segment it has, up 1: the segment it reads stays open until it has read
// it. Before, the other closed it under the first, whose read then failed
// with shm.ErrClosed: shmlock_segment_up 0 (or the error on the page) for
// a segment that was fine.
func TestFollowingRacingTheReplacement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// reader returns a read of f: the locks it shows, or its error.
		reader func(t *testing.T, f *metrics.Follower) func() (int, error)
	}{
		{"collector", func(t *testing.T, f *metrics.Follower) func() (int, error) {
			reg := prometheus.NewRegistry()
			require.NoError(t, reg.Register(metrics.NewFollowingCollector(f)))
			return func() (int, error) { return testutil.GatherAndCount(reg, "shmlock_lock_held") }
		}},
		{"dashboard", func(t *testing.T, f *metrics.Follower) func() (int, error) {
			h := dashboard.NewFollowing([]*metrics.Follower{f}, dashboard.Options{})
			return func() (int, error) {
				s := h.Snapshot().Segments[0]
				if s.Error != "" {
					return 0, errors.New(s.Error)
				}
				return len(s.Locks), nil
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := newSegment(t)
			f, err := metrics.Follow(path, shm.Options{ReadOnly: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = f.Close() })
			inHand, resume := make(chan struct{}), make(chan struct{})
			first := true
			f.SetTestHookRead(func() {
				if !first { // the second read
					return
				}
				first = false
				close(inHand)
				<-resume
			})
			read := tc.reader(t, f)
			type result struct {
				locks int
				err   error
			}
			done := make(chan result, 1)
			go func() {
				n, err := read()
				done <- result{n, err}
			}()
			testproc.Receive(t, inHand, "the first read to have the segment")
			require.NoError(t, shm.Remove(path))
			w, err := shm.Create(path, shm.Options{Options: sizes})
			require.NoError(t, err)
			defer w.Close()
			n, err := read()
			require.NoError(t, err, "the second read reads the new segment")
			require.Zero(t, n, "the new segment has no locks")
			close(resume)
			got := testproc.Receive(t, done, "the first read")
			require.NoError(t, got.err, "the first read reads the segment it had")
			require.Equal(t, 3, got.locks, "the old segment's locks: queue, table and job")
		})
	}
}

// A Follower's Close while a read through Use is under way leaves that
// read its segment, which the read's end then closes; Use and Segment
// fail with shm.ErrClosed from the Close on, and a second Close too.
func TestFollowerCloseUnderARead(t *testing.T) {
	t.Parallel()
	path := newSegment(t)
	f, err := metrics.Follow(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	inHand, resume := make(chan struct{}), make(chan struct{})
	f.SetTestHookRead(func() {
		close(inHand)
		<-resume
	})
	type result struct {
		seg  *shm.Segment
		view *metrics.View
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = f.Use(func(seg *shm.Segment) (err error) {
			r.seg = seg
			r.view, err = metrics.Read(seg, time.Now())
			return err
		})
		done <- r
	}()
	testproc.Receive(t, inHand, "the read to have the segment")
	require.NoError(t, f.Close())
	_, err = f.Segment()
	require.ErrorIs(t, err, shm.ErrClosed)
	require.ErrorIs(t, f.Use(func(*shm.Segment) error { return nil }), shm.ErrClosed)
	close(resume)
	r := testproc.Receive(t, done, "the read")
	require.NoError(t, r.err, "the read under way reads its segment")
	require.Len(t, r.view.Locks, 3)
	require.True(t, r.seg.Closed(), "the read's end closed the segment")
	require.ErrorIs(t, f.Close(), shm.ErrClosed)
}
