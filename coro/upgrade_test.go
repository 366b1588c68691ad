package coro_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

const rwName = "coro-rw"

// upgradeMutex opens the segment, a handle on the test's upgrade mutex and
// the plain counter.
func upgradeMutex(path string) (*shm.Segment, *upgrade.Mutex, *uint64, error) {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := upgrade.Named(seg, rwName)
	if err == nil {
		var counter *uint64
		if counter, err = counterOf(seg); err == nil {
			return seg, m, counter, nil
		}
		_ = m.Close()
	}
	_ = seg.Close()
	return nil, nil, nil, err
}

// Processes each with several goroutines increment one plain counter
// through a ProcessMutex over the upgrade mutex's unique lock.
func TestUpgradeProcessMutexCounter(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	const procs, goroutines, rounds = 3, 4, 2000
	runCount(t, path, lockKindUpgrade, procs, goroutines, rounds)
	_, _, counter := openUpgrade(t, path)
	require.EqualValues(t, procs*goroutines*rounds, *counter)
}

// A wait for a unique lock that another process holds gives up when its
// context is done and leaves the mutex as it was: the holder still holds
// it, and once it lets go the lock is free for us.
func TestUpgradeProcessMutexCancel(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	other := startHolder(t, path, lockKindUpgrade)
	_, h, _ := openUpgrade(t, path)
	m := coro.NewProcessMutex(coro.UpgradeUnique(h))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := m.Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = m.TryLock()
	require.ErrorIs(t, err, coro.ErrWouldBlock, "the other process still holds it")

	other.release()
	g, err := m.TryLock()
	require.NoError(t, err)
	require.False(t, g.Reclaimed())
	require.NoError(t, g.Unlock())
	require.ErrorIs(t, g.Unlock(), coro.ErrNotOwner)
}

// The writer process is killed while the ProcessMutex's goroutine waits:
// the waiter takes the lock over and learns that its holder died.
func TestUpgradeProcessMutexReclaim(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	other := startHolder(t, path, lockKindUpgrade)
	_, h, _ := openUpgrade(t, path)
	m := coro.NewProcessMutex(coro.UpgradeUnique(h))

	g := lockAcrossKill(t, m, other, nil)
	require.NoError(t, g.Unlock())
}

// openUpgrade is upgradeMutex for a test: it fails the test on error and
// closes the handle and the segment at its end.
func openUpgrade(t *testing.T, path string) (*shm.Segment, *upgrade.Mutex, *uint64) {
	t.Helper()
	seg, h, counter, err := upgradeMutex(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close(); _ = seg.Close() })
	return seg, h, counter
}

// The upgrade lock through a ProcessMutex sits beside readers of other
// handles, keeps this process's other goroutines queued, and its holder may
// upgrade and downgrade within the hold.
func TestUpgradeProcessMutexUpgradable(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	seg, h, _ := openUpgrade(t, path)
	reader, err := upgrade.Named(seg, rwName)
	require.NoError(t, err)
	defer reader.Close()
	m := coro.NewProcessMutex(coro.UpgradeUpgradable(h))

	g, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, reader.TryLockShared(), "a reader beside the upgrade lock")
	_, err = m.TryLock()
	require.ErrorIs(t, err, coro.ErrWouldBlock, "one goroutine of the process at a time")
	require.True(t, errors.Is(h.TryUpgradeToUnique(), upgrade.ErrWouldBlock), "not unique while a reader reads")
	require.NoError(t, reader.UnlockShared())
	require.NoError(t, h.UpgradeToUnique())
	require.ErrorIs(t, reader.TryLockShared(), upgrade.ErrWouldBlock)
	require.NoError(t, h.UniqueToUpgrade())
	require.NoError(t, g.Unlock())
	require.NoError(t, reader.TryLock(), "free once the guard is unlocked")
	require.NoError(t, reader.Unlock())
}

// Once a unique holder died, every unique acquisition of the upgrade
// mutex reports Reclaimed until a holder marks the data consistent; a
// ProcessGuard must say what its handle says whichever way it locked. The
// guards of TryLock and of LockOn (which tries first) reported false while
// the handle reported true, so their holders were not told that the data
// may be half-updated.
func TestUpgradeProcessMutexTryLockReclaimed(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	other := startHolder(t, path, lockKindUpgrade)
	_, h, _ := openUpgrade(t, path)
	m := coro.NewProcessMutex(coro.UpgradeUnique(h))
	g := lockAcrossKill(t, m, other, nil)
	require.NoError(t, g.Unlock()) // the data is not marked consistent

	g, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.True(t, h.Reclaimed())
	require.True(t, g.Reclaimed(), "Lock")
	require.NoError(t, g.Unlock())

	g, err = m.TryLock()
	require.NoError(t, err)
	require.True(t, h.Reclaimed())
	require.True(t, g.Reclaimed(), "TryLock")
	require.NoError(t, g.Unlock())

	loop := coro.NewLoop()
	defer loop.Close()
	got := make(chan coro.ProcessGuard, 1)
	require.NoError(t, m.LockOn(context.Background(), loop, func(g coro.ProcessGuard, err error) {
		if err != nil {
			t.Error(err)
		}
		got <- g
	}))
	g = <-got
	require.True(t, g.Reclaimed(), "LockOn")
	require.NoError(t, g.Unlock())
}
