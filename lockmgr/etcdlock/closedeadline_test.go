package etcdlock_test

import (
	"context"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// TestCloseUnreachableOneDeadline: Close, with etcd unreachable once the
// keep-alive gave up, gives all its requests one deadline, so that it
// takes one RequestTimeout in all. Before, the revocation of the session
// and the fold of the hold time each had a timeout of their own, one
// after the other: Close took two. The deadlines are compared, not the
// time Close took.
func TestCloseUnreachableOneDeadline(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(server.Members[0].Endpoint)
	require.NoError(t, err)
	var cut, closing atomic.Bool
	var mu sync.Mutex
	var deadlines []time.Time // of the requests made by Close; zero: none
	record := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if closing.Load() {
			dl, _ := ctx.Deadline()
			mu.Lock()
			deadlines = append(deadlines, dl)
			mu.Unlock()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{blackhole(t, u.Host, &cut)}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(record)}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	m, err := etcdlock.New(testCtx(t), cli, etcdlock.Options{Prefix: newPrefix(t), SessionTTL: testSessionTTL, RequestTimeout: time.Second})
	require.NoError(t, err)
	// A release, so that Close has a hold time to fold.
	_, err = m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.NoError(t, m.Release("r", "a"))

	cut.Store(true)
	testproc.Receive(t, m.Done(), "the session given up")
	testproc.Receive(t, etcdlock.Stopped(m), "the keep-alive's end")
	closing.Store(true)
	require.ErrorIs(t, m.Close(), lockmgr.ErrUnavailable)
	closing.Store(false)

	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(deadlines), 2, "the revocation and the fold")
	for i, dl := range deadlines {
		require.False(t, dl.IsZero(), "request %d of Close has no deadline", i)
		require.True(t, dl.Equal(deadlines[0]), "request %d of Close: got deadline %v, want %v, the first's", i, dl, deadlines[0])
	}
}
