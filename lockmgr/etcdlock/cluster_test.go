package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/etcdtest"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// TestLeaderFailover stops the leader of a 3-member cluster while locks
// are held and waited on: after the election the holds are still held
// (their sessions' leases live on), the waiters still wait, and each is
// granted, with a higher version, only when its holder releases.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	c, err := etcdtest.Start(t.TempDir(), 3)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	// The session outlives an election (500 ms here) several times over:
	// etcd also extends every lease by the election's length.
	const sessionTTL = 5 * time.Second
	p := newPrefix(t)
	newM := func() *etcdlock.Manager {
		ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
		defer cancel()
		m, err := etcdlock.New(ctx, newClient(t, c.Endpoints()...), etcdlock.Options{Prefix: p, SessionTTL: sessionTTL})
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
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
	select {
	case <-holder.Done():
		t.Fatal("the holder's session ended in the election")
	default:
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
