package spinlock

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
)

// ForceUnlock of a live holder that is inside its release, past its checks
// (they passed before the takeover): the holder's stores land on the
// forcer's hold before the forcer frees it. ForceUnlock still frees the
// lock and leaves it inconsistent. Before, the forcer freed through
// release's checks: the holder's TID 0 made it ErrNotOwner, and its
// recursion count made it only decrement and report success; either way
// the lock stayed held by the forcer's process for as long as that lived.
func TestForceUnlockDuringTheHoldersRelease(t *testing.T) {
	for name, release := range map[string]func(s *layout.OwnerSlot, g uint64){
		"outermost": func(s *layout.OwnerSlot, g uint64) { // TID, generation, then the CAS that fails
			s.TID.Store(0)
			s.Token.Store(g + 1)
		},
		"nested": func(s *layout.OwnerSlot, _ uint64) { s.RecursionCount.Store(1) }, // it read 2
	} {
		t.Run(name, func(t *testing.T) {
			s := NewInProcessState()
			l := New(s, PIDTID)
			held := NewHolder()
			require.NoError(t, new(Guard).Lock(l, held))
			g := s.Token.Load()
			defer func(h func()) { testHookForceTakenOver = h }(testHookForceTakenOver)
			testHookForceTakenOver = func() { release(s, g) }
			owner, err := l.ForceUnlock()
			require.NoError(t, err)
			require.Equal(t, held, owner)
			require.Zero(t, s.PID.Load(), "the lock is free")
			require.Zero(t, s.TID.Load())
			require.Equal(t, layout.SlotInconsistent, s.RecursionCount.Load())
			next, err := l.TryLock(NewHolder())
			require.NoError(t, err)
			require.True(t, next.Inconsistent())
			require.NoError(t, next.Release())
		})
	}
}
