package etcdlock_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/shmlock/shmlock/internal/etcdtest"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// server is the embedded etcd the tests share, started once by TestMain
// on free loopback ports, its data in a temporary directory removed at
// the end. Every test works under a prefix of its own.
var server *etcdtest.Cluster

func TestMain(m *testing.M) {
	testproc.MainWith(m, helpers, func() (func(), error) {
		dir, err := os.MkdirTemp("", "etcdlock-test-")
		if err != nil {
			return nil, err
		}
		c, err := etcdtest.Start(dir, 1)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		server = c
		return func() { c.Close(); _ = os.RemoveAll(dir) }, nil
	})
}

var helpers = map[string]func(args []string) int{
	"counter": counterHelper, // ENDPOINT PREFIX DIR OWNER ITERS
	"hold":    holdHelper,    // ENDPOINT PREFIX RESOURCE OWNER
	"queue":   queueHelper,   // ENDPOINT PREFIX RESOURCE OWNER
}

var prefixSeq atomic.Uint64

// newPrefix is a key prefix no other test uses.
func newPrefix(tb testing.TB) string {
	return fmt.Sprintf("test-%d-%d/", os.Getpid(), prefixSeq.Add(1))
}

// newClient is a client of the test server, closed when tb ends.
func newClient(tb testing.TB, endpoints ...string) *clientv3.Client {
	tb.Helper()
	if len(endpoints) == 0 {
		endpoints = server.Endpoints()
	}
	c, err := etcdtest.Client(endpoints...)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// testSessionTTL is the session of a holder the test kills or cuts off
// from etcd, or whose keep-alive it stops: its hold is kept for 2 s only.
// A shorter one risks the session of a live but descheduled process.
const testSessionTTL = 2 * time.Second

// liveSessionTTL is the session of every other Manager: one the test needs
// to the end. With testSessionTTL, a test process that the race detector
// and a loaded machine stalled for a second or two lost it (ErrSessionLost
// in tests that never meant to end a session).
const liveSessionTTL = testproc.Timeout

// interceptedManager is newManager with a client whose every unary
// request goes through intercept (to count, delay or lose requests).
func interceptedManager(tb testing.TB, prefix string, intercept grpc.UnaryClientInterceptor) *etcdlock.Manager {
	tb.Helper()
	return dialedManager(tb, prefix, liveSessionTTL, grpc.WithChainUnaryInterceptor(intercept))
}

// dialedManager is newManager with a session of ttl and a client dialed
// with opts (an interceptor of streams, say: a keep-alive is one).
func dialedManager(tb testing.TB, prefix string, ttl time.Duration, opts ...grpc.DialOption) *etcdlock.Manager {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: server.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: opts})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
	defer cancel()
	m, err := etcdlock.New(ctx, cli, etcdlock.Options{Prefix: prefix, SessionTTL: ttl})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = m.Close() })
	return m
}

// newManager is a Manager on prefix with a client of its own (as another
// process would have), closed when tb ends.
func newManager(tb testing.TB, prefix string) *etcdlock.Manager {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
	defer cancel()
	m, err := etcdlock.New(ctx, newClient(tb), etcdlock.Options{Prefix: prefix, SessionTTL: liveSessionTTL})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = m.Close() })
	return m
}
