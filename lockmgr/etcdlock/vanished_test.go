package etcdlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// TestQueuedKeyReplaced: a waiter whose queued key was deleted behind its
// back (an operator, etcdctl del) and then queued again by another
// acquisition of the same owner is no longer in the queue: it fails as
// soon as it looks, instead of taking the other acquisition's key for its
// own and spinning on grant attempts that cannot succeed.
func TestQueuedKeyReplaced(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	h, w, w2 := newManager(t, p), newManager(t, p), newManager(t, p)
	raw := newClient(t)
	_, err := h.Acquire(testCtx(t), "r", "h", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	wait := func(m interface {
		Acquire(context.Context, string, string, lockmgr.Mode, lockmgr.AcquireOptions) (lockmgr.LockInfo, error)
	}) <-chan error {
		queued, errs := make(chan struct{}), make(chan error, 1)
		first := true
		go func() {
			_, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever,
				OnWait: func(lockmgr.LockInfo, time.Duration) {
					if first {
						first = false
						close(queued)
					}
				}})
			errs <- err
		}()
		testproc.Receive(t, queued, "a queued")
		return errs
	}
	errs := wait(w)
	_, err = raw.Delete(testCtx(t), p+"r/r/h/x/a")
	require.NoError(t, err)
	errs2 := wait(w2)
	require.NoError(t, h.Release("r", "h"))
	require.NoError(t, testproc.Receive(t, errs2, "the second acquisition's grant"))
	select {
	case err := <-errs:
		// The owner's other acquisition has its place: as when it
		// comes while the owner is queued.
		require.ErrorIs(t, err, lockmgr.ErrAlreadyHeld)
	case <-time.After(testproc.Timeout): // a bound on a spin that never ends, not a measurement
		t.Fatal("the waiter whose key was replaced still waits (spinning on its grant)")
	}
	require.NoError(t, w2.Release("r", "a"))
}

// TestQueuedKeyDeleted: a waiter whose queued key someone else deleted
// (etcdctl del) has lost its place in the queue, and its acquisition
// fails with ErrAcquisitionFailed, which a caller may retry. It failed
// with ErrSessionLost, which says the Manager must be replaced, though
// its session was alive and the Manager went on working.
func TestQueuedKeyDeleted(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	h, w := newManager(t, p), newManager(t, p)
	raw := newClient(t)
	_, err := h.Acquire(testCtx(t), "r", "h", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	queued, errs := make(chan struct{}), make(chan error, 1)
	var once sync.Once
	go func() {
		_, err := w.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever,
			OnWait: func(lockmgr.LockInfo, time.Duration) { once.Do(func() { close(queued) }) }})
		errs <- err
	}()
	testproc.Receive(t, queued, "a queued")
	_, err = raw.Delete(testCtx(t), p+"r/r/h/x/a")
	require.NoError(t, err)
	require.NoError(t, h.Release("r", "h")) // wakes a, which finds its key gone
	err = testproc.Receive(t, errs, "a's end")
	require.ErrorIs(t, err, lockmgr.ErrAcquisitionFailed)
	require.NotErrorIs(t, err, lockmgr.ErrSessionLost)
	_, err = w.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err, "the waiter's Manager works on")
	require.NoError(t, w.Release("r", "a"))
}

// TestLosingTombstoneLeaseRevoked: a Manager that records the end of an
// unreleased hold grants a lease for the tombstone before its transaction;
// when the transaction loses (another Manager recorded the end first), the
// lease, with nothing on it, is revoked instead of staying in the cluster
// for an hour. Not parallel: it looks at the cluster's leases.
func TestLosingTombstoneLeaseRevoked(t *testing.T) {
	m := newManager(t, newPrefix(t))
	raw := newClient(t)
	tombLeases := func() map[clientv3.LeaseID]bool {
		resp, err := raw.Leases(testCtx(t))
		require.NoError(t, err)
		ids := map[clientv3.LeaseID]bool{}
		for _, l := range resp.Leases {
			ttl, err := raw.TimeToLive(testCtx(t), l.ID)
			if err == nil && ttl.GrantedTTL == int64(etcdlock.TombstoneTTL/time.Second) {
				ids[l.ID] = true
			}
		}
		return ids
	}
	before := tombLeases()
	won, err := etcdlock.EndOrphanLosing(testCtx(t), m, "r", "o")
	require.NoError(t, err)
	require.False(t, won)
	for id := range tombLeases() {
		require.True(t, before[id], "a tombstone lease (%x) left after a losing transaction", id)
	}
}
