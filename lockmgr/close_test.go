package lockmgr_test

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// heldByObserver makes a table with one resource, "r", that "holder"
// holds exclusively through observer, the test's view of the table that
// stays open; before is its state then, e its entry, path the segment.
func heldByObserver(t *testing.T) (observer *lockmgr.Manager, e *layout.LockMgrEntry, before lockmgr.ResourceInfo, path string) {
	t.Helper()
	observer, seg, path := newManagerAt(t, 2, lockmgr.Options{})
	_, err := observer.Acquire(t.Context(), "r", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	before, err = observer.Inspect("r")
	require.NoError(t, err)
	return observer, onlyEntry(t, seg), before, path
}

// openAgain opens the segment at path again, with a Manager on it: a second
// view of the same table, whose Close the test controls.
func openAgain(t *testing.T, path string, opts lockmgr.Options) (*lockmgr.Manager, *shm.Segment) {
	t.Helper()
	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	m, err := lockmgr.Open(seg, opts)
	require.NoError(t, err)
	return m, seg
}

// Once its segment is closed a Manager fails every operation on the table
// but Release and MarkConsistent with ErrClosed (the readers without an
// error report an empty table) and changes nothing in the file: the table,
// as another mapping of the same file shows it, is exactly as it was at
// Close, the holds taken before included (Close releases nothing). Release
// and MarkConsistent, a holder's as it unwinds, still work, in the file.
func TestUseAfterClose(t *testing.T) {
	t.Parallel()
	observer, _, path := newManagerAt(t, 16, lockmgr.Options{})
	var log testproc.Output // read while the Manager may write to it
	m, seg := openAgain(t, path, lockmgr.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	ctx := context.Background()
	held, err := m.Acquire(ctx, "held", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Hour})
	require.NoError(t, err)
	_, err = m.Acquire(ctx, "shared", "a", lockmgr.Collaborative, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.NoError(t, m.Declare("declared"))
	list, stats := observer.List(), observer.Stats()
	require.NoError(t, seg.Close())

	wait := lockmgr.AcquireOptions{Retries: lockmgr.RetryForever, Wait: time.Hour}
	ops := []struct {
		name string
		op   func() error
	}{
		{"Acquire new", func() error {
			_, err := m.Acquire(ctx, "new", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
			return err
		}},
		{"Acquire held by self", func() error {
			_, err := m.Acquire(ctx, "held", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
			return err
		}},
		{"Acquire held, waiting", func() error { _, err := m.Acquire(ctx, "held", "b", lockmgr.Exclusive, wait); return err }},
		{"Acquire collaborative", func() error { _, err := m.Acquire(ctx, "shared", "b", lockmgr.Collaborative, wait); return err }},
		{"Refresh", func() error { _, err := m.Refresh("held", "a", time.Minute); return err }},
		{"SetCompanion", func() error { return m.SetCompanion("held", "a", os.Getpid()) }},
		{"Inspect", func() error { _, err := m.Inspect("held"); return err }},
		{"CheckVersion", func() error { return m.CheckVersion("held", held.Version) }},
		{"Declare", func() error { return m.Declare("other") }},
		{"Undeclare", func() error { return m.Undeclare("declared") }},
		{"SetDeclaredOnly", func() error { return m.SetDeclaredOnly(true) }},
		{"Overview", func() error { _, err := m.Overview(); return err }},
		{"ForceRelease", func() error { _, err := m.ForceRelease("held"); return err }},
		{"Reclaim", func() error { _, err := m.Reclaim(false); return err }},
		{"Reclaim dry run", func() error { _, err := m.Reclaim(true); return err }},
		{"Check", func() error { _, err := m.Check(); return err }},
		{"Open", func() error { _, err := lockmgr.Open(seg, lockmgr.Options{}); return err }},
	}
	for _, o := range ops {
		requireClosed(t, o.op(), o.name)
	}
	info, err := m.Acquire(ctx, "new", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	requireClosed(t, err, "Acquire")
	require.Equal(t, lockmgr.Failed, info.State)
	require.Zero(t, info.Version)
	require.Nil(t, m.List())
	require.Equal(t, lockmgr.Stats{}, m.Stats())
	require.False(t, m.DeclaredOnly())
	require.Empty(t, log.String(), "nothing is logged for a closed segment's failures")

	require.Equal(t, list, observer.List(), "the table is as it was at Close")
	require.Equal(t, stats, observer.Stats())
	require.False(t, observer.DeclaredOnly())

	require.NoError(t, m.MarkConsistent("held", "a"), "the holder's MarkConsistent after Close")
	require.ErrorIs(t, m.MarkConsistent("held", "b"), lockmgr.ErrLockNotHeld, "another's")
	require.NoError(t, m.Release("held", "a"), "a release after Close")
	require.NoError(t, m.Release("shared", "a"))
	require.NoError(t, m.Release("unknown", "a"), "a release of nothing logs a warning, as on an open segment")
	for _, r := range observer.List() {
		require.Empty(t, r.Holders, "%s: the releases reached the file", r.Resource)
	}
}

// requireClosed checks that err is the failure of a Manager whose segment
// was closed: lockmgr.ErrClosed with its code, for callers that switch on
// codes, and shm.ErrClosed, for those that tested for it before.
func requireClosed(t *testing.T, err error, op string) {
	t.Helper()
	require.ErrorIs(t, err, lockmgr.ErrClosed, op)
	require.ErrorIs(t, err, shm.ErrClosed, op)
	require.Equal(t, "CLOSED", lockmgr.Code(err), "%s: %v", op, err)
}

// Bad input is reported as such on a closed segment too, before the check
// of the segment.
func TestBadInputAfterClose(t *testing.T) {
	t.Parallel()
	_, _, path := newManagerAt(t, 4, lockmgr.Options{})
	m, seg := openAgain(t, path, lockmgr.Options{})
	require.NoError(t, seg.Close())
	_, err := m.Acquire(context.Background(), "", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrBadResource)
	require.ErrorIs(t, m.Release("r", ""), lockmgr.ErrBadOwner)
	_, err = m.Inspect("")
	require.ErrorIs(t, err, lockmgr.ErrBadResource)
	require.ErrorIs(t, m.Declare("ok", ""), lockmgr.ErrBadResource)
	_, err = m.Acquire(context.Background(), "r", "a", lockmgr.Mode(9), lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrBadMode)
	_, err = m.Acquire(context.Background(), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: -1})
	require.ErrorIs(t, err, lockmgr.ErrBadOptions)
	_, err = m.Refresh("r", "a", -1)
	require.ErrorIs(t, err, lockmgr.ErrBadOptions)
	require.ErrorIs(t, m.SetCompanion("r", "a", -1), lockmgr.ErrBadOptions)
}

// An acquisition asleep between attempts when its segment closes returns
// shm.ErrClosed at its next wake (within a sleep slice). The table is as
// it was, the sleeper's registration gone.
func TestCloseEndsAWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ctx  func(t *testing.T) context.Context
	}{
		{"background", func(*testing.T) context.Context { return context.Background() }},
		{"cancellable", func(t *testing.T) context.Context { return t.Context() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			observer, e, before, path := heldByObserver(t)

			m, seg := openAgain(t, path, lockmgr.Options{})
			done := acquireAsleep(t, tc.ctx(t), m, "waiter", lockmgr.Exclusive, func() bool {
				return e.Sleepers.Load()&lockmgr.SleepCount == 1
			})
			require.NoError(t, seg.Close())
			requireClosed(t, testproc.Receive(t, done, "the waiter to return after Close"), "the waiter")
			after, err := observer.Inspect("r")
			require.NoError(t, err)
			require.Equal(t, before, after, "the holder still holds, alone")
			require.Zero(t, e.Sleepers.Load()&lockmgr.SleepCount, "the registration is gone")

			require.NoError(t, observer.Release("r", "holder"))
			_, err = observer.Acquire(t.Context(), "r", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{})
			require.NoError(t, err, "the resource is free in the file")
		})
	}
}

// On a Clock other than SystemClock an acquisition waits with Clock.Sleep;
// a Close during that wait ends it at the next attempt.
func TestCloseDuringClockSleep(t *testing.T) {
	t.Parallel()
	observer, _, path := newManagerAt(t, 4, lockmgr.Options{})
	_, err := observer.Acquire(t.Context(), "r", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	clk := newFakeClock()
	m, seg := openAgain(t, path, lockmgr.Options{Clock: clk})
	clk.onSleep = func() { _ = seg.Close() }
	info, err := m.Acquire(t.Context(), "r", "waiter", lockmgr.Exclusive, lockmgr.AcquireOptions{Retries: 3})
	requireClosed(t, err, "Acquire")
	require.Equal(t, lockmgr.Failed, info.State)
	require.Equal(t, 1, info.Attempts, "one attempt, one sleep, and Close")
	require.Len(t, clk.Sleeps(), 1)
	ri, err := observer.Inspect("r")
	require.NoError(t, err)
	require.Len(t, ri.Holders, 1)
	require.Equal(t, "holder", ri.Holders[0].Owner)
}

// A goroutine waiting for an entry lock, held by a live process that does
// not let go (stopped, say), gives up when the segment closes: it fails
// with shm.ErrClosed and changes nothing.
func TestCloseEndsAnEntryLockWait(t *testing.T) {
	t.Parallel()
	parent, err := proc.Lookup(uint32(os.Getppid()))
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		op   func(m *lockmgr.Manager) error
	}{
		{"Acquire", func(m *lockmgr.Manager) error {
			_, err := m.Acquire(context.Background(), "r", "other", lockmgr.Exclusive, lockmgr.AcquireOptions{})
			return err
		}},
		{"Release", func(m *lockmgr.Manager) error { return m.Release("r", "holder") }},
		{"Refresh", func(m *lockmgr.Manager) error { _, err := m.Refresh("r", "holder", time.Minute); return err }},
		{"SetCompanion", func(m *lockmgr.Manager) error { return m.SetCompanion("r", "holder", os.Getpid()) }},
		{"Undeclare", func(m *lockmgr.Manager) error { return m.Undeclare("r") }},
	} {
		// One at a time: the wait is recognised by the test that started
		// the goroutine, not by the subtest.
		t.Run(tc.name, func(t *testing.T) {
			observer, e, before, path := heldByObserver(t)
			e.Lock.Store(parent.Pack()) // a live process holds the entry and does not let go

			m, seg := openAgain(t, path, lockmgr.Options{})
			done := make(chan error, 1)
			go func() { done <- tc.op(m) }()
			waitFor(t, func() bool { return inLockEntrySlow() }, "the operation to wait for the entry lock")
			require.NoError(t, seg.Close())
			requireClosed(t, testproc.Receive(t, done, "the operation to return after Close"), tc.name)
			require.Equal(t, parent.Pack(), e.Lock.Load())
			e.Lock.Store(0)
			after, err := observer.Inspect("r")
			require.NoError(t, err)
			require.Equal(t, before, after, "the table is as it was")
		})
	}
}

// inLockEntrySlow reports whether a goroutine started by
// TestCloseEndsAnEntryLockWait waits in lockEntrySlow: one of another
// test, there for a moment, would let the Close come before the wait it
// is meant to end.
func inLockEntrySlow() bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "lockmgr.(*table).lockEntrySlow") && strings.Contains(g, "TestCloseEndsAnEntryLockWait") {
			return true
		}
	}
	return false
}

// A nil segment (an Open that failed, unchecked) is an error, not a panic.
func TestNilSegment(t *testing.T) {
	t.Parallel()
	_, err := lockmgr.Open(nil, lockmgr.Options{})
	require.ErrorIs(t, err, shm.ErrNoSegment)
}
