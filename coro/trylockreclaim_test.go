package coro_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

// A user that only ever TryLocks, behind a holder process killed with
// kill -9: TryLock never takes the dead holder's lock over (as the
// spinlock's TryLock does not), Reclaim does, and says so (Reclaimed,
// Inconsistent); the goroutines of this process that queued behind the
// reclaimed hold are then handed the lock in turn, and the holder that
// marks the data consistent is the last one told. Before, a ProcessMutex
// had no Reclaim: such a user stayed locked out for good.
func TestProcessMutexTryLockOnlyReclaim(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	l, m, _ := openSpin(t, path, spinlock.PIDTID)

	h := startHolder(t, path, spinlock.PIDTID.String())
	owner, _ := l.Owner()
	_, err := m.Reclaim()
	require.ErrorIs(t, err, coro.ErrWouldBlock, "the holder lives")
	now, _ := l.Owner()
	require.Equal(t, owner, now, "a refused Reclaim changes nothing")
	mustFree(t, coro.ProcessLocal(m))

	h.kill()
	_, err = m.TryLock()
	require.ErrorIs(t, err, coro.ErrWouldBlock, "TryLock never reclaims")
	g, err := m.Reclaim()
	require.NoError(t, err)
	self := spinlock.NewHolder().PID
	now, _ = l.Owner()
	require.Equal(t, self, now.PID)
	handOnReclaimed(t, m, g, true)
	_, held := l.Owner()
	require.False(t, held)
}

// A goroutine of this process waiting for the lock of a holder that is
// then killed takes it over by itself: a Reclaim once the holder is dead
// is refused (the lock is this process's waiter's to take over, before or
// after it has), and changes nothing.
func TestProcessMutexReclaimBehindWaiter(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	h := startHolder(t, path, spinlock.PIDTID.String())
	l, m, _ := openSpin(t, path, spinlock.PIDTID)
	g := lockAcrossKillThen(t, m, h, func() bool { return l.Slot().Sleepers() == 1 }, func() {
		_, err := m.Reclaim()
		require.ErrorIs(t, err, coro.ErrWouldBlock)
	})
	require.True(t, g.Inconsistent())
	require.NoError(t, g.Unlock())
}

// A Token spinlock records no process: Reclaim cannot tell a dead holder
// and says so, changing nothing (the hold stays until an operator forces
// it).
func TestProcessMutexReclaimToken(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	h := startHolder(t, path, spinlock.Token.String())
	l, m, _ := openSpin(t, path, spinlock.Token)
	owner, _ := l.Owner()
	h.kill()
	_, err := m.Reclaim()
	require.ErrorIs(t, err, coro.ErrCannotReclaim)
	now, held := l.Owner()
	require.True(t, held)
	require.Equal(t, owner, now)
	mustFree(t, coro.ProcessLocal(m))
	_, err = m.TryLock()
	require.ErrorIs(t, err, coro.ErrWouldBlock)
}

// The same over an upgrade mutex, for its unique lock (a dead unique
// holder leaves the data inconsistent) and its upgrade lock (a dead
// upgrade holder that did not upgrade changed nothing).
func TestUpgradeProcessMutexTryLockOnlyReclaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind         string
		adapt        func(*upgrade.Mutex) coro.ProcessLock
		inconsistent bool
	}{
		{lockKindUpgrade, coro.UpgradeUnique, true},
		{lockKindUpgradable, coro.UpgradeUpgradable, false},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			path := newProcessSegment(t)
			_, h, _ := openUpgrade(t, path)
			m := coro.NewProcessMutex(tc.adapt(h))

			other := startHolder(t, path, tc.kind)
			_, err := m.Reclaim()
			require.ErrorIs(t, err, coro.ErrWouldBlock, "the holder lives")
			mustFree(t, coro.ProcessLocal(m))

			other.kill()
			_, err = m.TryLock()
			require.ErrorIs(t, err, coro.ErrWouldBlock, "TryLock never reclaims")
			g, err := m.Reclaim()
			require.NoError(t, err)
			handOnReclaimed(t, m, g, tc.inconsistent)
		})
	}
}

// handOnReclaimed checks g, a hold that Reclaim took over, queues two
// Lock waiters and a LockOn waiter of this process behind it, and unlocks
// it: each waiter is handed the lock in turn, none of them as a reclaim;
// the first learns whether the data is inconsistent, marks it consistent,
// and the next is not told.
func handOnReclaimed(t *testing.T, m *coro.ProcessMutex, g coro.ProcessGuard, inconsistent bool) {
	t.Helper()
	require.True(t, g.Held())
	require.True(t, g.Reclaimed())
	require.Equal(t, inconsistent, g.Inconsistent())
	_, err := m.Reclaim()
	require.ErrorIs(t, err, coro.ErrWouldBlock, "held here")

	local := coro.ProcessLocal(m)
	var waiters []<-chan coro.ProcessGuard
	for range 2 {
		waiters = append(waiters, processLockAsync(t, m))
		testproc.WaitFor(t, func() bool { return coro.Waiters(local) == len(waiters) }, "the waiter to queue")
	}
	loop := coro.NewLoop()
	defer closeLoop(t, loop)
	onLoop := make(chan coro.ProcessGuard, 1)
	require.NoError(t, m.LockOn(context.Background(), loop, func(g coro.ProcessGuard, err error) {
		if err != nil {
			t.Error(err)
		}
		onLoop <- g
	}))
	waiters = append(waiters, onLoop)
	mustHeld(t, local, len(waiters))

	require.NoError(t, g.Unlock())
	for i, ch := range waiters {
		w := testproc.Receive(t, ch, "the waiter's turn")
		require.True(t, w.Held(), "waiter %d", i)
		if i == 0 {
			require.Equal(t, inconsistent, w.Inconsistent())
			if inconsistent {
				require.NoError(t, w.MarkConsistent())
			}
		} else {
			require.False(t, w.Reclaimed(), "waiter %d", i)
			require.False(t, w.Inconsistent(), "waiter %d", i)
		}
		require.NoError(t, w.Unlock())
	}
	mustFree(t, local)
}
