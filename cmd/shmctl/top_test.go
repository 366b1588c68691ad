package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

func TestTopFlags(t *testing.T) {
	t.Parallel()
	opts, _ := parsedOptions(t, newCmdTop, []string{"seg"})
	require.Equal(t, "seg", opts.Segment)
	require.Equal(t, time.Second, opts.Interval)
	require.False(t, opts.Once)
	opts, _ = parsedOptions(t, newCmdTop, []string{"seg", "--interval", "200ms", "--once"})
	require.Equal(t, 200*time.Millisecond, opts.Interval)
	require.True(t, opts.Once)
	requireOneLineError(t, shmctl(t, false, "top", "seg", "--interval", "10ms"), exitUsage)
	requireOneLineError(t, shmctl(t, false, "top"), exitUsage)
}

// One frame of a known segment: a spinlock held with a waiter asleep,
// one held without, one claimed and free, an upgrade mutex with a shared
// hold, a resource held for 2.5 seconds with two waits recorded; the
// busiest first.
func TestTopOnce(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 4, Upgrades: 2, UpgradeReaders: 2, TxnRecords: -1, LockMgrEntries: 4, DataBytes: 4096})
	free, err := spinlock.Named(seg, "idle", spinlock.PIDTID)
	require.NoError(t, err)
	defer free.Close()
	first, err := spinlock.Named(seg, "first", spinlock.PIDTID)
	require.NoError(t, err)
	defer first.Close()
	g1, err := first.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	defer g1.Release()
	l, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	defer l.Close()
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	// A second holder of this process waits for queue, asleep, until the
	// test's release.
	waited := make(chan error, 1)
	go func() {
		g2, err := l.Lock(spinlock.NewHolder())
		if err == nil {
			err = g2.Release()
		}
		waited <- err
	}()
	defer func() {
		require.NoError(t, g.Release())
		require.NoError(t, <-waited)
	}()
	testproc.WaitFor(t, func() bool { return l.Slot().Sleepers() == 1 }, "a sleeper on queue")
	u, err := upgrade.Named(seg, "table")
	require.NoError(t, err)
	defer u.Close()
	require.NoError(t, u.LockShared())
	defer u.UnlockShared()
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	info, err := m.Acquire(context.Background(), "job", "w1", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	_, err = seg.Data("q", 100)
	require.NoError(t, err)
	ri, err := m.Inspect("job")
	require.NoError(t, err)
	require.Equal(t, info.Version, ri.Version)
	now := ri.Holders[0].AcquiredAt.Add(2500 * time.Millisecond)
	// Two waits recorded for job put it before the uncontended locks.
	st := seg.LockStats(layout.KindLockMgr, ri.Entry)
	st.RecordWait(10*time.Millisecond, false)
	st.RecordWait(20*time.Millisecond, false)

	opts, _ := parsedOptions(t, newCmdTop, []string{seg.Path(), "--once"})
	buf := new(strings.Builder)
	opts.IO.Out = buf
	opts.now = func() time.Time { return now }
	require.NoError(t, runTop(opts))
	want := seg.Path() + "  " + now.UTC().Format(time.RFC3339Nano) + `
tables: spinlock 3/4 upgrade 1/2 lockmgr 1/3  data 128/4096 bytes in 1 region
lockmgr: grants 1  releases 0  conflicts 0  expired 0  reclaimed 0  active 1

KIND	LOCK	HELD	HOLDERS	DEAD	WAITERS	CONTENDED	WAIT_SECONDS	AGE_SECONDS	INCONSISTENT
spinlock	queue	yes	1	0	1	0	0.000	-	no
lockmgr	job	yes	1	0	-	2	0.030	2.500	no
spinlock	first	yes	1	0	0	0	0.000	-	no
upgrade	table	yes	1	0	0	0	0.000	-	no
spinlock	idle	no	0	0	0	0	0.000	-	no
`
	require.Equal(t, want, buf.String())
}

// Without --once, on a terminal, each frame is drawn from the top left
// corner and clears what the last one left below it.
func TestTopRedraw(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 2, Upgrades: -1, TxnRecords: -1, LockMgrEntries: -1})
	r := shmctl(t, true, "top", seg.Path(), "--interval", "100ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, watchRounds, strings.Count(r.stdout, "\x1b[H"), "%q", r.stdout)
	require.Equal(t, watchRounds, strings.Count(r.stdout, "\x1b[J"), "%q", r.stdout)
	require.Contains(t, r.stdout, "tables: spinlock 0/2  data")
}

// A segment made without a data area (create --data -1) says so on the
// tables line: "data 0/0 bytes in 0 regions" read as a full area of no
// size.
func TestTopWithoutDataArea(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 2, Upgrades: -1, TxnRecords: -1, LockMgrEntries: -1, DataBytes: -1})
	r := shmctl(t, false, "top", seg.Path(), "--once")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "\ntables: spinlock 0/2  no data area\n")
}
