package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/shmlock/shmlock/internal/etcdtest"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// TestLeaderFailover stops the leader of a 3-member cluster while locks
// are held and waited on: after the election the holds are still held
// (their sessions' leases live on, renewed by the new leader), the waiters
// still wait, and each is granted, with a higher version, only when its
// holder releases.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	c, err := etcdtest.Start(t.TempDir(), 3)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	p := newPrefix(t)
	// Each session's keep-alives must go on across the election: one sent
	// after the leader's stop is answered with a TTL, by the new leader
	// (renewals[i] closes). The sessions are the long ones of the other
	// tests (liveSessionTTL), so that a renewal late on a loaded machine is
	// no failure: with 5 s ones a -race run at load 13 lost a session
	// (SESSION_LOST), and yet the test ended before a session whose
	// keep-alives had stopped at the election would have ended, so it
	// never showed that they went on.
	var stopped atomic.Bool
	var renewals []<-chan struct{}
	newM := func() *etcdlock.Manager {
		renewed := make(chan struct{})
		var once sync.Once
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
				func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
					s, err := streamer(ctx, desc, cc, method, opts...)
					if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") || !stopped.Load() {
						return s, err
					}
					return renewalStream{ClientStream: s, renewed: func() { once.Do(func() { close(renewed) }) }}, nil
				})}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cli.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
		defer cancel()
		m, err := etcdlock.New(ctx, cli, etcdlock.Options{Prefix: p, SessionTTL: liveSessionTTL})
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		renewals = append(renewals, renewed)
		return m
	}
	holder, waiter, reader, joiner := newM(), newM(), newM(), newM()
	ctx := testCtx(t)
	x, err := holder.Acquire(ctx, "x", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	r, err := reader.Acquire(ctx, "doc", "reader", lockmgr.Collaborative, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	type result struct {
		info lockmgr.LockInfo
		err  error
	}
	wait := func(m *etcdlock.Manager, res, owner string, mode lockmgr.Mode) <-chan result {
		queued, ch := make(chan struct{}), make(chan result, 1)
		closed := false
		go func() {
			info, err := m.Acquire(ctx, res, owner, mode, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever,
				OnWait: func(lockmgr.LockInfo, time.Duration) {
					if !closed {
						closed = true
						close(queued)
					}
				}})
			ch <- result{info, err}
		}()
		testproc.Receive(t, queued, owner+" queued")
		return ch
	}
	xw := wait(waiter, "x", "waiter", lockmgr.Exclusive)
	dw := wait(joiner, "doc", "writer", lockmgr.Exclusive)

	leader := c.Leader()
	require.NotNil(t, leader)
	c.Stop(leader)
	stopped.Store(true)
	// Past the election, the cluster answers again: a Refresh succeeds
	// (the requests in between may fail as unavailable, never otherwise).
	testproc.WaitFor(t, func() bool {
		_, err := holder.Refresh("x", "holder", 0)
		if err != nil && !errors.Is(err, lockmgr.ErrUnavailable) {
			t.Fatalf("refresh across the election: %v", err)
		}
		return err == nil
	}, "a leader to be elected")
	require.NotNil(t, c.Leader())
	require.NotEqual(t, leader, c.Leader())

	// Nobody got in while the holders hold.
	for _, ch := range []<-chan result{xw, dw} {
		select {
		case got := <-ch:
			t.Fatalf("granted while held: %+v, %v", got.info, got.err)
		default:
		}
	}
	for _, res := range []string{"x", "doc"} {
		ri, err := waiter.Inspect(res)
		require.NoError(t, err)
		require.Len(t, ri.Holders, 1, res)
		require.Equal(t, lockmgr.Acquired, ri.Holders[0].State, res)
	}
	for i, m := range []*etcdlock.Manager{holder, waiter, reader, joiner} {
		who := []string{"holder", "waiter", "reader", "joiner"}[i]
		testproc.Receive(t, renewals[i], "the "+who+"'s session renewed after the election")
		select {
		case <-m.Done():
			t.Fatalf("the %s's session ended in the election", who)
		default:
		}
	}

	require.NoError(t, holder.Release("x", "holder"))
	got := testproc.Receive(t, xw, "the exclusive waiter's grant")
	require.NoError(t, got.err)
	require.Greater(t, got.info.Version, x.Version)
	require.False(t, got.info.Reclaimed)
	require.NoError(t, reader.Release("doc", "reader"))
	got = testproc.Receive(t, dw, "the writer's grant")
	require.NoError(t, got.err)
	require.Greater(t, got.info.Version, r.Version)
	require.NoError(t, waiter.Release("x", "waiter"))
	require.NoError(t, joiner.Release("doc", "writer"))
}

// renewalStream is a keep-alive stream that calls renewed when etcd
// answers that it renewed the lease.
type renewalStream struct {
	grpc.ClientStream
	renewed func()
}

func (s renewalStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*pb.LeaseKeepAliveResponse); ok && err == nil && r.TTL > 0 {
		s.renewed()
	}
	return err
}
