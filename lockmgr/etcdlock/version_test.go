package etcdlock_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// hookedManager is a Manager whose client calls *hook (once, if set)
// before it sends a request that match accepts.
func hookedManager(t *testing.T, prefix string, match func(req any) bool, hook *atomic.Pointer[func()]) *etcdlock.Manager {
	t.Helper()
	return interceptedManager(t, prefix,
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if match(req) {
				if f := hook.Swap(nil); f != nil {
					(*f)()
				}
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})
}

// TestVersionAfterOrphanRecordedMeanwhile: a grant that finds the ledger
// of a hold whose lease expired records the hold's end, which moves the
// version; when the expired owner's late Release records it first, after
// the grant's transaction but before the grant's own recording, the
// grant reported its transaction's revision as its version, below the
// resource's current version (the late Release's). The holder's own
// CheckVersion then failed with ErrVersionConflict while it held and
// nothing had happened since its grant but the news of an end that came
// before it.
func TestVersionAfterOrphanRecordedMeanwhile(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	var hook atomic.Pointer[func()]
	a := newManager(t, p)
	b := hookedManager(t, p, func(req any) bool {
		r, ok := req.(*pb.RangeRequest)
		return ok && string(r.Key) == p+"r/r/l/a"
	}, &hook)
	_, err := a.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: etcdlock.MinTTL})
	require.NoError(t, err)
	testproc.WaitFor(t, func() bool {
		ri, err := b.Inspect("r")
		require.NoError(t, err)
		return ri.State == lockmgr.Expired
	}, "the hold to expire")
	late := make(chan error, 1)
	f := func() { late <- a.Release("r", "a") }
	hook.Store(&f)
	info, err := b.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.ErrorIs(t, testproc.Receive(t, late, "the late release"), lockmgr.ErrLockTimeout)
	require.True(t, info.Inconsistent)
	require.NoError(t, b.CheckVersion("r", info.Version), "the holder's own version, nothing granted or ended since")
	require.NoError(t, b.Release("r", "b"))
	require.ErrorIs(t, b.CheckVersion("r", info.Version), lockmgr.ErrVersionConflict)
}
