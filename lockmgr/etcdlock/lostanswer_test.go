package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// lossyManager is a Manager whose client loses the answer of its next
// transaction once *lose is set: the server commits it, the caller sees
// an error, as when a request's context ends or the connection breaks
// after the request was sent. Once that answer is lost, the next *fail
// transactions fail without reaching the server (fail may be nil).
func lossyManager(t *testing.T, prefix string, lose *atomic.Bool, fail *atomic.Int32) *etcdlock.Manager {
	t.Helper()
	return interceptedManager(t, prefix,
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if fail != nil && strings.HasSuffix(method, "/Txn") && !lose.Load() && takeOne(fail) {
				return errors.New("test: etcd unreachable")
			}
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil && strings.HasSuffix(method, "/Txn") && ctx.Value(lossyKey{}) != nil && lose.CompareAndSwap(true, false) {
				return errors.New("test: the answer was lost")
			}
			return err
		})
}

// lossyKey marks the context of a call whose request may lose its
// answer (lossyCtx): only that call's, not a transaction the Manager makes
// in the background meanwhile (a cleanup's retry, its statistics), which
// took the loss meant for the acquisition once under load, and the
// acquisition then waited for its context's end.
type lossyKey struct{}

// lossyCtx is testCtx for a call whose first transaction's answer the
// lossy Manager loses while lose is set.
func lossyCtx(t *testing.T) context.Context { return context.WithValue(testCtx(t), lossyKey{}, true) }

// takeOne takes 1 from *n if it is positive.
func takeOne(n *atomic.Int32) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

// loseQueuedKey queues a (on m) behind b's hold of r (on other), losing
// the answer of the request that queued it, so that the acquisition
// fails and takes its queued key back; then b releases.
func loseQueuedKey(t *testing.T, m, other *etcdlock.Manager, lose *atomic.Bool) {
	t.Helper()
	_, err := other.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	lose.Store(true)
	_, err = m.Acquire(lossyCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
	require.ErrorIs(t, err, lockmgr.ErrUnavailable)
	require.NoError(t, other.Release("r", "b"))
}

// TestLostAnswerKeepsOthersHold: an acquisition whose first request
// fails without an answer takes back what that request may have written,
// and only that: the owner's hold that was there before (the request found
// it: ErrAlreadyHeld) stays, and nobody else is granted the resource.
func TestLostAnswerKeepsOthersHold(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	var lose atomic.Bool
	m, other := lossyManager(t, p, &lose, nil), newManager(t, p)
	for _, mode := range []lockmgr.Mode{lockmgr.Exclusive, lockmgr.Collaborative} {
		_, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.NoError(t, err)
		lose.Store(true)
		_, err = m.Acquire(lossyCtx(t), "r", "a", mode, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
		require.ErrorIs(t, err, lockmgr.ErrUnavailable)
		require.False(t, lose.Load(), "the answer was lost")
		ri, err := other.Inspect("r")
		require.NoError(t, err)
		require.Equal(t, lockmgr.Acquired, ri.State, "a's hold after its second acquisition (%v) failed", mode)
		_, err = other.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.ErrorIs(t, err, lockmgr.ErrResourceLocked, "b granted while a holds")
		require.NoError(t, m.Release("r", "a"))
	}

	// What the lost request did write, it takes back: a grant, or a
	// queued key.
	lose.Store(true)
	_, err := m.Acquire(lossyCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrUnavailable)
	ri, err := other.Inspect("r")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Unlocked, ri.State, "the lost grant was taken back")
	loseQueuedKey(t, m, other, &lose)
	_, err = other.Acquire(testCtx(t), "r", "c", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err, "the lost queued key was taken back")
	require.NoError(t, other.Release("r", "c"))
}

// TestLostAnswerCleanupRetried: when etcd answers neither an acquisition's
// request nor the deletion of what it may have written, the key it wrote
// (a grant nobody knows of, or a queued key) stayed on the session's lease
// and kept the resource from everyone until the Manager closed. The
// deletion is now tried again in the background until etcd answers it.
func TestLostAnswerCleanupRetried(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	var lose atomic.Bool
	var fail atomic.Int32
	m, other := lossyManager(t, p, &lose, &fail), newManager(t, p)

	fail.Store(2) // the deletion and its first retry
	lose.Store(true)
	_, err := m.Acquire(lossyCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrUnavailable)
	_, err = other.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: testproc.Timeout})
	require.NoError(t, err, "the lost grant was taken back in the end")

	// A queued key (a waits behind b) whose deletion fails at first.
	fail.Store(3)
	lose.Store(true)
	_, err = m.Acquire(lossyCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
	require.ErrorIs(t, err, lockmgr.ErrUnavailable)
	require.NoError(t, other.Release("r", "b"))
	_, err = other.Acquire(testCtx(t), "r", "c", lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: testproc.Timeout})
	require.NoError(t, err, "the lost queued key was taken back in the end")
	require.NoError(t, other.Release("r", "c"))
	require.Zero(t, fail.Load(), "every failure was used")
}

// TestLostAnswerTTLGrantLeavesNoLedger: an acquisition with a TTL whose
// grant's answer is lost, and whose first deletion of what the grant
// wrote fails too, revokes its lease as it gives up, which deletes the
// granted key but not its ledger (on no lease). The retried deletion
// then compared the key's value, found no key, and stopped: the ledger
// stayed, a hold nobody ever knew of that "ended without its release",
// and the next grant of the resource was told it was inconsistent (and
// the owner got a tombstone). The retry now deletes the ledger by its
// own value, whatever became of the key.
func TestLostAnswerTTLGrantLeavesNoLedger(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	var lose atomic.Bool
	var fail atomic.Int32
	m, other := lossyManager(t, p, &lose, &fail), newManager(t, p)
	fail.Store(1) // the first deletion
	lose.Store(true)
	_, err := m.Acquire(lossyCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: 5 * time.Second})
	require.ErrorIs(t, err, lockmgr.ErrUnavailable)
	require.False(t, lose.Load(), "the answer was lost")
	require.Zero(t, fail.Load(), "the deletion failed")
	testproc.WaitFor(t, func() bool {
		ri, err := other.Inspect("r")
		require.NoError(t, err)
		return len(ri.Holders) == 0 && ri.State == lockmgr.Unlocked
	}, "what the lost grant wrote to be taken back")
	info, err := other.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.False(t, info.Inconsistent, "a grant nobody knew of is no hold that ended unreleased")
	require.NoError(t, other.Release("r", "b"))
}

// TestTakenBackLeavesNoResource: an acquisition that takes back what it
// wrote leaves the resource as it found it: a resource that had no keys
// before is not listed after (Overview, Inspect's version), as after the
// release of its last hold. The take-back deleted the grant's key and
// ledger but kept the version that the grant wrote: the resource stayed
// listed, empty, for good.
func TestTakenBackLeavesNoResource(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	var lose atomic.Bool
	m, other := lossyManager(t, p, &lose, nil), newManager(t, p)
	lose.Store(true)
	_, err := m.Acquire(lossyCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrUnavailable)
	require.False(t, lose.Load(), "the answer was lost")
	o, err := other.Overview()
	require.NoError(t, err)
	require.Empty(t, o.Resources, "a resource without holds or waiters is listed")
	ri, err := other.Inspect("r")
	require.NoError(t, err)
	require.Zero(t, ri.Version, "the version of a resource without keys")
}

// TestTakenBackGrantCounted: a grant that its acquisition took back (its
// answer was lost) was counted as a grant, and its end as nothing: the
// statistics kept a hold that was never active, never released, never
// expired (TotalLocks ran ahead of Released + ExpiredLocks + Reclaimed +
// ActiveLocks for good). The take-back of a grant counts as its release
// (a hold of no time, by the Manager that made it); a queued key taken
// back is no hold and counts nothing.
func TestTakenBackGrantCounted(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{0, 5 * time.Second} {
		p := newPrefix(t)
		var lose atomic.Bool
		var fail atomic.Int32
		m, other := lossyManager(t, p, &lose, &fail), newManager(t, p)
		if ttl > 0 {
			fail.Store(1) // the first deletion: the lease's revocation takes the key, the retry the ledger
		}
		lose.Store(true)
		_, err := m.Acquire(lossyCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: ttl})
		require.ErrorIs(t, err, lockmgr.ErrUnavailable)
		require.False(t, lose.Load(), "the answer was lost")
		testproc.WaitFor(t, func() bool {
			ri, err := other.Inspect("r")
			require.NoError(t, err)
			return len(ri.Holders) == 0
		}, "the grant to be taken back")
		loseQueuedKey(t, m, other, &lose)
		o, err := other.Overview()
		require.NoError(t, err)
		s := o.Stats
		require.Equal(t, uint64(2), s.TotalLocks, "ttl %v", ttl)
		require.Equal(t, s.TotalLocks, s.Released+s.ExpiredLocks+s.Reclaimed+uint64(s.ActiveLocks),
			"ttl %v: every grant ended once (%+v)", ttl, s)
	}
}
