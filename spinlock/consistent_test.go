package spinlock_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/spinlock"
)

// The recovery protocol, across processes: a holder is killed; the next
// holder (another process) takes the lock over and is told; it releases
// without marking the data consistent, so the following holder (a third
// process) is told too, though it reclaimed nothing; that one marks it,
// and from then on nobody is told.
func TestInconsistentUntilMarked(t *testing.T) {
	t.Parallel()
	_, path := newSegment(t)
	holder := testproc.Start(t, "hold", path, "1")
	holder.WaitLine(t, "held")
	holder.Kill(t)

	tell := func(mark string) string { return testproc.RunLine(t, "told ", "wait-lock", path, mark) }
	require.Equal(t, "reclaimed=true inconsistent=true", tell("no"), "the holder that reclaimed")
	require.Equal(t, "reclaimed=false inconsistent=true", tell("mark"), "the next holder: nobody repaired")
	require.Equal(t, "reclaimed=false inconsistent=false", tell("no"), "marked consistent")
	require.Equal(t, "reclaimed=false inconsistent=false", tell("no"))
}

// MarkConsistent needs the hold: an empty guard, or one whose hold was
// taken from it, is refused and changes nothing.
func TestMarkConsistentNeedsTheHold(t *testing.T) {
	t.Parallel()
	l := newLock(spinlock.PIDTID)
	var g spinlock.Guard
	require.ErrorIs(t, g.MarkConsistent(), spinlock.ErrNotHeld)
	require.False(t, g.Inconsistent())
	me := spinlock.NewHolder()
	require.NoError(t, g.Lock(l, me))
	require.NoError(t, g.MarkConsistent(), "a consistent lock stays so")
	require.False(t, l.Inconsistent())
	require.NoError(t, l.Unlock(me)) // behind the guard's back
	require.ErrorIs(t, g.MarkConsistent(), spinlock.ErrNotOwner)
}

// Check believes a sleeper count up to half of its 16 bits, and reports a
// larger one as damage; the epoch and futile bits are not sleepers.
func TestCheckSleeperCount(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	slot, err := seg.Slot(0)
	require.NoError(t, err)
	for _, tc := range []struct {
		pad    uint32
		damage bool
	}{
		{0, false},
		{3 | 200<<layout.PadEpochShift | 5<<layout.PadFutileShift | layout.PadWakePending, false},
		{1 << 14, false},
		{1<<15 + 1, true},
	} {
		slot.Pad.Store(tc.pad)
		found, err := spinlock.Check(seg)
		require.NoError(t, err)
		if tc.damage {
			require.Len(t, found, 1, "Pad %#x", tc.pad)
			require.Contains(t, found[0], "sleepers")
		} else {
			require.Empty(t, found, "Pad %#x", tc.pad)
		}
	}
	slot.Pad.Store(0)
}
