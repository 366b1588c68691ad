package spinlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
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

// Two goroutines that force one slot through the same Segment serialize
// as processes do: each force takes the lock on an open of the file of its
// own, not on the Segment's, which the goroutines share. Not parallel: it
// sets the package's hooks.
func TestForcesSerializeInProcess(t *testing.T) {
	seg, err := shm.Create(testproc.SegmentPath(t), shm.Options{Options: layout.Options{Slots: 1}})
	require.NoError(t, err)
	defer seg.Close()
	l, err := Open(seg, 0, PIDTID)
	require.NoError(t, err)
	held := NewHolder()
	require.NoError(t, new(Guard).Lock(l, held))
	took, resume := make(chan struct{}), make(chan struct{})
	defer func(h func()) { testHookForceTook = h }(testHookForceTook)
	testHookForceTook = func() {
		testHookForceTook = func() {} // the first force stops here, the others run on
		close(took)
		<-resume
	}
	type result struct {
		owner Identity
		err   error
	}
	done := make(chan result, 1)
	go func() {
		owner, err := l.ForceUnlock()
		done <- result{owner, err}
	}()
	<-took
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = l.ForceUnlockContext(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a force of the same Segment while another runs")
	close(resume)
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, held, r.owner)
	_, err = l.ForceUnlockContext(t.Context())
	require.ErrorIs(t, err, ErrNotHeld, "a force after the first")
}
