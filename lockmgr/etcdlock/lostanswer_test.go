package etcdlock_test

import (
	"context"
	"errors"
	"strings"
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

// lossyManager is a Manager whose client loses the answer of its next
// transaction once *lose is set: the server commits it, the caller sees
// an error, as when a request's context ends or the connection breaks
// after the request was sent.
func lossyManager(t *testing.T, prefix string, lose *atomic.Bool) *etcdlock.Manager {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: server.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				err := invoker(ctx, method, req, reply, cc, opts...)
				if err == nil && strings.HasSuffix(method, "/Txn") && lose.CompareAndSwap(true, false) {
					return errors.New("test: the answer was lost")
				}
				return err
			})}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
	defer cancel()
	m, err := etcdlock.New(ctx, cli, etcdlock.Options{Prefix: prefix, SessionTTL: testSessionTTL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// TestLostAnswerKeepsOthersHold: an acquisition whose first request
// fails without an answer takes back what that request may have written,
// and only that: the owner's hold that was there before (the request found
// it: ErrAlreadyHeld) stays, and nobody else is granted the resource.
func TestLostAnswerKeepsOthersHold(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	var lose atomic.Bool
	m, other := lossyManager(t, p, &lose), newManager(t, p)
	for _, mode := range []lockmgr.Mode{lockmgr.Exclusive, lockmgr.Collaborative} {
		_, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.NoError(t, err)
		lose.Store(true)
		_, err = m.Acquire(testCtx(t), "r", "a", mode, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
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
	_, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrUnavailable)
	ri, err := other.Inspect("r")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Unlocked, ri.State, "the lost grant was taken back")
	_, err = other.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	lose.Store(true)
	_, err = m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
	require.ErrorIs(t, err, lockmgr.ErrUnavailable)
	require.NoError(t, other.Release("r", "b"))
	_, err = other.Acquire(testCtx(t), "r", "c", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err, "the lost queued key was taken back")
	require.NoError(t, other.Release("r", "c"))
}
