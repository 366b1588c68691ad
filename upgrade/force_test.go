package upgrade_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/upgrade"
)

// An operator frees a live writer's unique lock: the mutex is free and
// marked inconsistent, the generation strictly grows, and the old
// holder's Unlock fails (ErrNotOwner once another handle holds it). Shared
// holds are dropped the same way.
func TestForceUnlock(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	// The unique hold in each of its forms (state.go): Lock's one CAS
	// (writerUnique), and TryLock's, which has no fast path (stateWrite).
	for _, lock := range []func(*upgrade.Mutex) error{(*upgrade.Mutex).Lock, (*upgrade.Mutex).TryLock} {
		w, other := open(t, seg), open(t, seg)
		require.NoError(t, lock(w))
		gen := w.Generation()
		f, err := upgrade.ForceUnlock(seg, 0)
		require.NoError(t, err)
		require.Equal(t, proc.Self().Pack(), f.Writer)
		require.Greater(t, other.Generation(), gen, "fencing tokens strictly grow")
		st := status(t, seg)
		checkFree(t, st)
		require.True(t, st.Inconsistent, "a unique hold was freed")
		require.NoError(t, other.Lock())
		require.ErrorIs(t, w.Unlock(), upgrade.ErrNotOwner, "the old holder's release")
		require.NoError(t, other.MarkConsistent())
		require.NoError(t, other.Unlock())
		require.NoError(t, w.Close())
		require.NoError(t, other.Close())
	}

	r := open(t, seg)
	require.NoError(t, r.LockShared())
	require.NoError(t, r.LockShared())
	f, err := upgrade.ForceUnlock(seg, 0)
	require.NoError(t, err)
	require.Len(t, f.Readers, 1)
	require.Equal(t, uint32(2), f.Readers[0].Count)
	require.ErrorIs(t, r.UnlockShared(), upgrade.ErrNotHeld)
	other := open(t, seg)
	require.NoError(t, other.TryLock(), "free")
	require.NoError(t, other.Unlock())
	f, err = upgrade.ForceUnlock(seg, 0)
	require.NoError(t, err)
	require.True(t, f.Empty())
}

// The forces an operator makes: a holder is stuck and others wait for it.
// Only the stuck holds are freed; whoever waited for them gets the lock,
// and nobody gets in beside it.
func TestForceUnlockLeavesWaiters(t *testing.T) {
	t.Parallel()
	self := proc.Self().Pack()
	t.Run("writer waiting for the upgrade holder", func(t *testing.T) {
		seg, _ := newSegment(t)
		stuck, w, other := open(t, seg), open(t, seg), open(t, seg)
		require.NoError(t, stuck.LockUpgrade())
		done := make(chan error, 1)
		go func() { done <- w.Lock() }()
		waitStatus(t, seg, func(st upgrade.Status) bool { return st.Writer != 0 }, "waiting writer")
		f, err := upgrade.ForceUnlock(seg, 0)
		require.NoError(t, err)
		require.Equal(t, upgrade.Forced{Upgrader: self, WaitingWriter: self}, f)
		require.NoError(t, <-done, "the waiting writer gets the lock")
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, other.LockContext(ctx), context.DeadlineExceeded, "one writer at a time")
		require.ErrorIs(t, other.LockSharedContext(ctx), context.DeadlineExceeded, "no reader beside the writer")
		require.NoError(t, w.Unlock())
		require.NoError(t, other.Lock())
		require.NoError(t, other.Unlock())
		checkFree(t, status(t, seg))
	})
	t.Run("upgrade seeker waiting for the writer", func(t *testing.T) {
		seg, _ := newSegment(t)
		stuck, u, other := open(t, seg), open(t, seg), open(t, seg)
		require.NoError(t, stuck.Lock())
		done := make(chan error, 1)
		go func() { done <- u.LockUpgrade() }()
		waitStatus(t, seg, func(st upgrade.Status) bool { return st.Upgrader != 0 }, "waiting upgrade seeker")
		f, err := upgrade.ForceUnlock(seg, 0)
		require.NoError(t, err)
		require.Equal(t, upgrade.Forced{Writer: self, WaitingUpgrader: self}, f)
		require.NoError(t, <-done, "the waiting seeker gets the upgrade lock")
		require.ErrorIs(t, other.TryLockUpgrade(), upgrade.ErrWouldBlock, "one upgrade holder at a time")
		require.ErrorIs(t, other.TryLock(), upgrade.ErrWouldBlock)
		require.NoError(t, u.UpgradeToUnique())
		require.NoError(t, u.MarkConsistent())
		require.NoError(t, u.UniqueToUpgrade())
		require.NoError(t, u.UnlockUpgrade())
		require.ErrorIs(t, stuck.Unlock(), upgrade.ErrNotHeld, "the forced holder's own release")
		checkFree(t, status(t, seg))
	})
	t.Run("upgrade pending behind a stuck reader", func(t *testing.T) {
		// The upgrade holder is freed too (it holds the upgrade lock):
		// its upgrade must not then complete into a unique hold of a lock
		// it no longer has, beside the next writer's.
		seg, _ := newSegment(t)
		u, reader, w := open(t, seg), open(t, seg), open(t, seg)
		require.NoError(t, reader.LockShared())
		require.NoError(t, u.LockUpgrade())
		done := make(chan error, 1)
		go func() { done <- u.UpgradeToUnique() }()
		waitStatus(t, seg, func(st upgrade.Status) bool { return st.UpgradePending }, "pending upgrade")
		f, err := upgrade.ForceUnlock(seg, 0)
		require.NoError(t, err)
		require.Equal(t, self, f.Upgrader)
		require.Len(t, f.Readers, 1)
		require.ErrorIs(t, <-done, upgrade.ErrNotHeld, "the forced upgrade")
		require.NoError(t, w.Lock())
		require.False(t, status(t, seg).UpgradeLocked)
		require.ErrorIs(t, u.UnlockUpgrade(), upgrade.ErrNotHeld)
		require.NoError(t, w.Unlock())
		checkFree(t, status(t, seg))
	})
}
