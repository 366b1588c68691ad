package etcdlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// A hold with a TTL outlives its Manager's session, and its holder's
// MarkConsistent works after Close as its Release does (and as the shm
// Manager's do after its segment's Close): a holder that repaired the
// data as it unwinds says so, else every later grant is told of damage
// that is no more. A hold on the session ended with it: ErrLockNotHeld.
// Before, MarkConsistent after Close failed with ErrSessionLost, which
// its doc did not name, and the mark stayed.
func TestMarkConsistentAfterClose(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	// A hold that ends without its release (its session revoked by Close)
	// leaves r inconsistent.
	gone := newManager(t, p)
	_, err := gone.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.NoError(t, gone.Close())

	m, err := etcdlock.New(testCtx(t), newClient(t), etcdlock.Options{Prefix: p, SessionTTL: liveSessionTTL})
	require.NoError(t, err)
	info, err := m.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, info.Inconsistent, "the grant is told")
	_, err = m.Acquire(testCtx(t), "s", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.NoError(t, m.Close())

	require.NoError(t, m.MarkConsistent("r", "b"), "the TTL hold's holder after Close")
	other := newManager(t, p)
	ri, err := other.Inspect("r")
	require.NoError(t, err)
	require.False(t, ri.Inconsistent, "the mark is gone")
	require.NoError(t, m.Release("r", "b"))

	require.ErrorIs(t, m.MarkConsistent("s", "b"), lockmgr.ErrLockNotHeld, "the session's hold ended with Close")
}
