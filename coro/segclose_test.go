package coro_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

// closeKind is a ProcessLock that coro adapts, opened on one handle of a
// segment, and how another handle on the same file counts its sleepers.
type closeKind struct {
	name string
	open func(t *testing.T, seg *shm.Segment) (lock coro.ProcessLock, sleepers func(t *testing.T, other *shm.Segment) int)
	// ready skips the case while the lock itself does not yet fail with
	// shm.ErrClosed after Close; nil for the locks that do.
	ready func(t *testing.T, path string)
}

var closeKinds = []closeKind{
	{"spinlock PIDTID", openSpinKind(spinlock.PIDTID), nil},
	{"spinlock Token", openSpinKind(spinlock.Token), nil},
	{"upgrade unique", openUpgradeKind(coro.UpgradeUnique), upgradeReportsClosed},
	{"upgrade upgradable", openUpgradeKind(coro.UpgradeUpgradable), upgradeReportsClosed},
}

// upgradeReportsClosed skips a case over package upgrade while its Mutex
// does not fail with shm.ErrClosed after its segment's Close: coro only
// delegates, so until then its ProcessMutex cannot either. That change to
// package upgrade is made apart from this test (branch s5b); the cases run
// by themselves once it is in, and this check can go then.
func upgradeReportsClosed(t *testing.T, path string) {
	t.Helper()
	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	h, err := upgrade.Named(seg, rwName+"-probe")
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	err = h.TryLock()
	_ = h.Close()
	if !errors.Is(err, shm.ErrClosed) {
		t.Skipf("upgrade.Mutex.TryLock after its segment's Close returned %v, not shm.ErrClosed: package upgrade lacks that change (branch s5b)", err)
	}
}

func openSpinKind(mode spinlock.Mode) func(*testing.T, *shm.Segment) (coro.ProcessLock, func(*testing.T, *shm.Segment) int) {
	return func(t *testing.T, seg *shm.Segment) (coro.ProcessLock, func(*testing.T, *shm.Segment) int) {
		l, err := spinlock.Named(seg, lockName, mode)
		require.NoError(t, err)
		return coro.SpinLock(l), func(t *testing.T, other *shm.Segment) int {
			o, err := spinlock.Named(other, lockName, mode)
			require.NoError(t, err)
			return int(o.Slot().Sleepers())
		}
	}
}

func openUpgradeKind(adapt func(*upgrade.Mutex) coro.ProcessLock) func(*testing.T, *shm.Segment) (coro.ProcessLock, func(*testing.T, *shm.Segment) int) {
	return func(t *testing.T, seg *shm.Segment) (coro.ProcessLock, func(*testing.T, *shm.Segment) int) {
		h, err := upgrade.Named(seg, rwName)
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.Close() })
		return adapt(h), func(t *testing.T, other *shm.Segment) int {
			st, err := upgrade.Inspect(other, h.Index())
			require.NoError(t, err)
			return int(st.SharedWaiters + st.UniqueWaiters + st.WriterWaiters)
		}
	}
}

// openClosable opens the segment at path for a handle that the test
// closes (the cleanup's second Close is harmless), and a ProcessMutex of
// kind k on it.
func openClosable(t *testing.T, path string, k closeKind) (*shm.Segment, *coro.ProcessMutex, func(*testing.T, *shm.Segment) int) {
	t.Helper()
	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	lock, sleepers := k.open(t, seg)
	return seg, coro.NewProcessMutex(lock), sleepers
}

// ProcessMutex only delegates to its ProcessLock, and the locks coro
// adapts fail with shm.ErrClosed once their segment is closed: so does
// every operation of a ProcessMutex over them, and none changes the file.
// The hold taken before Close stays in the file (another handle cannot
// take the lock), while the ProcessMutex's own queue is freed by the
// failed Unlock, so that later calls fail with shm.ErrClosed rather than
// wait for this process's earlier hold.
func TestProcessMutexAfterSegmentClose(t *testing.T) {
	t.Parallel()
	for _, k := range closeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			path := newProcessSegment(t)
			if k.ready != nil {
				k.ready(t, path)
			}
			seg, m, _ := openClosable(t, path, k)
			ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
			defer cancel()
			g, err := m.Lock(ctx)
			require.NoError(t, err)
			loop := coro.NewLoop()
			defer closeLoop(t, loop)

			before, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, seg.Close())
			require.ErrorIs(t, g.Unlock(), shm.ErrClosed, "Unlock of the hold taken before Close")
			require.False(t, g.Held())
			ops := []struct {
				name string
				op   func() error
			}{
				{"Lock", func() error { _, err := m.Lock(ctx); return err }},
				{"TryLock", func() error { _, err := m.TryLock(); return err }},
				{"LockOn", func() error {
					ch := make(chan error, 1)
					if err := m.LockOn(ctx, loop, func(_ coro.ProcessGuard, err error) { ch <- err }); err != nil {
						return err
					}
					return <-ch
				}},
			}
			for _, o := range ops {
				require.ErrorIs(t, o.op(), shm.ErrClosed, o.name)
			}
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, bytes.Equal(before, after), "the file changed after Close")

			_, om, _ := openClosable(t, path, k)
			_, err = om.TryLock()
			require.ErrorIs(t, err, coro.ErrWouldBlock, "Close does not release the hold in the file")
		})
	}
}

// Goroutines waiting on a ProcessMutex when its segment closes return
// shm.ErrClosed: the one asleep in the cross-process lock at its next
// liveness check, those queued behind it in this process (a Lock and a
// LockOn) when their turn comes. None of them takes the lock in the
// file: once the other handle lets go, the lock is free there.
func TestProcessMutexCloseEndsAWait(t *testing.T) {
	t.Parallel()
	for _, k := range closeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			path := newProcessSegment(t)
			if k.ready != nil {
				k.ready(t, path)
			}
			other, om, _ := openClosable(t, path, k)
			seg, m, sleepers := openClosable(t, path, k)
			ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
			defer cancel()
			og, err := om.Lock(ctx)
			require.NoError(t, err)
			loop := coro.NewLoop()
			defer closeLoop(t, loop)

			results := make(chan error, 3)
			lockAsync := func() {
				go func() {
					g, err := m.Lock(ctx)
					if err == nil {
						_ = g.Unlock()
					}
					results <- err
				}()
			}
			lockAsync()
			testproc.WaitFor(t, func() bool { return sleepers(t, other) == 1 }, "the front waiter to sleep")
			lockAsync()
			require.NoError(t, m.LockOn(ctx, loop, func(g coro.ProcessGuard, err error) {
				if err == nil {
					_ = g.Unlock()
				}
				results <- err
			}))
			require.NoError(t, seg.Close())
			for range 3 {
				select {
				case err := <-results:
					require.ErrorIs(t, err, shm.ErrClosed)
				case <-ctx.Done():
					t.Fatal("a waiter did not return after Close")
				}
			}

			require.NoError(t, og.Unlock(), "the other handle's hold is intact")
			og, err = om.TryLock()
			require.NoError(t, err, "the lock is free in the file")
			require.NoError(t, og.Unlock())
		})
	}
}
