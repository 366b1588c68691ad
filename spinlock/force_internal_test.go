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

// ForceUnlock of a holder that had just taken the lock when the force read
// the slot, and stored its TID only after the takeover (an acquisition
// between its CAS of PID and its store of TID, read with the TID its
// predecessor's release left, 0; a waiter's reclaim of a dead holder,
// read with the dead holder's TID). The force frees the lock all the
// same, and reports the TID the holder stored. Before, it found a TID
// neither its own nor 0, gave up with ErrNotOwner and left the lock with
// its own process, held by nobody: the holder's release then failed on
// PID, and the lock stayed so while the forcer lived. A holder of the
// forcer's own process is left its lock (ErrNotOwner): its release frees
// it, and a TID not the force's may be a holder of this process that took
// the lock after the forced holder's release freed the takeover.
func TestForceUnlockDuringAnAcquisition(t *testing.T) {
	self := NewHolder().PID
	other := self + 1 // another process's identity: a force does not ask whether it lives
	const deadTID, tid = 7, 9
	for _, tc := range []struct {
		name      string
		pid, tid  uint64 // the slot when the force reads it
		acquire   func(s *layout.OwnerSlot)
		wantFreed bool
	}{
		{"acquisition", other, 0, func(s *layout.OwnerSlot) { s.TID.Store(tid) }, true},
		{"reclaim", other, deadTID, func(s *layout.OwnerSlot) {
			s.TID.Store(tid)
			s.RecursionCount.Store(layout.SlotInconsistent)
			s.Token.Add(1)
		}, true},
		{"acquisition in this process", self, 0, func(s *layout.OwnerSlot) { s.TID.Store(tid) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewInProcessState()
			l := New(s, PIDTID)
			s.PID.Store(tc.pid)
			s.TID.Store(tc.tid)
			defer func(h func()) { testHookForceTakenOver = h }(testHookForceTakenOver)
			testHookForceTakenOver = func() { tc.acquire(s) }
			owner, err := l.ForceUnlock()
			if !tc.wantFreed {
				require.ErrorIs(t, err, ErrNotOwner)
				require.Equal(t, Identity{PID: self, TID: tid}, Identity{PID: s.PID.Load(), TID: s.TID.Load()}, "the holder keeps its lock")
				require.NoError(t, l.Unlock(Identity{PID: self, TID: tid}), "and releases it")
				return
			}
			require.NoError(t, err, "slot PID %#x TID %d", s.PID.Load(), s.TID.Load())
			require.Equal(t, Identity{PID: other, TID: tid}, owner)
			require.Zero(t, s.PID.Load(), "the lock is free")
			require.Zero(t, s.TID.Load())
			require.ErrorIs(t, l.Unlock(owner), ErrNotOwner, "the forced holder's release")
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
