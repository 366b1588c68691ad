package spinlock_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/spinlock"
)

// An operator frees a live holder's lock (here another process that holds
// it and goes on running): the lock is free, the generation moved past the
// holder's by two (the takeover and the release), the slot is marked
// inconsistent, and the holder's own release fails with ErrNotOwner.
func TestForceUnlockLiveHolder(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	holder := testproc.Start(t, "hold", path, "2")
	holder.WaitLine(t, "held")
	gen := l.Generation()
	cur, _ := l.Owner()
	before := stateOf(l.Slot())
	forged := spinlock.Identity{PID: spinlock.NewHolder().PID, TID: cur.TID} // this process's, with the holder's TID
	require.ErrorIs(t, l.Unlock(forged), spinlock.ErrNotOwner)
	require.Equal(t, before, stateOf(l.Slot()), "a release by a forged identity changed the slot")
	owner, err := l.ForceUnlock()
	require.NoError(t, err)
	require.Equal(t, holder.Identity(t), owner.PID)
	_, held := l.Owner()
	require.False(t, held)
	require.Equal(t, gen+2, l.Generation(), "fencing tokens strictly grow")
	require.True(t, l.Inconsistent())
	require.ErrorIs(t, l.Unlock(owner), spinlock.ErrNotOwner, "the old holder's release")
	_, err = l.ForceUnlock()
	require.ErrorIs(t, err, spinlock.ErrNotHeld)
	holder.RequireRunning(t)
}

// In token mode the token is cleared, and its Unlock fails.
func TestForceUnlockToken(t *testing.T) {
	t.Parallel()
	l := newLock(spinlock.Token)
	tok := spinlock.NewToken()
	_, err := l.Lock(tok)
	require.NoError(t, err)
	owner, err := l.ForceUnlock()
	require.NoError(t, err)
	require.Equal(t, tok, owner)
	require.ErrorIs(t, l.Unlock(tok), spinlock.ErrNotOwner)
	_, err = l.TryLock(spinlock.NewToken())
	require.NoError(t, err, "free")
}

// A holder of this process forced out, whose lock another holder then
// took: its release through a Locker (whose fast path does not read the
// slot's PID) fails, and the new holder keeps the lock.
func TestForceUnlockThenReleaseThroughLocker(t *testing.T) {
	t.Parallel()
	l := newLock(spinlock.PIDTID)
	old, next := spinlock.NewHolder(), spinlock.NewHolder()
	k := l.Locker(old)
	k.Lock()
	forced, err := l.ForceUnlock()
	require.NoError(t, err)
	require.Equal(t, old, forced)
	var g spinlock.Guard
	require.NoError(t, g.Lock(l, next))
	before := stateOf(l.Slot())
	require.ErrorIs(t, testproc.RecoverAs[*spinlock.LockerPanic](t, k.Unlock), spinlock.ErrNotOwner)
	require.Equal(t, before, stateOf(l.Slot()), "the forced-out holder's release changed the new holder's slot")
	require.NoError(t, g.Release())
}
