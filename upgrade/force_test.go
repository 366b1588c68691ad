package upgrade_test

import (
	"testing"

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
