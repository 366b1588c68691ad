package etcdlock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// TestToldLostStaysLost: once a hold's Lost channel has closed (its TTL,
// less the margin, passed since its lease's grant was sent), its owner's
// Refresh or Release is told that the hold expired (ErrLockTimeout), as
// the shm table tells it once the TTL has passed, and the hold ends; a
// waiter is granted it. Before, etcd, which counts the TTL from the
// grant's arrival, still had the key: the Refresh succeeded and renewed
// a hold whose holder had been told to stop writing (Lost stays closed),
// and the Release counted a release of it. The grant's request is held
// back on its way out, so that etcd's TTL runs well past the holder's
// deadline.
func TestToldLostStaysLost(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	for _, call := range []string{"refresh", "release"} {
		p := newPrefix(t)
		m, hook := grantHookedManager(t, p)
		waiter := newManager(t, p)
		acquireToldLost(t, m, hook, ttl)
		var err error
		if call == "refresh" {
			_, err = m.Refresh("r", "a", ttl)
		} else {
			err = m.Release("r", "a")
		}
		require.ErrorIs(t, err, lockmgr.ErrLockTimeout, "%s after Lost closed", call)
		_, err = waiter.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.NoError(t, err, "%s: the hold told lost is over", call)
		require.NoError(t, waiter.Release("r", "b"))
		o, err := waiter.Overview()
		require.NoError(t, err)
		require.Equal(t, uint64(1), o.Stats.ExpiredLocks, "%s: the hold counted as expired", call)
		require.Equal(t, uint64(1), o.Stats.Released, "%s: the waiter's release only", call)
	}
}

// TestToldLostMarkConsistent: the owner of a hold told lost (its Lost
// closed) holds no live hold, so its MarkConsistent fails with
// ErrLockNotHeld and the resource stays inconsistent, as the shm table
// refuses the MarkConsistent of an expired hold. Before, etcd still had
// the key (it counts the TTL from the grant's arrival, held back here),
// and the mark went: the next holder was not told of the damage that the
// holder, told to stop, may have left.
func TestToldLostMarkConsistent(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	p := newPrefix(t)
	m, hook := grantHookedManager(t, p)
	gone := newManager(t, p)
	_, err := gone.Acquire(testCtx(t), "r", "dead", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.NoError(t, gone.Close(), "its hold ends without its release")
	info := acquireToldLost(t, m, hook, ttl)
	require.True(t, info.Inconsistent)
	require.ErrorIs(t, m.MarkConsistent("r", "a"), lockmgr.ErrLockNotHeld, "MarkConsistent after Lost closed")
	require.ErrorIs(t, m.Release("r", "a"), lockmgr.ErrLockTimeout)
	ri, err := m.Inspect("r")
	require.NoError(t, err)
	require.True(t, ri.Inconsistent, "the mark stays")
}

// TestToldLostAcquireAgain: the owner of a hold told lost (its Lost
// closed) that acquires the resource again is granted it, told that the
// resource is inconsistent, as the shm table grants an owner whose hold
// expired. Before, etcd, which counts the TTL from the grant's arrival
// (held back here), still had the key, and the owner got ErrAlreadyHeld
// for a hold it had been told was over, waiting or not.
func TestToldLostAcquireAgain(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	p := newPrefix(t)
	m, hook := grantHookedManager(t, p)
	first := acquireToldLost(t, m, hook, ttl)
	info, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: testproc.Timeout})
	require.NoError(t, err, "the owner of a hold told lost acquires again")
	require.True(t, info.Inconsistent, "the lost hold ended without its release")
	require.Greater(t, info.Version, first.Version)
	require.NoError(t, m.Release("r", "a"), "the new hold is released, not told of the old one")
}

// grantHookedManager is a Manager of prefix p whose next lease grant runs
// *hook (once, if set) before its request goes out.
func grantHookedManager(t *testing.T, p string) (*etcdlock.Manager, *atomic.Pointer[func()]) {
	t.Helper()
	var hook atomic.Pointer[func()]
	m := hookedManager(t, p, func(req any) bool {
		_, ok := req.(*pb.LeaseGrantRequest)
		return ok
	}, &hook)
	return m, &hook
}

// acquireToldLost acquires r for owner a in m with a TTL of ttl whose lease
// grant is held back for ttl, and waits for the hold's Lost to close: a
// hold m has told lost while etcd, counting from the grant's arrival,
// still has the key.
func acquireToldLost(t *testing.T, m *etcdlock.Manager, hook *atomic.Pointer[func()], ttl time.Duration) lockmgr.LockInfo {
	t.Helper()
	late := func() { time.Sleep(ttl) }
	hook.Store(&late)
	info, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: ttl})
	require.NoError(t, err)
	require.Nil(t, hook.Load(), "the grant was held back")
	lost, err := m.Lost("r", "a")
	require.NoError(t, err)
	testproc.Receive(t, lost, "the lost signal")
	return info
}
