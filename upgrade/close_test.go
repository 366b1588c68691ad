package upgrade_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// closeOps are every acquisition (and downgrade) of a handle, for
// TestUseAfterClose: all fail once the segment is closed. The releases
// still work (releaseAll).
var closeOps = []struct {
	name string
	op   func(m *upgrade.Mutex) error
}{
	{"Lock", (*upgrade.Mutex).Lock},
	{"TryLock", (*upgrade.Mutex).TryLock},
	{"LockContext", func(m *upgrade.Mutex) error { return m.LockContext(context.Background()) }},
	{"LockUpgrade", (*upgrade.Mutex).LockUpgrade},
	{"TryLockUpgrade", (*upgrade.Mutex).TryLockUpgrade},
	{"LockUpgradeContext", func(m *upgrade.Mutex) error { return m.LockUpgradeContext(context.Background()) }},
	{"LockShared", (*upgrade.Mutex).LockShared},
	{"TryLockShared", (*upgrade.Mutex).TryLockShared},
	{"LockSharedContext", func(m *upgrade.Mutex) error { return m.LockSharedContext(context.Background()) }},
	{"UpgradeToUnique", (*upgrade.Mutex).UpgradeToUnique},
	{"TryUpgradeToUnique", (*upgrade.Mutex).TryUpgradeToUnique},
	{"UpgradeToUniqueContext", func(m *upgrade.Mutex) error { return m.UpgradeToUniqueContext(context.Background()) }},
	{"UniqueToShared", (*upgrade.Mutex).UniqueToShared},
	{"Reclaim", func(m *upgrade.Mutex) error { _, err := m.Reclaim(); return err }},
	{"Upgrade", func(m *upgrade.Mutex) error { _, err := m.Upgrade(context.Background()); return err }},
	{"WithUnique", func(m *upgrade.Mutex) error {
		return m.WithUnique(context.Background(), func() error { return errors.New("ran on a closed segment") })
	}},
}

// Once its segment is closed a handle fails every acquisition with
// shm.ErrClosed, whatever it held, and changes nothing in the file: the
// mutex, as another mapping of the same file shows it, is exactly as it
// was at Close (Close releases nothing). The releases still reach the
// file, so what the handle held is given back and the mutex is free.
func TestUseAfterClose(t *testing.T) {
	t.Parallel()
	holds := []struct {
		name    string
		take    func(m *upgrade.Mutex) error
		release []func(m *upgrade.Mutex) error
	}{
		{"nothing", func(*upgrade.Mutex) error { return nil }, nil},
		{"shared", func(m *upgrade.Mutex) error {
			if err := m.LockShared(); err != nil {
				return err
			}
			return m.LockShared()
		}, []func(*upgrade.Mutex) error{(*upgrade.Mutex).UnlockShared, (*upgrade.Mutex).UnlockShared}},
		{"unique", (*upgrade.Mutex).Lock, []func(*upgrade.Mutex) error{(*upgrade.Mutex).Unlock}},
		{"upgrade", (*upgrade.Mutex).LockUpgrade, []func(*upgrade.Mutex) error{(*upgrade.Mutex).UnlockUpgrade}},
		{"upgraded", func(m *upgrade.Mutex) error {
			if err := m.LockUpgrade(); err != nil {
				return err
			}
			return m.UpgradeToUnique()
		}, []func(*upgrade.Mutex) error{(*upgrade.Mutex).UniqueToUpgrade, (*upgrade.Mutex).UnlockUpgrade}},
		{"shared-and-upgrade", func(m *upgrade.Mutex) error {
			if err := m.LockShared(); err != nil {
				return err
			}
			return m.LockUpgrade()
		}, []func(*upgrade.Mutex) error{(*upgrade.Mutex).UnlockShared, (*upgrade.Mutex).UnlockUpgrade}},
	}
	for _, h := range holds {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			observer, path := newSegment(t)
			seg, err := shm.Open(path, shm.Options{})
			require.NoError(t, err)
			m, err := upgrade.Open(seg, 0)
			require.NoError(t, err)
			require.NoError(t, h.take(m))
			before := status(t, observer)
			require.NoError(t, seg.Close())

			for _, o := range closeOps {
				require.ErrorIs(t, o.op(m), shm.ErrClosed, o.name)
			}
			require.ErrorIs(t, testproc.RecoverAs[*upgrade.LockerPanic](t, m.Locker().Lock), shm.ErrClosed, "Locker panics with the error, as documented")
			require.Zero(t, m.Generation(), "a closed segment reports no generation")
			_, err = upgrade.Inspect(seg, 0)
			require.ErrorIs(t, err, shm.ErrClosed)
			_, err = upgrade.Open(seg, 0)
			require.ErrorIs(t, err, shm.ErrClosed)
			_, err = upgrade.Named(seg, "mutex")
			require.ErrorIs(t, err, shm.ErrClosed)
			for _, dry := range []bool{true, false} {
				_, err = upgrade.Reclaim(seg, 0, dry)
				require.ErrorIs(t, err, shm.ErrClosed)
			}
			require.Equal(t, before, status(t, observer), "the file is as it was at Close")

			// The releases reach the file, and so does the handle's Close
			// (it gives its reader record back).
			if len(h.release) > 0 {
				require.ErrorIs(t, m.Close(), upgrade.ErrHeld, "the handle still holds the lock")
			}
			for i, r := range h.release {
				require.NoError(t, r(m), "release %d after Close", i)
			}
			require.NoError(t, m.Close())
			require.ErrorIs(t, m.Close(), upgrade.ErrClosed)
			require.ErrorIs(t, m.Lock(), shm.ErrClosed)
			checkFree(t, status(t, observer))
		})
	}
}

// The guard of Upgrade downgrades after Close too: the downgrade is a
// release, and it reaches the file.
func TestUpgradedAfterClose(t *testing.T) {
	t.Parallel()
	observer, path := newSegment(t)
	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	m, err := upgrade.Open(seg, 0)
	require.NoError(t, err)
	require.NoError(t, m.LockUpgrade())
	u, err := m.Upgrade(context.Background())
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	require.True(t, status(t, observer).Unique(), "Close releases nothing")
	require.NoError(t, u.Close())
	require.NoError(t, u.Close(), "later calls return the first result")
	st := status(t, observer)
	require.False(t, st.WriteLocked, "the downgrade reached the file")
	require.True(t, st.UpgradeLocked)
	require.Equal(t, m.HolderID(), st.UpgraderTID)
	require.NoError(t, m.UnlockUpgrade())
	require.NoError(t, m.Close())
	checkFree(t, status(t, observer))
}

// A handle and its segment close in either order, and the handle gives
// its reader record back either way.
func TestCloseOrder(t *testing.T) {
	t.Parallel()
	self := proc.Self().Pack()
	for _, tc := range []struct {
		name        string
		handleFirst bool
		shared      bool // the handle took (and released) a shared hold: it has a record
	}{
		{"handle-then-segment", true, false},
		{"handle-then-segment/record", true, true},
		{"segment-then-handle", false, false},
		{"segment-then-handle/record", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			observer, path := newSegment(t)
			seg, err := shm.Open(path, shm.Options{})
			require.NoError(t, err)
			m, err := upgrade.Open(seg, 0)
			require.NoError(t, err)
			if tc.shared {
				require.NoError(t, m.LockShared())
				require.NoError(t, m.UnlockShared())
			}
			if tc.handleFirst {
				require.NoError(t, m.Close())
				require.NoError(t, seg.Close())
				require.Empty(t, status(t, observer).Readers, "the record was given back")
			} else {
				require.NoError(t, seg.Close())
				if tc.shared {
					require.Equal(t, []upgrade.ReaderStatus{{Record: 0, Owner: self, Count: 0}}, status(t, observer).Readers,
						"the record is claimed until the handle closes")
				}
				require.NoError(t, m.Close())
				require.Empty(t, status(t, observer).Readers, "the record was given back")
			}
			require.ErrorIs(t, m.Close(), upgrade.ErrClosed)
			require.ErrorIs(t, seg.Close(), shm.ErrClosed)
			for _, o := range closeOps {
				require.ErrorIs(t, o.op(m), shm.ErrClosed, o.name)
			}
			checkFree(t, status(t, observer))
		})
	}
}

// A goroutine waiting for the lock when its segment closes returns
// shm.ErrClosed at its next wake. A waiter that held nothing in the file
// while it waited leaves the mutex as it was, its sleeper registration
// gone. One that held part of the lock while it waited for the rest (the
// writers' mutex, the Upgrader word, a pending upgrade) gives it back
// before Close returns: Close waits for it (closeWatch), and the mutex is
// exactly as it was before the wait, but for the generation its release
// bumped.
func TestCloseEndsAWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		block   func(tb testing.TB, other, m *upgrade.Mutex) // takes what the waiter waits for
		wait    func(m *upgrade.Mutex) error
		waiting func(st upgrade.Status, writerWord uint64) bool
		// watched: the waiter held part of the lock; otherwise after
		// checks the file once the waiter returned, with the other handle
		// still holding.
		watched bool
		after   func(tb testing.TB, st upgrade.Status)
	}{
		{
			name:    "reader-behind-writer",
			block:   func(tb testing.TB, o, _ *upgrade.Mutex) { require.NoError(tb, o.Lock()) },
			wait:    (*upgrade.Mutex).LockShared,
			waiting: func(st upgrade.Status, _ uint64) bool { return st.SharedWaiters == 1 },
			after: func(tb testing.TB, st upgrade.Status) {
				require.True(tb, st.WriteLocked)
				require.Zero(tb, st.State, "an uncontended Lock holds in its one-CAS form (writerUnique)")
				require.Zero(tb, st.SharedWaiters, "the registration is gone")
				for _, r := range st.Readers {
					require.Zero(tb, r.Count, "the waiter took its count back before it slept")
				}
			},
		},
		{
			name:    "upgrader-behind-upgrader",
			block:   func(tb testing.TB, o, _ *upgrade.Mutex) { require.NoError(tb, o.LockUpgrade()) },
			wait:    (*upgrade.Mutex).LockUpgrade,
			waiting: func(st upgrade.Status, _ uint64) bool { return st.SharedWaiters == 1 },
			after: func(tb testing.TB, st upgrade.Status) {
				require.Equal(tb, upgrade.StateUpgrade, st.State)
				require.Zero(tb, st.SharedWaiters, "the registration is gone")
			},
		},
		{
			name:    "writer-in-queue",
			block:   func(tb testing.TB, o, _ *upgrade.Mutex) { require.NoError(tb, o.Lock()) },
			wait:    (*upgrade.Mutex).Lock,
			waiting: func(st upgrade.Status, w uint64) bool { return st.WriterWaiters == 1 && w&upgrade.WriterHungry == 0 },
			after: func(tb testing.TB, st upgrade.Status) {
				require.True(tb, st.WriteLocked)
				require.Zero(tb, st.State, "an uncontended Lock holds in its one-CAS form (writerUnique)")
				require.Zero(tb, st.WriterWaiters, "the registration is gone")
				require.False(tb, st.Handoff)
			},
		},
		{
			// Holds the writers' mutex while it waits for the upgrade holder.
			name:    "writer-behind-upgrader",
			block:   func(tb testing.TB, o, _ *upgrade.Mutex) { require.NoError(tb, o.LockUpgrade()) },
			wait:    (*upgrade.Mutex).Lock,
			waiting: func(st upgrade.Status, _ uint64) bool { return st.UniqueWaiters == 1 },
			watched: true,
		},
		{
			// Holds the writers' mutex and stateWrite while readers drain.
			name:    "writer-behind-reader",
			block:   func(tb testing.TB, o, _ *upgrade.Mutex) { require.NoError(tb, o.LockShared()) },
			wait:    (*upgrade.Mutex).Lock,
			waiting: func(st upgrade.Status, _ uint64) bool { return st.UniqueWaiters == 1 && st.WriteLocked },
			watched: true,
		},
		{
			// Holds the Upgrader word while it waits for the writer.
			name:    "upgrader-behind-writer",
			block:   func(tb testing.TB, o, _ *upgrade.Mutex) { require.NoError(tb, o.Lock()) },
			wait:    (*upgrade.Mutex).LockUpgrade,
			waiting: func(st upgrade.Status, _ uint64) bool { return st.SharedWaiters == 1 && st.Upgrader != 0 },
			watched: true,
		},
		{
			// Holds the upgrade lock (its own, before the wait: it stays)
			// and statePending while readers drain.
			name: "pending-upgrade",
			block: func(tb testing.TB, o, m *upgrade.Mutex) {
				require.NoError(tb, o.LockShared())
				require.NoError(tb, m.LockUpgrade())
			},
			wait:    (*upgrade.Mutex).UpgradeToUnique,
			waiting: func(st upgrade.Status, _ uint64) bool { return st.UniqueWaiters == 1 && st.UpgradePending },
			watched: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			observer, path := newSegment(t)
			other := open(t, observer)
			seg, err := shm.Open(path, shm.Options{})
			require.NoError(t, err)
			m, err := upgrade.Open(seg, 0)
			require.NoError(t, err)
			tc.block(t, other, m)
			before := status(t, observer)

			done := make(chan error, 1)
			go func() { done <- tc.wait(m) }()
			e := entry(t, observer)
			waitStatus(t, observer, func(st upgrade.Status) bool { return tc.waiting(st, e.Writer.Load()) }, "the waiter to sleep")
			require.NoError(t, seg.Close())
			require.ErrorIs(t, testproc.Receive(t, done, "the waiter to return after Close"), shm.ErrClosed)
			st := status(t, observer)
			if tc.watched {
				require.GreaterOrEqual(t, st.Generation, before.Generation)
				st.Generation = before.Generation
				require.Equal(t, before, st, "the waiter gave back what it held")
			} else {
				tc.after(t, st)
			}
			if m.HoldsUpgrade() {
				require.NoError(t, m.UnlockUpgrade())
			}
			require.NoError(t, m.Close())
		})
	}
}

// A nil segment (an Open that failed, unchecked) is an error, not a panic.
func TestNilSegment(t *testing.T) {
	t.Parallel()
	_, err := upgrade.Open(nil, 0)
	require.ErrorIs(t, err, shm.ErrNoSegment)
	_, err = upgrade.Named(nil, "mutex")
	require.ErrorIs(t, err, shm.ErrNoSegment)
	_, err = upgrade.Inspect(nil, 0)
	require.ErrorIs(t, err, shm.ErrNoSegment)
	_, err = upgrade.Check(nil, 0)
	require.ErrorIs(t, err, shm.ErrNoSegment)
	_, err = upgrade.Reclaim(nil, 0, true)
	require.ErrorIs(t, err, shm.ErrNoSegment)
	_, err = upgrade.ForceUnlock(nil, 0)
	require.ErrorIs(t, err, shm.ErrNoSegment)
}

// A Locker's methods, which cannot return an error, panic with it once the
// handle or its segment is closed, as the Locker's doc says: every
// acquisition (Lock, RLock, its RLocker's Lock), the value a
// *LockerPanic that wraps the error; the file is left as it was. The
// releases of what the handle held still work after the segment's Close.
func TestLockerAfterClose(t *testing.T) {
	t.Parallel()
	for _, closer := range []string{"handle", "segment"} {
		t.Run(closer, func(t *testing.T) {
			t.Parallel()
			observer, path := newSegment(t)
			seg, err := shm.Open(path, shm.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = seg.Close() })
			m, err := upgrade.Open(seg, 0)
			require.NoError(t, err)
			l := m.Locker()
			want := shm.ErrClosed // checkOpen looks at the segment first
			if closer == "handle" {
				want = upgrade.ErrClosed
				require.NoError(t, m.Close())
			} else {
				l.RLock() // held across the Close, released after it
				require.NoError(t, seg.Close())
			}
			before := status(t, observer)
			require.ErrorIs(t, testproc.RecoverAs[*upgrade.LockerPanic](t, l.Lock), want, "Lock")
			require.ErrorIs(t, testproc.RecoverAs[*upgrade.LockerPanic](t, l.RLock), want, "RLock")
			require.ErrorIs(t, testproc.RecoverAs[*upgrade.LockerPanic](t, l.RLocker().Lock), want, "RLocker().Lock")
			require.Equal(t, before, status(t, observer), "the file changed")
			if closer == "segment" {
				l.RUnlock()
				checkFree(t, status(t, observer))
			}
		})
	}
}

// The holder of the unique lock that repaired the data says so after its
// segment's Close, as it releases after it: MarkConsistent clears the mark
// in the file, and the next holder (another mapping) is not told. Another
// handle, which holds nothing, is refused (ErrNotHeld) as before Close.
func TestMarkConsistentAfterClose(t *testing.T) {
	t.Parallel()
	observer, path := newSegment(t)
	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	dead, m, idle := open(t, observer), open(t, seg), open(t, seg)
	require.NoError(t, dead.Lock())
	_, err = upgrade.ForceUnlock(observer, 0) // as a dead holder's reclaim: marked
	require.NoError(t, err)
	require.NoError(t, m.Lock())
	require.True(t, m.Inconsistent())
	require.NoError(t, seg.Close())
	require.ErrorIs(t, idle.MarkConsistent(), upgrade.ErrNotHeld)
	require.True(t, status(t, observer).Inconsistent, "a handle that holds nothing cleared the mark")
	require.NoError(t, m.MarkConsistent(), "the holder's, after Close")
	require.NoError(t, m.Unlock())
	next := open(t, observer)
	require.NoError(t, next.Lock())
	require.False(t, next.Inconsistent(), "the repair said after Close is lost")
	require.NoError(t, next.Unlock())
	for _, h := range []*upgrade.Mutex{dead, m, idle, next} {
		require.NoError(t, h.Close())
	}
}
