package spinlock_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// Every panic a Locker's doc comment lists carries the error that the
// Guard's method would have returned, for errors.Is, with the method that
// panicked named once in its text; the slot is left as it was.
func TestLockerPanics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		modes []spinlock.Mode
		// call sets the lock up and returns the call that panics.
		call func(t *testing.T, l *spinlock.Lock, seg *shm.Segment, mode spinlock.Mode) func()
		op   string
		want error
	}{{
		name: "Locker of an identity of the other mode",
		call: func(_ *testing.T, l *spinlock.Lock, _ *shm.Segment, mode spinlock.Mode) func() {
			other := spinlock.PIDTID
			if mode == other {
				other = spinlock.Token
			}
			return func() { l.Locker(holderFor(other)) }
		},
		op: "Lock.Locker", want: spinlock.ErrBadIdentity,
	}, {
		name: "Unlock of a free lock",
		call: func(_ *testing.T, l *spinlock.Lock, _ *shm.Segment, mode spinlock.Mode) func() {
			return l.Locker(holderFor(mode)).Unlock
		},
		op: "Locker.Unlock", want: spinlock.ErrNotOwner,
	}, {
		name: "Unlock by a non-holder",
		call: func(_ *testing.T, l *spinlock.Lock, _ *shm.Segment, mode spinlock.Mode) func() {
			l.Locker(holderFor(mode)).Lock()
			return l.Locker(holderFor(mode)).Unlock
		},
		op: "Locker.Unlock", want: spinlock.ErrNotOwner,
	}, {
		name: "second Unlock",
		call: func(_ *testing.T, l *spinlock.Lock, _ *shm.Segment, mode spinlock.Mode) func() {
			k := l.Locker(holderFor(mode))
			k.Lock()
			k.Unlock()
			return k.Unlock
		},
		op: "Locker.Unlock", want: spinlock.ErrNotOwner,
	}, {
		name:  "Unlock by a holder forced out",
		modes: []spinlock.Mode{spinlock.PIDTID}, // the Locker's own release path
		call: func(t *testing.T, l *spinlock.Lock, _ *shm.Segment, mode spinlock.Mode) func() {
			k := l.Locker(holderFor(mode))
			k.Lock()
			_, err := l.ForceUnlock()
			require.NoError(t, err)
			l.Locker(holderFor(mode)).Lock()
			return k.Unlock
		},
		op: "Locker.Unlock", want: spinlock.ErrNotOwner,
	}, {
		name:  "Lock past the most recursive holds",
		modes: []spinlock.Mode{spinlock.PIDTID},
		call: func(_ *testing.T, l *spinlock.Lock, _ *shm.Segment, mode spinlock.Mode) func() {
			k := l.Locker(holderFor(mode))
			k.Lock()
			l.Slot().RecursionCount.Store(math.MaxUint32)
			return k.Lock
		},
		op: "Locker.Lock", want: spinlock.ErrRecursion,
	}, {
		name: "Lock after the lock's Close",
		call: func(t *testing.T, l *spinlock.Lock, _ *shm.Segment, mode spinlock.Mode) func() {
			require.NoError(t, l.Close())
			return l.Locker(holderFor(mode)).Lock
		},
		op: "Locker.Lock", want: spinlock.ErrLockClosed,
	}, {
		name: "the holder's recursive Lock after the lock's Close",
		call: func(t *testing.T, l *spinlock.Lock, _ *shm.Segment, mode spinlock.Mode) func() {
			k := l.Locker(holderFor(mode))
			k.Lock()
			require.NoError(t, l.Close())
			return k.Lock
		},
		op: "Locker.Lock", want: spinlock.ErrLockClosed,
	}, {
		name: "Lock after the segment's Close",
		call: func(t *testing.T, l *spinlock.Lock, seg *shm.Segment, mode spinlock.Mode) func() {
			require.NoError(t, seg.Close())
			return l.Locker(holderFor(mode)).Lock
		},
		op: "Locker.Lock", want: shm.ErrClosed,
	}} {
		modes := tc.modes
		if modes == nil {
			modes = []spinlock.Mode{spinlock.PIDTID, spinlock.Token}
		}
		for _, mode := range modes {
			t.Run(mode.String()+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				seg, err := shm.Open(newSegmentPath(t), shm.Options{})
				require.NoError(t, err)
				t.Cleanup(func() { _ = seg.Close() })
				l, err := spinlock.Open(seg, 0, mode)
				require.NoError(t, err)
				call := tc.call(t, l, seg, mode)
				before := stateOf(l.Slot())
				p := testproc.RecoverAs[*spinlock.LockerPanic](t, call)
				require.ErrorIs(t, p, tc.want)
				require.Equal(t, tc.op, p.Op)
				require.Equal(t, tc.op+": "+tc.want.Error(), p.Error())
				require.Equal(t, before, stateOf(l.Slot()), "the slot changed")
			})
		}
	}
}
