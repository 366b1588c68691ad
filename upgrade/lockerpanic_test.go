package upgrade_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// Every panic the Locker's doc comment lists carries the error that the
// handle's method would have returned, for errors.Is, with the method that
// panicked named once in its text; the mutex is left as it was.
func TestLockerPanics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// call sets the handles up (a is the Locker's, b another's) and
		// returns the call that panics.
		call func(t *testing.T, seg *shm.Segment, a, b *upgrade.Mutex) func()
		op   string
		want error
	}{{
		name: "Lock after the handle's Close",
		call: func(t *testing.T, _ *shm.Segment, a, _ *upgrade.Mutex) func() {
			require.NoError(t, a.Close())
			return a.Locker().Lock
		},
		op: "Locker.Lock", want: upgrade.ErrClosed,
	}, {
		name: "RLock after the handle's Close",
		call: func(t *testing.T, _ *shm.Segment, a, _ *upgrade.Mutex) func() {
			require.NoError(t, a.Close())
			return a.Locker().RLock
		},
		op: "Locker.RLock", want: upgrade.ErrClosed,
	}, {
		name: "RLocker's Lock after the segment's Close",
		call: func(t *testing.T, seg *shm.Segment, a, _ *upgrade.Mutex) func() {
			require.NoError(t, seg.Close())
			return a.Locker().RLocker().Lock
		},
		op: "RLocker.Lock", want: shm.ErrClosed,
	}, {
		name: "Lock over the handle's shared hold",
		call: func(t *testing.T, _ *shm.Segment, a, _ *upgrade.Mutex) func() {
			a.Locker().RLock()
			return a.Locker().Lock
		},
		op: "Locker.Lock", want: upgrade.ErrHeld,
	}, {
		name: "Lock over the handle's unique hold",
		call: func(t *testing.T, _ *shm.Segment, a, _ *upgrade.Mutex) func() {
			a.Locker().Lock()
			return a.Locker().Lock
		},
		op: "Locker.Lock", want: upgrade.ErrHeld,
	}, {
		name: "RLock over the handle's unique hold",
		call: func(t *testing.T, _ *shm.Segment, a, _ *upgrade.Mutex) func() {
			a.Locker().Lock()
			return a.Locker().RLock
		},
		op: "Locker.RLock", want: upgrade.ErrHeld,
	}, {
		name: "Unlock of a free mutex",
		call: func(t *testing.T, _ *shm.Segment, a, _ *upgrade.Mutex) func() {
			return a.Locker().Unlock
		},
		op: "Locker.Unlock", want: upgrade.ErrNotHeld,
	}, {
		name: "Unlock by a non-holder",
		call: func(t *testing.T, _ *shm.Segment, a, b *upgrade.Mutex) func() {
			b.Locker().Lock()
			return a.Locker().Unlock
		},
		op: "Locker.Unlock", want: upgrade.ErrNotOwner,
	}, {
		name: "RUnlock by a non-holder",
		call: func(t *testing.T, _ *shm.Segment, a, b *upgrade.Mutex) func() {
			b.Locker().RLock()
			return a.Locker().RUnlock
		},
		op: "Locker.RUnlock", want: upgrade.ErrNotHeld,
	}, {
		name: "RLocker's Unlock of a free mutex",
		call: func(t *testing.T, _ *shm.Segment, a, _ *upgrade.Mutex) func() {
			return a.Locker().RLocker().Unlock
		},
		op: "RLocker.Unlock", want: upgrade.ErrNotHeld,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			observer, path := newSegment(t)
			seg, err := shm.Open(path, shm.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = seg.Close() })
			a, b := open(t, seg), open(t, seg)
			call := tc.call(t, seg, a, b)
			before := status(t, observer)
			p := testproc.RecoverAs[*upgrade.LockerPanic](t, call)
			require.ErrorIs(t, p, tc.want)
			require.Equal(t, tc.op, p.Op)
			require.Equal(t, tc.op+": "+tc.want.Error(), p.Error())
			require.Equal(t, before, status(t, observer), "the mutex changed")
		})
	}
}
