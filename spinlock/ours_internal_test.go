package spinlock

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// otherHolds makes the slot held by another (live) process's holder with
// holder id tid, as its acquisition would: CAS of PID from 0, then TID.
// Holder ids are drawn per process, so another process's may equal one of
// this process's (in libshmlock a holder drawn before a fork is the
// child's too); the pair (PID, TID) is the holder.
func otherHolds(t *testing.T, s *layout.OwnerSlot, tid uint64) {
	t.Helper()
	parent, err := proc.Lookup(uint32(os.Getppid()))
	require.NoError(t, err)
	require.True(t, s.PID.CompareAndSwap(0, parent.Pack()))
	s.TID.Store(tid)
}

// A handle whose ours still names a holder whose hold ended elsewhere (it
// was released through another handle, or forced out) must not take that
// holder's release for its own: another process's holder with the same
// holder id holds the lock now. The release is ErrNotOwner and changes
// nothing; it used to skip the PID check on ours' word alone, clear the
// other process's TID (whose own release then failed: the lock wedged
// while that process lived) and bump the generation under it.
func TestStaleOursIsNotOwnership(t *testing.T) {
	for _, how := range []string{"released through another handle", "forced out"} {
		t.Run(how, func(t *testing.T) {
			s := NewInProcessState()
			a, b := New(s, PIDTID), New(s, PIDTID)
			me := NewHolder()
			var g Guard
			require.NoError(t, g.Lock(a, me))
			if how == "forced out" {
				_, err := b.ForceUnlock()
				require.NoError(t, err)
			} else {
				require.NoError(t, b.Unlock(me))
			}
			otherHolds(t, s, me.TID)
			pid, gen, rec := s.PID.Load(), s.Token.Load(), s.RecursionCount.Load()
			require.ErrorIs(t, g.Release(), ErrNotOwner)
			require.Equal(t, pid, s.PID.Load())
			require.Equal(t, me.TID, s.TID.Load(), "the other process's holder id")
			require.Equal(t, gen, s.Token.Load(), "the generation")
			require.Equal(t, rec, s.RecursionCount.Load())

			// The same through a Locker (its Unlock writes release out).
			s.PID.Store(0)
			s.TID.Store(0)
			k := a.Locker(me)
			k.Lock()
			require.NoError(t, b.Unlock(me))
			otherHolds(t, s, me.TID)
			gen = s.Token.Load()
			require.Panics(t, k.Unlock)
			require.Equal(t, me.TID, s.TID.Load(), "the other process's holder id")
			require.Equal(t, gen, s.Token.Load(), "the generation")
		})
	}
}
