package upgrade_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// holding starts a child that takes a hold in mode and waits until it has.
func holding(tb testing.TB, path, mode string) (*testproc.Child, uint64) {
	tb.Helper()
	c := testproc.Start(tb, "hold", path, mode)
	c.WaitLine(tb, "held")
	return c, c.Identity(tb)
}

// pendingUpgrade starts a child that takes the upgrade lock and asks to
// upgrade it, and waits until the upgrade is pending (the caller's shared
// hold keeps it so).
func pendingUpgrade(tb testing.TB, seg *shm.Segment, path string) *testproc.Child {
	tb.Helper()
	c := testproc.Start(tb, "hold", path, "pending")
	c.WaitLine(tb, "upgrade held")
	waitStatus(tb, seg, func(st upgrade.Status) bool { return st.UpgradePending }, "pending")
	return c
}

// killWhileWaiting calls lock in a goroutine, waits until mutex 0's status
// shows it waiting, kills the holder c and requires that lock then
// succeeds: a dead holder never wedges a waiter.
func killWhileWaiting(tb testing.TB, seg *shm.Segment, c *testproc.Child, lock func() error, waiting func(upgrade.Status) bool, what string) {
	tb.Helper()
	got := make(chan error, 1)
	go func() { got <- lock() }()
	waitStatus(tb, seg, waiting, what)
	c.Kill(tb)
	require.NoError(tb, testproc.Receive(tb, got, "the lock after the holder died"))
}

// noTraceOf checks that mutex 0 records nothing of the dead process.
func noTraceOf(tb testing.TB, seg *shm.Segment, dead uint64) {
	tb.Helper()
	st := status(tb, seg)
	require.NotEqual(tb, dead, st.Writer)
	require.NotEqual(tb, dead, st.Upgrader)
	for _, r := range st.Readers {
		if r.Owner == dead {
			require.Zero(tb, r.Count, "the dead reader's record still counts")
		}
	}
}

// A reader killed while it holds the lock: a writer waiting for it gets
// in, and the dead process's share is gone.
func TestKillReader(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	c, id := holding(t, path, "shared")
	w := open(t, seg)
	killWhileWaiting(t, seg, c, w.Lock, func(st upgrade.Status) bool { return st.WriteLocked }, "the writer to drain")
	require.False(t, w.Reclaimed(), "a dead reader leaves no half-done write")
	require.Equal(t, uint64(1), w.Repairs())
	noTraceOf(t, seg, id)
	require.NoError(t, w.Unlock())
	// Its record is free again.
	st := status(t, seg)
	require.Empty(t, st.Readers)
}

// A reader killed with nobody waiting: a later upgrade still completes.
func TestKillReaderThenUpgrade(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	c, id := holding(t, path, "shared")
	c.Kill(t)
	u := open(t, seg)
	require.NoError(t, u.LockUpgrade())
	require.NoError(t, u.UpgradeToUnique())
	require.NoError(t, u.UniqueToShared())
	require.NoError(t, u.UnlockShared())
	noTraceOf(t, seg, id)
}

// The upgrade holder killed: the next upgrade seeker takes its lock over
// and learns of it; a writer waiting meanwhile gets in after it.
func TestKillUpgrader(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	c, id := holding(t, path, "upgrade")
	r := open(t, seg)
	require.NoError(t, r.LockShared(), "readers share with the upgrade holder")
	require.NoError(t, r.UnlockShared())
	u := open(t, seg)
	killWhileWaiting(t, seg, c, u.LockUpgrade, func(st upgrade.Status) bool { return st.SharedWaiters > 0 }, "the seeker to sleep")
	require.True(t, u.Reclaimed())
	noTraceOf(t, seg, id)
	require.NoError(t, u.UpgradeToUnique())
	require.NoError(t, u.UniqueToUpgrade())
	require.NoError(t, u.UnlockUpgrade())
	require.False(t, u.Reclaimed())
}

// A writer killed half-way through a write, holding the unique lock in
// either form (the fast path's writerUnique, or stateWrite): a waiting
// writer takes the lock over and learns that the data may be torn.
func TestKillWriter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode          string
		writer, state func(id uint64) uint64 // the words the dead one leaves
	}{
		{"unique-half", func(id uint64) uint64 { return id | upgrade.WriterUnique }, func(uint64) uint64 { return 0 }},
		{"unique-try-half", func(id uint64) uint64 { return id }, func(uint64) uint64 { return uint64(upgrade.StateWrite) }},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			seg, path := newSegment(t)
			c, id := holding(t, path, tc.mode)
			e := entry(t, seg)
			require.Equal(t, tc.writer(id), e.Writer.Load()&^upgrade.WriterHungry, "the form of the hold")
			require.Equal(t, tc.state(id), uint64(e.State.Load()))
			gen := e.Generation.Load()
			w := open(t, seg)
			killWhileWaiting(t, seg, c, w.Lock, func(st upgrade.Status) bool { return st.WriterWaiters > 0 }, "the writer to sleep")
			require.True(t, w.Reclaimed())
			require.Greater(t, e.Generation.Load(), gen, "the dead one's token is past")
			rec, err := recordOf(seg)
			require.NoError(t, err)
			_, same := rec.read()
			require.False(t, same, "the dead writer's half write is visible to the new holder")
			rec.write(1, len(rec)) // repaired
			require.NoError(t, w.Unlock())
			noTraceOf(t, seg, id)
			require.True(t, status(t, seg).Inconsistent, "not marked consistent")
		})
	}
}

// A writer killed while readers wait: they release its lock and go on,
// and the next writer is told (Reclaimed, Inconsistent) that the data may
// be torn, though it was a reader that freed the lock; so is the writer
// after it, until one marks the data consistent.
func TestKillWriterReadersGoOn(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	c, id := holding(t, path, "unique")
	require.Equal(t, id|upgrade.WriterUnique, entry(t, seg).Writer.Load(), "held in the one-CAS form")
	r := open(t, seg)
	killWhileWaiting(t, seg, c, r.LockShared, func(st upgrade.Status) bool { return st.SharedWaiters > 0 }, "the reader to sleep")
	require.Equal(t, uint64(1), r.Repairs())
	noTraceOf(t, seg, id)
	require.NoError(t, r.UnlockShared())
	w := open(t, seg)
	require.True(t, status(t, seg).Inconsistent, "the reclaim waits for the next writer")
	require.NoError(t, w.Lock())
	require.True(t, w.Reclaimed(), "a reader released the dead writer's lock: the next writer is told")
	require.True(t, w.Inconsistent())
	require.NoError(t, w.Unlock())
	require.NoError(t, w.Lock())
	require.True(t, w.Reclaimed(), "not repaired: the following writer is told too")
	require.NoError(t, w.MarkConsistent())
	require.NoError(t, w.Unlock())
	require.False(t, status(t, seg).Inconsistent)
	require.NoError(t, w.Lock())
	require.False(t, w.Reclaimed(), "marked consistent: nobody is told")
	require.NoError(t, w.Unlock())
	require.ErrorIs(t, w.MarkConsistent(), upgrade.ErrNotHeld)
}

// A process killed while its upgrade is pending: readers, kept out by the
// pending bit, get in again, and the next upgrade seeker takes over.
func TestKillPendingUpgrade(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	r := open(t, seg)
	require.NoError(t, r.LockShared()) // keeps the child's upgrade pending
	c := pendingUpgrade(t, seg, path)
	id := c.Identity(t)
	r2 := open(t, seg)
	require.ErrorIs(t, r2.TryLockShared(), upgrade.ErrWouldBlock)
	c.Kill(t)
	require.NoError(t, r2.LockShared(), "a waiting reader releases the dead upgrade")
	require.Equal(t, uint64(1), r2.Repairs())
	noTraceOf(t, seg, id)
	st := status(t, seg)
	require.False(t, st.UpgradeLocked || st.UpgradePending || st.WriteLocked)
	require.NoError(t, r2.UnlockShared())
	require.NoError(t, r.UnlockShared())
	u := open(t, seg)
	require.NoError(t, u.LockUpgrade())
	require.NoError(t, u.UpgradeToUnique())
	require.NoError(t, u.UniqueToShared())
	require.NoError(t, u.UnlockShared())
}

// A process killed while pending, seen by the next upgrade seeker: it
// takes the upgrade lock over, without the pending bit.
func TestKillPendingUpgradeTakenOver(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	r := open(t, seg)
	require.NoError(t, r.LockShared())
	c := pendingUpgrade(t, seg, path)
	c.Kill(t)
	u := open(t, seg)
	require.NoError(t, u.LockUpgrade())
	require.True(t, u.Reclaimed())
	st := status(t, seg)
	require.True(t, st.UpgradeLocked)
	require.False(t, st.UpgradePending, "the dead one's pending upgrade is withdrawn")
	require.NoError(t, r.UnlockShared())
	require.NoError(t, u.UpgradeToUnique())
	require.NoError(t, u.UniqueToUpgrade())
	require.NoError(t, u.UnlockUpgrade())
}

// A process killed after its upgrade went through, half-way through a
// write: a writer gets in and learns of it.
func TestKillUpgradedWriter(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	c, id := holding(t, path, "upgraded-half")
	c.Kill(t)
	w := open(t, seg)
	require.NoError(t, w.Lock())
	require.True(t, w.Reclaimed())
	require.NoError(t, w.Unlock())
	noTraceOf(t, seg, id)
}

// Reclaim frees what dead processes hold without waiting, and never what
// live ones hold.
func TestReclaim(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	live := open(t, seg)
	require.NoError(t, live.LockShared())
	cr, reader := holding(t, path, "shared")
	cu, upgrader := holding(t, path, "upgrade")
	cr.Kill(t)
	cu.Kill(t)
	rep, err := upgrade.Reclaim(seg, 0, true)
	require.NoError(t, err)
	require.Equal(t, upgrader, rep.Upgrader)
	require.Zero(t, rep.Writer)
	require.Len(t, rep.Readers, 1)
	require.Equal(t, reader, rep.Readers[0].Owner)
	require.Equal(t, uint32(1), rep.Readers[0].Count, "the dead reader's hold")
	dry := rep
	st := status(t, seg)
	require.True(t, st.UpgradeLocked, "a dry run changes nothing")
	rep, err = upgrade.Reclaim(seg, 0, false)
	require.NoError(t, err)
	require.Equal(t, dry, rep, "the dry run said what would be done")
	st = status(t, seg)
	require.False(t, st.UpgradeLocked)
	require.Len(t, st.Readers, 1)
	require.Equal(t, uint32(1), st.Readers[0].Count, "the live reader keeps its hold")
	rep, err = upgrade.Reclaim(seg, 0, false)
	require.NoError(t, err)
	require.True(t, rep.Empty())
	require.NoError(t, live.UnlockShared())
}

// A writer killed while it waits in the writers' queue: the holder's
// release goes to everyone (a sleeping writer asks for no handoff), and
// the other writers and an upgrade seeker go on. A handoff left to a
// writer that died is TestStaleHandoff's.
func TestKillQueuedWriter(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	e := entry(t, seg)
	w := open(t, seg)
	require.NoError(t, w.Lock())
	c := testproc.Start(t, "hold", path, "queued")
	c.WaitLine(t, "held")
	waitWriterAsleep(t, seg)
	c.Kill(t)
	require.NoError(t, w.Unlock())
	require.Zero(t, e.Writer.Load(), "released to everyone")

	u := open(t, seg)
	require.NoError(t, u.LockUpgrade())
	require.NoError(t, u.UnlockUpgrade())
	require.NoError(t, w.Lock())
	require.False(t, w.Reclaimed())
	require.NoError(t, w.Unlock())
	st := status(t, seg)
	checkFree(t, st)
}

// A handle's Reclaim is the package's for its own mutex: it frees a dead
// writer (whose unique hold leaves the data inconsistent for the next
// unique holder), keeps the handle's own live holds, and fails once the
// handle is closed.
func TestMutexReclaim(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	c, writer := holding(t, path, "unique")
	c.Kill(t)
	m := open(t, seg)
	rep, err := m.Reclaim()
	require.NoError(t, err)
	require.Equal(t, writer, rep.Writer)
	require.NoError(t, m.TryLock())
	require.True(t, m.Reclaimed())
	require.True(t, m.Inconsistent())
	rep, err = m.Reclaim()
	require.NoError(t, err)
	require.True(t, rep.Empty(), "the handle's own hold is live")
	require.NoError(t, m.MarkConsistent())
	require.NoError(t, m.Unlock())
	require.NoError(t, m.Close())
	_, err = m.Reclaim()
	require.ErrorIs(t, err, upgrade.ErrClosed)
}
