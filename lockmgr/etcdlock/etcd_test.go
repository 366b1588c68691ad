package etcdlock_test

import (
	"context"
	"math"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// TestFIFO: exclusive waiters are granted in the order they queued, each
// woken by the release of the one before it.
func TestFIFO(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	m := newManager(t, p)
	_, err := m.Acquire(testCtx(t), "r", "first", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	const waiters = 5
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i := range waiters {
		owner := string(rune('a' + i))
		w := newManager(t, p)
		queued := make(chan struct{})
		var once sync.Once
		wg.Go(func() {
			opts := lockmgr.AcquireOptions{Retries: lockmgr.RetryForever,
				OnWait: func(lockmgr.LockInfo, time.Duration) { once.Do(func() { close(queued) }) }}
			_, err := w.Acquire(testCtx(t), "r", owner, lockmgr.Exclusive, opts)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, owner)
			mu.Unlock()
			if err := w.Release("r", owner); err != nil {
				t.Error(err)
			}
		})
		testproc.Receive(t, queued, "waiter "+owner+" queued")
	}
	require.NoError(t, m.Release("r", "first"))
	wg.Wait()
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, order)
}

// TestLost: a hold's Lost channel closes when its TTL runs out without a
// Refresh, and when it is released; a Refresh keeps it open.
func TestLost(t *testing.T) {
	t.Parallel()
	m := newManager(t, newPrefix(t))
	_, err := m.Lost("r", "a")
	require.ErrorIs(t, err, lockmgr.ErrLockNotHeld)

	// Refreshed every tenth of the TTL, eleven times: the hold outlives
	// its first TTL. A Refresh may come up to 4s late (the TTL less its
	// margin, less the sleep) before the hold is rightly lost in between;
	// with MinTTL and a refresh every half TTL that was 400ms, which a
	// loaded machine overran, and with 5s every half TTL it was 2s.
	const ttl, refreshes = 5 * time.Second, 11
	_, err = m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: ttl})
	require.NoError(t, err)
	lost, err := m.Lost("r", "a")
	require.NoError(t, err)
	for range refreshes {
		_, err := m.Refresh("r", "a", ttl)
		require.NoError(t, err)
		select {
		case <-lost:
			t.Fatal("lost while refreshed")
		default:
		}
		time.Sleep(ttl / 10)
	}
	testproc.Receive(t, lost, "the lost signal of an expired hold")
	// The signal comes no later than etcd's expiry (it counts from when
	// the renewal was sent); once etcd expired the hold too, the late
	// release is told.
	testproc.WaitFor(t, func() bool {
		ri, err := m.Inspect("r")
		require.NoError(t, err)
		return ri.State == lockmgr.Expired
	}, "etcd to expire the hold")
	require.ErrorIs(t, m.Release("r", "a"), lockmgr.ErrLockTimeout)

	_, err = m.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	lost, err = m.Lost("r", "b")
	require.NoError(t, err)
	require.NoError(t, m.Release("r", "b"))
	testproc.Receive(t, lost, "the lost signal of a released hold")
}

// TestLeaseLimits: a TTL is whole seconds, rounded up, at least MinTTL and
// at most MaxTTL (beyond it etcd's refusal was reported ErrUnavailable).
func TestLeaseLimits(t *testing.T) {
	t.Parallel()
	m := newManager(t, newPrefix(t))
	_, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: etcdlock.MinTTL / 2})
	require.ErrorIs(t, err, lockmgr.ErrBadOptions)
	for _, ttl := range []time.Duration{etcdlock.MaxTTL + time.Second, math.MaxInt64} {
		_, err = m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: ttl})
		require.ErrorIs(t, err, lockmgr.ErrBadOptions, "ttl %v", ttl)
	}
	info, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: 1500 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, info.Timeout)
	_, err = m.Refresh("r", "a", time.Millisecond)
	require.ErrorIs(t, err, lockmgr.ErrBadOptions)
	_, err = m.Refresh("r", "a", math.MaxInt64)
	require.ErrorIs(t, err, lockmgr.ErrBadOptions)
	require.NoError(t, m.Release("r", "a"))
	_, err = etcdlock.New(testCtx(t), newClient(t), etcdlock.Options{SessionTTL: time.Millisecond})
	require.ErrorIs(t, err, lockmgr.ErrBadOptions)
	_, err = etcdlock.New(testCtx(t), nil, etcdlock.Options{})
	require.ErrorIs(t, err, lockmgr.ErrBadOptions)
}

// TestClose: closing a Manager ends its holds at once (its session's lease
// is revoked), waking their waiters; the closed Manager refuses work.
func TestClose(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	m, other := newManager(t, p), newManager(t, p)
	_, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	lost, err := m.Lost("r", "a")
	require.NoError(t, err)
	ch := make(chan lockmgr.LockInfo, 1)
	go func() {
		info, err := other.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
		if err != nil {
			t.Error(err)
		}
		ch <- info
	}()
	testproc.WaitFor(t, func() bool {
		o, err := other.Overview()
		require.NoError(t, err)
		return o.Stats.ConflictsDetected == 1
	}, "the waiter to queue")
	require.NoError(t, m.Close())
	testproc.Receive(t, lost, "the lost signal at Close")
	info := testproc.Receive(t, ch, "the waiter's grant")
	require.True(t, info.Reclaimed, "the closed Manager's hold ended without its release")
	_, err = m.Acquire(testCtx(t), "r2", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrSessionLost)

	// A waiter whose Manager closes stops waiting, and leaves no key.
	third := newManager(t, p)
	errs := make(chan error, 1)
	go func() {
		_, err := third.Acquire(testCtx(t), "r", "c", lockmgr.Exclusive, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
		errs <- err
	}()
	testproc.WaitFor(t, func() bool {
		o, err := other.Overview()
		require.NoError(t, err)
		return o.Stats.ConflictsDetected == 2
	}, "the second waiter to queue")
	require.NoError(t, third.Close())
	require.ErrorIs(t, testproc.Receive(t, errs, "the closed waiter's end"), lockmgr.ErrSessionLost)
	require.NoError(t, other.Release("r", "b"))
	_, err = other.Acquire(testCtx(t), "r", "d", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err, "nothing is left queued")
	require.NoError(t, other.Release("r", "d"))
}

// TestServerStaysOutOfTheLibrary: the etcd server is a test dependency;
// the library, shmctl and the shm-only packages do not link it, and the
// shm-only packages link no etcd at all.
func TestServerStaysOutOfTheLibrary(t *testing.T) {
	t.Parallel()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	deps := func(pkgs ...string) string {
		out, err := exec.Command(goTool, append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	lib := deps("github.com/shmlock/shmlock/lockmgr/etcdlock")
	require.Contains(t, lib, "go.etcd.io/etcd/client/v3\n")
	require.NotContains(t, lib, "go.etcd.io/etcd/server")
	cli := deps("github.com/shmlock/shmlock/cmd/shmctl")
	require.Contains(t, cli, "go.etcd.io/etcd/client/v3\n", "shmctl lock --etcd")
	require.NotContains(t, cli, "go.etcd.io/etcd/server")
	require.NotContains(t, deps("github.com/shmlock/shmlock/lockmgr"), "go.etcd.io")
}

// An OnWait that panics ends its acquisition, and the acquisition leaves
// the queue on its way out: before, its queued key (on the session's
// lease) stayed, and every later waiter of the resource waited behind it
// until that Manager's session ended.
func TestPanickingOnWaitLeavesTheQueue(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	holder, waiter, next := newManager(t, p), newManager(t, p), newManager(t, p)
	_, err := holder.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	func() {
		defer func() { require.Equal(t, "OnWait", recover(), "the panic goes on") }()
		_, _ = waiter.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{
			Retries: lockmgr.RetryForever,
			OnWait:  func(lockmgr.LockInfo, time.Duration) { panic("OnWait") },
		})
	}()
	require.NoError(t, holder.Release("r", "a"))
	_, err = next.Acquire(testCtx(t), "r", "c", lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: testproc.Timeout})
	require.NoError(t, err, "granted behind the panicked waiter's queued key")
	require.NoError(t, next.Release("r", "c"))
}
