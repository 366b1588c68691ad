package etcdlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

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

// TestRefreshLostAnswerKeepsHold: a Refresh that moves a hold to a new
// lease and gets no answer to its transaction, which etcd applied, must
// not end the hold. It revoked the new lease on any error, taking the
// key it had just moved onto it: the hold ended (and was granted to the
// next comer) because one answer was lost, while the owner was told only
// that the outcome was unknown.
func TestRefreshLostAnswerKeepsHold(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	var lose atomic.Bool
	m := interceptedManager(t, p,
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if r, ok := req.(*pb.TxnRequest); ok && err == nil && len(r.Success) > 0 && r.Success[0].GetRequestPut() != nil && lose.CompareAndSwap(true, false) {
				return errors.New("test: the answer was lost")
			}
			return err
		})
	other := newManager(t, p)
	for _, ttl := range []time.Duration{5 * time.Second, 0} {
		_, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: ttl})
		require.NoError(t, err)
		lose.Store(true)
		_, err = m.Refresh("r", "a", 10*time.Second)
		require.False(t, lose.Load(), "the answer was lost")
		if err != nil {
			require.ErrorIs(t, err, lockmgr.ErrUnavailable)
		}
		ri, err := other.Inspect("r")
		require.NoError(t, err)
		require.Equal(t, lockmgr.Acquired, ri.State, "ttl %v: the hold after a Refresh whose answer was lost", ttl)
		_, err = other.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.ErrorIs(t, err, lockmgr.ErrResourceLocked, "ttl %v", ttl)
		require.NoError(t, m.Release("r", "a"))
	}
}
