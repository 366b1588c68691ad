package upgrade_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// FuzzEntry: whatever words an upgrade mutex's entry and its reader
// records hold (a damaged or hostile segment), the calls return, with an
// error or not, and never panic or hang: Inspect, Check,
// the Try acquisitions (a grant is released again, and a mutex that was
// free is free again), waits of 200 µs of each kind (granted and
// released, or given up), a dry-run Reclaim, Reclaim and ForceUnlock,
// after which the unique lock is granted at once.
func FuzzEntry(f *testing.F) {
	seg, _ := newSegment(f)
	ups, err := seg.Region(layout.KindUpgrades)
	require.NoError(f, err)
	readers, err := seg.Region(layout.KindUpgradeReaders)
	require.NoError(f, err)
	m, err := upgrade.Open(seg, 0)
	require.NoError(f, err)
	f.Cleanup(func() { _ = m.Close() })

	// Seeds: a free mutex, and one held every way this process can.
	f.Add(snapshot(ups, readers))
	require.NoError(f, m.LockShared())
	f.Add(snapshot(ups, readers))
	require.NoError(f, m.UnlockShared())
	require.NoError(f, m.LockUpgrade())
	f.Add(snapshot(ups, readers))
	require.NoError(f, m.UnlockUpgrade())
	require.NoError(f, m.Lock())
	f.Add(snapshot(ups, readers))
	require.NoError(f, m.Unlock())

	// The identity words of mutex 0: its writer's, its upgrade holder's and
	// its reader records' owners.
	e, err := seg.Upgrade(0)
	require.NoError(f, err)
	records, err := seg.UpgradeReaders(0)
	require.NoError(f, err)
	identities := []*atomic.Uint64{&e.Writer, &e.Upgrader}
	for j := range records {
		identities = append(identities, &records[j].Owner)
	}
	self := proc.Self().Pack()

	f.Fuzz(func(t *testing.T, data []byte) {
		// Each input as written (a process the words name is most often
		// dead), and as this process's own: every identity word that is
		// set names this process, a live holder or acquirer that this
		// handle is not (libshmlock's replay of the corpus does the same).
		for _, own := range []bool{false, true} {
			clear(ups)
			clear(readers)
			n := copy(ups, data)
			copy(readers, data[n:])
			for _, w := range identities {
				if own && w.Load() != 0 {
					w.Store(self)
				}
			}
			exerciseEntry(t, seg, m)
		}
	})
}

// exerciseEntry is FuzzEntry's use of mutex 0 of seg, whatever its words,
// through the handle m.
func exerciseEntry(t *testing.T, seg *shm.Segment, m *upgrade.Mutex) {
	_, err := upgrade.Check(seg, 0)
	testproc.RequireTyped(t, "Check", err, entryErrors...)
	for _, try := range []struct {
		name string
		lock func() error
		free func() error
	}{
		{"unique", m.TryLock, m.Unlock},
		{"shared", m.TryLockShared, m.UnlockShared},
		{"upgrade", m.TryLockUpgrade, func() error {
			if m.TryUpgradeToUnique() == nil {
				if err := m.UniqueToUpgrade(); err != nil {
					return err
				}
			}
			return m.UnlockUpgrade()
		}},
	} {
		freeBefore := unheld(t, seg)
		if err := try.lock(); err != nil {
			testproc.RequireTyped(t, try.name+" try", err, entryErrors...)
			continue
		}
		if err := try.free(); err != nil {
			t.Fatalf("%s: the release of a grant: %v", try.name, err)
		}
		if freeBefore && !unheld(t, seg) {
			st, _ := upgrade.Inspect(seg, 0)
			t.Fatalf("%s: a free mutex is held after the grant's release: %+v", try.name, st)
		}
	}
	// Waits end by their deadline, whatever the words (the watchdog
	// makes a hang a failure); a grant is released again.
	for _, wait := range []struct {
		name string
		lock func(context.Context) error
		free func() error
	}{
		{"unique", m.LockContext, m.Unlock},
		{"shared", m.LockSharedContext, m.UnlockShared},
		{"upgrade", m.LockUpgradeContext, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
			defer cancel()
			if m.UpgradeToUniqueContext(ctx) == nil {
				if err := m.UniqueToUpgrade(); err != nil {
					return err
				}
			}
			return m.UnlockUpgrade()
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
		stop := testproc.Watchdog(time.Minute, wait.name+" wait")
		err := wait.lock(ctx)
		testproc.RequireTyped(t, wait.name+" wait", err, entryErrors...)
		if err == nil {
			if err := wait.free(); err != nil {
				t.Fatalf("%s: the release of a waited grant: %v", wait.name, err)
			}
		}
		stop()
		cancel()
	}
	_, err = upgrade.Reclaim(seg, 0, true)
	testproc.RequireTyped(t, "dry-run Reclaim", err, entryErrors...)
	_, err = upgrade.Reclaim(seg, 0, false)
	testproc.RequireTyped(t, "Reclaim", err, entryErrors...)
	// An operator's ForceUnlock frees every hold: the unique lock is
	// then granted without waiting, and its holder may mark the data
	// whole again. A live writer or upgrade seeker that was not granted
	// is left to go on (Forced.WaitingWriter, WaitingUpgrader), and keeps
	// the lock from the try.
	forced, err := upgrade.ForceUnlock(seg, 0)
	testproc.RequireTyped(t, "ForceUnlock", err, entryErrors...)
	if err == nil {
		if err := m.TryLock(); err != nil {
			if errors.Is(err, upgrade.ErrWouldBlock) && (forced.WaitingWriter != 0 || forced.WaitingUpgrader != 0) {
				return
			}
			st, _ := upgrade.Inspect(seg, 0)
			t.Fatalf("the unique lock after ForceUnlock: %v (%+v, forced %+v)", err, st, forced)
		}
		require.NoError(t, m.MarkConsistent())
		require.False(t, m.Inconsistent(), "after MarkConsistent")
		require.NoError(t, m.Unlock())
	}
	_, _ = upgrade.Inspect(seg, 0)
}

// entryErrors are the errors FuzzEntry's calls may end with, whatever the
// words: the package's sentinels, and a wait's deadline.
var entryErrors = []error{
	upgrade.ErrNotHeld, upgrade.ErrNotOwner, upgrade.ErrWouldBlock, upgrade.ErrHeld,
	upgrade.ErrOverflow, upgrade.ErrTooManyReaders, upgrade.ErrClosed, context.DeadlineExceeded,
}

func snapshot(regions ...[]byte) []byte {
	var b []byte
	for _, r := range regions {
		b = append(b, r...)
	}
	return b
}

// unheld reports whether mutex 0 of seg is free and carries nothing its
// next holder must be told: layout.UpgradeFree, the claim directory's test.
func unheld(t *testing.T, seg *shm.Segment) bool {
	e, err := seg.Upgrade(0)
	require.NoError(t, err)
	rs, err := seg.UpgradeReaders(0)
	require.NoError(t, err)
	return layout.UpgradeFree(e, rs)
}

// A reader record whose count a damage set to 2^32-1: the next shared hold
// would wrap it to 0 and count nothing its release could find (FuzzEntry
// found the grant that could not be released); it is refused with
// ErrOverflow, through every path, and the record is left as it was.
func TestWrappedReaderCount(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	m, err := upgrade.Open(seg, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	require.NoError(t, m.LockShared())
	st, err := upgrade.Inspect(seg, 1)
	require.NoError(t, err)
	require.Len(t, st.Readers, 1)
	readers, err := seg.Region(layout.KindUpgradeReaders)
	require.NoError(t, err)
	off := (1*st.ReaderRecords + st.Readers[0].Record) * 16
	count := readers[off+8 : off+12]
	binary.LittleEndian.PutUint32(count, 1<<32-1)

	require.ErrorIs(t, m.TryLockShared(), upgrade.ErrOverflow)
	require.ErrorIs(t, m.LockShared(), upgrade.ErrOverflow)
	l := m.Locker()
	require.ErrorIs(t, testproc.RecoverAs[*upgrade.LockerPanic](t, l.RLock), upgrade.ErrOverflow, "Locker.RLock panics with the error, as with any")
	require.Equal(t, uint32(1<<32-1), binary.LittleEndian.Uint32(count))
	binary.LittleEndian.PutUint32(count, 1)
	require.NoError(t, m.UnlockShared())
}
