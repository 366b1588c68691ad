package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// queueHelper queues for RESOURCE (exclusive, no TTL: on its session),
// prints "queued" once its key is in the queue, and waits to be killed.
// Args: ENDPOINT PREFIX RESOURCE OWNER.
func queueHelper(args []string) int {
	m, done, err := helperManager(args[0], args[1], liveSessionTTL) // killed: the test revokes its session
	if err != nil {
		return fail("%v", err)
	}
	defer done()
	var once sync.Once
	_, err = m.Acquire(context.Background(), args[2], args[3], lockmgr.Exclusive, lockmgr.AcquireOptions{
		Retries: lockmgr.RetryForever,
		OnWait:  func(lockmgr.LockInfo, time.Duration) { once.Do(func() { fmt.Println("queued") }) },
	})
	return fail("not killed: the acquisition ended (%v)", err)
}

// TestDeadWaiterLeavesNoResource: a waiter that dies in the queue
// (kill -9: its key goes with its session's lease, with nobody to take it
// back) leaves nothing behind once the holder it waited for has released.
// The release kept the resource's version for the waiter's sake, and
// nobody deleted it after the waiter's key went: the resource stayed
// listed (Overview, Inspect's version), empty, for good.
func TestDeadWaiterLeavesNoResource(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	m := newManager(t, p)
	_, err := m.Acquire(testCtx(t), "r", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	waiter := testproc.Start(t, "queue", server.Members[0].Endpoint, p, "r", "waiter")
	waiter.WaitLine(t, "queued")
	waiter.Kill(t)
	require.NoError(t, m.Release("r", "holder"))
	requireNothingLeftAfterDeadWaiter(t, m, p)
}

// requireNothingLeftAfterDeadWaiter ends the session of the dead waiter
// queued for r under prefix p and checks that nothing of r is left.
func requireNothingLeftAfterDeadWaiter(t *testing.T, m *etcdlock.Manager, p string) {
	t.Helper()
	// etcd ends the dead waiter's session: now rather than a TTL later,
	// as its lessor would.
	cli := newClient(t)
	resp, err := cli.Get(testCtx(t), p+"r/r/h/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, "the dead waiter's key")
	_, err = cli.Revoke(testCtx(t), clientv3.LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)

	o, err := m.Overview()
	require.NoError(t, err)
	require.Empty(t, o.Resources, "a resource without holds or waiters is listed")
	ri, err := m.Inspect("r")
	require.NoError(t, err)
	require.Zero(t, ri.Version, "the version of a resource without keys")
	all, err := cli.Get(testCtx(t), p+"r/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	require.Empty(t, all.Kvs, "keys left under the resources")
}

// TestTakenBackBeforeDeadWaiterLeavesNoResource: the same after a grant
// that its acquisition took back (its answer was lost) while a waiter had
// queued behind it, the waiter then killed: the take-back deleted the
// version only if no key at all was left, so it kept it for the waiter,
// and the resource stayed listed, empty, once the waiter's key went.
func TestTakenBackBeforeDeadWaiterLeavesNoResource(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	lost := false
	m := interceptedManager(t, p, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil || !strings.HasSuffix(method, "/Txn") || ctx.Value(lossyKey{}) == nil || lost {
			return err
		}
		// The grant is in etcd, its answer not yet back: a waiter queues
		// behind it and dies.
		lost = true
		waiter := testproc.Start(t, "queue", server.Members[0].Endpoint, p, "r", "waiter")
		waiter.WaitLine(t, "queued")
		waiter.Kill(t)
		return errors.New("test: the answer was lost")
	})
	_, err := m.Acquire(lossyCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrUnavailable)
	require.True(t, lost, "the grant's answer was lost")
	requireNothingLeftAfterDeadWaiter(t, m, p)
}
