package etcdlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
)

// TestHoldLeaseEndedEarly: an acquisition with a TTL whose own lease
// ends before its grant's transaction (revoked by an operator, or ended
// early by etcd) takes a new lease and is granted, as the shm table,
// whose TTL starts at the grant, grants it; at its first transaction and
// at the grant of a waiter alike. So does a Refresh whose new lease ends
// before its transaction moves the hold onto it. etcd refused the
// transaction (ErrLeaseNotFound) and the call failed with
// ErrSessionLost, which says the Manager must be replaced, though its
// session was alive.
func TestHoldLeaseEndedEarly(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Second
	p := newPrefix(t)
	raw := newClient(t)
	var (
		mu    sync.Mutex
		lease clientv3.LeaseID // the last lease of TTL ttl granted
	)
	var armed atomic.Bool // revoke it before the next transaction that puts on it
	m := interceptedManager(t, p,
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if r, ok := req.(*pb.TxnRequest); ok && putsOn(r, &mu, &lease) && armed.CompareAndSwap(true, false) {
				mu.Lock()
				id := lease
				mu.Unlock()
				if _, err := raw.Revoke(ctx, id); err != nil {
					t.Error(err)
				}
			}
			err := invoker(ctx, method, req, reply, cc, opts...)
			if g, ok := req.(*pb.LeaseGrantRequest); ok && err == nil && g.TTL == int64(ttl/time.Second) {
				mu.Lock()
				lease = clientv3.LeaseID(reply.(*pb.LeaseGrantResponse).ID)
				mu.Unlock()
			}
			return err
		})
	other := newManager(t, p)

	// At the first transaction.
	armed.Store(true)
	info, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: ttl})
	require.NoError(t, err, "granted at once")
	require.False(t, armed.Load(), "the lease was revoked")
	require.Equal(t, ttl, info.Timeout)
	ri, err := other.Inspect("r")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Acquired, ri.State)
	require.NoError(t, m.Release("r", "a"))

	// At the grant of a waiter.
	_, err = other.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	queued, errs := make(chan struct{}), make(chan error, 1)
	var once sync.Once
	go func() {
		_, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: ttl, Retries: lockmgr.RetryForever,
			OnWait: func(lockmgr.LockInfo, time.Duration) { once.Do(func() { close(queued) }) }})
		errs <- err
	}()
	testproc.Receive(t, queued, "a queued")
	armed.Store(true)
	require.NoError(t, other.Release("r", "b"))
	require.NoError(t, testproc.Receive(t, errs, "a's grant"), "granted after its wait")
	require.False(t, armed.Load(), "the lease was revoked")

	// At a Refresh that moves the hold to a new lease of ttl (from one
	// of another TTL).
	_, err = m.Refresh("r", "a", ttl+time.Second)
	require.NoError(t, err)
	armed.Store(true)
	info, err = m.Refresh("r", "a", ttl)
	require.NoError(t, err, "refreshed onto a second new lease")
	require.False(t, armed.Load(), "the new lease was revoked")
	require.Equal(t, ttl, info.Timeout)
	ri, err = other.Inspect("r")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Acquired, ri.State)
	require.NoError(t, m.Release("r", "a"))
}

// putsOn reports whether the transaction r would put a key on *lease
// (in any branch).
func putsOn(r *pb.TxnRequest, mu *sync.Mutex, lease *clientv3.LeaseID) bool {
	mu.Lock()
	id := int64(*lease)
	mu.Unlock()
	var walk func(ops []*pb.RequestOp) bool
	walk = func(ops []*pb.RequestOp) bool {
		for _, op := range ops {
			if p := op.GetRequestPut(); p != nil && id != 0 && p.Lease == id {
				return true
			}
			if t := op.GetRequestTxn(); t != nil && (walk(t.Success) || walk(t.Failure)) {
				return true
			}
		}
		return false
	}
	return walk(r.Success) || walk(r.Failure)
}
