package etcdlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/lockertest"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// TestConformance runs the one suite of lockmgr.Locker behaviours against
// both backends.
func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("shm", func(t *testing.T) {
		t.Parallel()
		// As long as etcd's: the suite refreshes a hold of MinTTL right
		// after its grant, and with 100ms a goroutine descheduled that
		// long between the two (a loaded machine) found the hold expired.
		lockertest.Run(t, lockertest.Backend{New: newShm, MinTTL: time.Second})
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		lockertest.Run(t, lockertest.Backend{New: newEtcd, MinTTL: time.Second})
	})
}

// newShm opens one new segment twice, as two processes would.
func newShm(tb testing.TB) (lockmgr.Locker, lockmgr.Locker) {
	tb.Helper()
	path := testproc.SegmentPath(tb)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 1, Upgrades: 1, LockMgrEntries: 64}})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = seg.Close() })
	seg2, err := shm.Open(path, shm.Options{})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = seg2.Close() })
	a, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(tb, err)
	b, err := lockmgr.Open(seg2, lockmgr.Options{})
	require.NoError(tb, err)
	return a, b
}

// newEtcd starts two Managers, each with a client of its own, on a new
// prefix of the test server.
func newEtcd(tb testing.TB) (lockmgr.Locker, lockmgr.Locker) {
	tb.Helper()
	p := newPrefix(tb)
	return newManager(tb, p), newManager(tb, p)
}
