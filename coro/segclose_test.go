package coro_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

// closeKind is a ProcessLock that coro adapts, opened on one handle of a
// segment, and how another handle on the same file counts its sleepers.
type closeKind struct {
	name string
	open func(t *testing.T, seg *shm.Segment) (lock coro.ProcessLock, sleepers func(t *testing.T, other *shm.Segment) int)
}

var closeKinds = []closeKind{
	{"spinlock PIDTID", openSpinKind(spinlock.PIDTID)},
	{"spinlock Token", openSpinKind(spinlock.Token)},
	{"upgrade unique", openUpgradeKind(coro.UpgradeUnique)},
	{"upgrade upgradable", openUpgradeKind(coro.UpgradeUpgradable)},
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
// adapts fail every acquisition with shm.ErrClosed once their segment is
// closed: so does every acquisition of a ProcessMutex over them, and none
// changes the file. The hold taken before Close stays in the file until
// it is released: the release still reaches the file (another handle can
// take the lock then), and the holder's MarkConsistent still works before
// it.
func TestProcessMutexAfterSegmentClose(t *testing.T) {
	t.Parallel()
	for _, k := range closeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			path := newProcessSegment(t)
			seg, m, _ := openClosable(t, path, k)
			ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
			defer cancel()
			g, err := m.Lock(ctx)
			require.NoError(t, err)
			loop := coro.NewLoop()
			defer closeLoop(t, loop)

			require.NoError(t, seg.Close())
			_, om, _ := openClosable(t, path, k)
			_, err = om.TryLock()
			require.ErrorIs(t, err, coro.ErrWouldBlock, "Close does not release the hold in the file")
			var markWant error // the holder's say-so works after Close, as Unlock does
			if k.name == "upgrade upgradable" {
				markWant = upgrade.ErrNotHeld // before Close too: not the unique holder
			}
			require.ErrorIs(t, g.MarkConsistent(), markWant, "MarkConsistent after Close")
			require.NoError(t, g.Unlock(), "Unlock of the hold taken before Close")
			require.False(t, g.Held())
			before, err := os.ReadFile(path)
			require.NoError(t, err)
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
			require.True(t, bytes.Equal(before, after), "an acquisition after Close changed the file")

			og, err := om.TryLock()
			require.NoError(t, err, "the release reached the file")
			require.NoError(t, og.Unlock())
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
			testproc.WaitFor(t, func() bool { return coro.Waiters(coro.ProcessLocal(m)) == 2 },
				"the Lock and the LockOn to queue behind the front waiter")
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

// A ProcessMutex's Close closes its lock's handle, which gives the name
// back: the segment's claim of it goes once the lock is free.
func TestProcessMutexCloseGivesTheNameBack(t *testing.T) {
	t.Parallel()
	for _, k := range closeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			path := newProcessSegment(t)
			seg, m, _ := openClosable(t, path, k)
			g, err := m.TryLock()
			require.NoError(t, err)
			require.NoError(t, g.Unlock())
			before := claimCount(t, seg)
			require.NoError(t, m.Close())
			require.Equal(t, before-1, claimCount(t, seg), "the handle's claim went with its Close")
			_, err = m.TryLock()
			require.Error(t, err, "a closed handle locks nothing")
		})
	}
}

// claimCount is the number of claims, of owner slots and upgrade mutexes.
func claimCount(t *testing.T, seg *shm.Segment) int {
	t.Helper()
	n := 0
	for _, k := range []layout.Kind{layout.KindOwnerSlots, layout.KindUpgrades} {
		c, err := seg.Claims(k)
		require.NoError(t, err)
		n += len(c)
	}
	return n
}

// Once the handle under a ProcessMutex is closed (ProcessMutex.Close), or
// its segment, every locking method fails with the handle's error, again
// at each call, and takes nothing: the handle's own ErrClosed (spinlock's
// ErrLockClosed, upgrade's ErrClosed), or shm.ErrClosed for the segment. A
// Reclaim over a spinlock in Token mode, which cannot tell, says so first.
// The file is as it was. A second Close is the handle's ErrClosed.
func TestProcessMutexAfterClose(t *testing.T) {
	t.Parallel()
	for _, k := range closeKinds {
		handleErr := upgrade.ErrClosed
		if strings.HasPrefix(k.name, "spinlock") {
			handleErr = spinlock.ErrLockClosed
		}
		for _, closed := range []string{"handle", "segment"} {
			t.Run(k.name+"/"+closed, func(t *testing.T) {
				t.Parallel()
				path := newProcessSegment(t)
				seg, m, _ := openClosable(t, path, k)
				ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
				defer cancel()
				loop := coro.NewLoop()
				defer closeLoop(t, loop)
				want := shm.ErrClosed
				if closed == "handle" {
					want = handleErr
					require.NoError(t, m.Close())
				} else {
					require.NoError(t, seg.Close())
				}
				before, err := os.ReadFile(path)
				require.NoError(t, err)
				reclaimWant := want
				if k.name == "spinlock Token" {
					reclaimWant = coro.ErrCannotReclaim
				}
				ops := []struct {
					name string
					op   func() error
					want error
				}{
					{"Lock", func() error { _, err := m.Lock(ctx); return err }, want},
					{"TryLock", func() error { _, err := m.TryLock(); return err }, want},
					{"LockOn", func() error {
						ch := make(chan error, 1)
						if err := m.LockOn(ctx, loop, func(_ coro.ProcessGuard, err error) { ch <- err }); err != nil {
							return err
						}
						return <-ch
					}, want},
					{"Reclaim", func() error { _, err := m.Reclaim(); return err }, reclaimWant},
				}
				for range 2 {
					for _, o := range ops {
						require.ErrorIs(t, o.op(), o.want, o.name)
					}
				}
				after, err := os.ReadFile(path)
				require.NoError(t, err)
				require.True(t, bytes.Equal(before, after), "a call after Close changed the file")
				if closed == "segment" {
					// The handle's own Close still gives its name back (a
					// release, which reaches the file).
					require.NoError(t, m.Close())
				}
				require.ErrorIs(t, m.Close(), handleErr, "Close again")
			})
		}
	}
}
