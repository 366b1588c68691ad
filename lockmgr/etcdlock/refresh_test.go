package etcdlock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/shmlock/shmlock/lockmgr"
)

// TestRefreshByAnotherManager: any Manager may refresh any owner's hold
// (shmctl does, from a process of its own). Moving a hold that lives on
// its granting Manager's session to a lease of its own, or onto the
// refreshing Manager's session, must not revoke the granting Manager's
// session: that would end every other hold it has.
func TestRefreshByAnotherManager(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{0, 5 * time.Second} {
		p := newPrefix(t)
		a, b := newManager(t, p), newManager(t, p)
		_, err := a.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.NoError(t, err)
		_, err = a.Acquire(testCtx(t), "other", "bystander", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.NoError(t, err)
		_, err = b.Refresh("r", "a", ttl)
		require.NoError(t, err)
		time.Sleep(200 * time.Millisecond)
		select {
		case <-a.Done():
			t.Fatalf("ttl %v: the refresh by another Manager ended the holder's session", ttl)
		default:
		}
		ri, err := b.Inspect("other")
		require.NoError(t, err)
		require.Equal(t, lockmgr.Acquired, ri.State, "ttl %v: the bystander's hold", ttl)
		ri, err = b.Inspect("r")
		require.NoError(t, err)
		require.Equal(t, lockmgr.Acquired, ri.State, "ttl %v: the refreshed hold", ttl)
		require.NoError(t, a.Release("other", "bystander"))
		require.NoError(t, a.Release("r", "a"))
	}
}

// TestRefreshKeepsSessionHold: a Refresh to no expiry of a hold that has
// none already leaves it where it is, on the session of the Manager that
// granted it. Moving it onto the refreshing Manager's session tied the
// hold to that Manager: a shmctl refresh, say, whose Close then ended the
// hold while its owner's process still ran and believed it held.
func TestRefreshKeepsSessionHold(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	a, b := newManager(t, p), newManager(t, p)
	_, err := a.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	info, err := b.Refresh("r", "a", 0)
	require.NoError(t, err)
	require.Equal(t, lockmgr.Acquired, info.State)
	require.Zero(t, info.Timeout)
	require.NoError(t, b.Close())
	ri, err := a.Inspect("r")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Acquired, ri.State, "the hold ended with the refreshing Manager")
	require.NoError(t, a.Release("r", "a"))
}

// TestRefreshMeetsExpiry: a Refresh that moves a hold to a new lease (a
// new TTL) and finds, at its transaction, that the hold's lease expired
// after its read, reports ErrLockTimeout and tells the owner once, as a
// Refresh that reads the expiry does. It reported ErrUnavailable (code
// UNAVAILABLE: "the outcome is unknown") around the ErrLockTimeout, and
// left the end unrecorded, so the owner's next Release was told again.
func TestRefreshMeetsExpiry(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	raw := newClient(t)
	var hook atomic.Pointer[func()]
	m := hookedManager(t, p, func(req any) bool {
		_, ok := req.(*pb.LeaseGrantRequest)
		return ok
	}, &hook)
	_, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: 5 * time.Second})
	require.NoError(t, err)
	// The lease runs out between the Refresh's read and its transaction
	// (deleting the key is what etcd does then).
	expire := func() {
		_, err := raw.Delete(testCtx(t), p+"r/r/h/x/a")
		require.NoError(t, err)
	}
	hook.Store(&expire)
	_, err = m.Refresh("r", "a", 10*time.Second)
	require.ErrorIs(t, err, lockmgr.ErrLockTimeout)
	require.NotErrorIs(t, err, lockmgr.ErrUnavailable)
	require.Equal(t, "LOCK_TIMEOUT", lockmgr.Code(err))
	require.Nil(t, hook.Load(), "the hook ran")
	require.NoError(t, m.Release("r", "a"), "told once: the release finds nobody holding")
	ri, err := m.Inspect("r")
	require.NoError(t, err)
	require.Empty(t, ri.Holders)
}
