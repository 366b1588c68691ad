package spinlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// Once its segment is closed a lock fails every acquisition with
// shm.ErrClosed and changes nothing in the file: the slot a guard held
// before Close is still held there (Close does not release), and another
// process (here another Open of the file) sees exactly that, until the
// guard releases it: releases still reach the file.
func TestUseAfterClose(t *testing.T) {
	t.Parallel()
	ops := []struct {
		name string
		op   func(l *spinlock.Lock, id spinlock.Identity) error
	}{
		{"Lock", func(l *spinlock.Lock, id spinlock.Identity) error { _, err := l.Lock(id); return err }},
		{"TryLock", func(l *spinlock.Lock, id spinlock.Identity) error { _, err := l.TryLock(id); return err }},
		{"TryLockFor", func(l *spinlock.Lock, id spinlock.Identity) error {
			_, err := l.TryLockFor(id, time.Second)
			return err
		}},
		{"LockContext", func(l *spinlock.Lock, id spinlock.Identity) error {
			_, err := l.LockContext(context.Background(), id)
			return err
		}},
		{"Adopt", func(l *spinlock.Lock, id spinlock.Identity) error { var g spinlock.Guard; return g.Adopt(l, id) }},
		{"Reclaim", func(l *spinlock.Lock, id spinlock.Identity) error { _, err := l.Reclaim(id); return err }},
		{"ForceUnlock", func(l *spinlock.Lock, _ spinlock.Identity) error { _, err := l.ForceUnlock(); return err }},
		{"Guard.Lock", func(l *spinlock.Lock, id spinlock.Identity) error { var g spinlock.Guard; return g.Lock(l, id) }},
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			path := newSegmentPath(t)
			seg, err := shm.Open(path, shm.Options{})
			require.NoError(t, err)
			l, err := spinlock.Open(seg, 0, mode)
			require.NoError(t, err)
			id := holderFor(mode)
			g, err := l.Lock(id)
			require.NoError(t, err)
			require.NoError(t, seg.Close())

			for _, o := range ops {
				require.ErrorIs(t, o.op(l, id), shm.ErrClosed, o.name)
				require.ErrorIs(t, o.op(l, holderFor(mode)), shm.ErrClosed, o.name+" by another holder")
			}
			_, err = spinlock.Open(seg, 0, mode)
			require.ErrorIs(t, err, shm.ErrClosed, "Open")
			_, err = spinlock.Named(seg, "new", mode)
			require.ErrorIs(t, err, shm.ErrClosed, "Named")
			_, err = spinlock.OpenAt(seg, l.Slot(), mode)
			require.ErrorIs(t, err, shm.ErrClosed, "OpenAt")
			other := openPath(t, path, mode)
			owner, held := other.Owner()
			require.True(t, held, "Close does not release")
			require.Equal(t, id, owner)
			require.ErrorIs(t, l.Unlock(holderFor(mode)), spinlock.ErrNotOwner)

			require.NoError(t, g.Release(), "a release after Close")
			_, held = other.Owner()
			require.False(t, held, "the release reached the file")
		})
	}
}

// A goroutine asleep in Lock when its segment closes returns ErrClosed at
// its next liveness check, and leaves no sleeper registered in the file.
func TestCloseEndsAWait(t *testing.T) {
	t.Parallel()
	path := newSegmentPath(t)
	holderSide := openPath(t, path, spinlock.PIDTID)
	g, err := holderSide.Lock(spinlock.NewHolder())
	require.NoError(t, err)

	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := l.Lock(spinlock.NewHolder()); done <- err }()
	waitFor(t, func() bool { return holderSide.Slot().Sleepers() == 1 }, "the waiter to sleep")
	require.NoError(t, seg.Close())
	require.ErrorIs(t, testproc.Receive(t, done, "the waiter to return after Close"), shm.ErrClosed)
	require.Zero(t, holderSide.Slot().Sleepers(), "the waiter's registration is gone from the file")
	require.NoError(t, g.Release())
	g, err = holderSide.TryLock(spinlock.NewHolder())
	require.NoError(t, err, "the lock is free in the file")
	require.NoError(t, g.Release())
}

// newSegmentPath creates a segment for one test and closes this handle on
// it: the tests open their own.
func newSegmentPath(t *testing.T) string {
	_, path := newSegment(t)
	return path
}

// openPath opens the segment at path again, for the lock over slot 0.
func openPath(t *testing.T, path string, mode spinlock.Mode) *spinlock.Lock {
	t.Helper()
	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	l, err := spinlock.Open(seg, 0, mode)
	require.NoError(t, err)
	return l
}

// A read-only segment's slots are not lock handles: every acquisition
// writes the slot, and a write to a read-only mapping kills the process
// (it did, before Open refused). Inspection reads the slot (seg.Slot).
func TestReadOnlySegment(t *testing.T) {
	t.Parallel()
	path := newSegmentPath(t)
	ro, err := shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ro.Close() })
	slot, err := ro.Slot(1)
	require.NoError(t, err)
	for _, mode := range modes {
		_, err := spinlock.Open(ro, 0, mode)
		require.ErrorIs(t, err, shm.ErrReadOnly, "Open")
		_, err = spinlock.OpenAt(ro, slot, mode)
		require.ErrorIs(t, err, shm.ErrReadOnly, "OpenAt")
		_, err = spinlock.Named(ro, "lock", mode)
		require.ErrorIs(t, err, shm.ErrReadOnly, "Named")
	}
	require.Zero(t, slot.PID.Load(), "nothing was written")
}

// A nil segment (an Open that failed, unchecked) is an error, not a panic.
func TestNilSegment(t *testing.T) {
	t.Parallel()
	_, err := spinlock.Open(nil, 0, spinlock.PIDTID)
	require.ErrorIs(t, err, shm.ErrNoSegment)
	_, err = spinlock.OpenAt(nil, spinlock.NewInProcessState(), spinlock.Token)
	require.ErrorIs(t, err, shm.ErrNoSegment)
	_, err = spinlock.Named(nil, "lock", spinlock.PIDTID)
	require.ErrorIs(t, err, shm.ErrNoSegment)
	_, err = spinlock.Check(nil)
	require.ErrorIs(t, err, shm.ErrNoSegment)
}

// Once the handle itself is closed (Lock.Close), every acquisition through
// it, ForceUnlock and a second Close fail with ErrLockClosed (not
// shm.ErrClosed: the segment is open) and change nothing in the file; a
// hold taken before is still released through it. Also after the
// segment's close: the handle's own Close says so first.
func TestUseAfterHandleClose(t *testing.T) {
	t.Parallel()
	ops := []struct {
		name string
		op   func(l *spinlock.Lock, id spinlock.Identity) error
	}{
		{"Lock", func(l *spinlock.Lock, id spinlock.Identity) error { _, err := l.Lock(id); return err }},
		{"TryLock", func(l *spinlock.Lock, id spinlock.Identity) error { _, err := l.TryLock(id); return err }},
		{"TryLockFor", func(l *spinlock.Lock, id spinlock.Identity) error {
			_, err := l.TryLockFor(id, time.Hour)
			return err
		}},
		{"LockContext", func(l *spinlock.Lock, id spinlock.Identity) error {
			_, err := l.LockContext(context.Background(), id)
			return err
		}},
		{"Guard.Lock", func(l *spinlock.Lock, id spinlock.Identity) error { var g spinlock.Guard; return g.Lock(l, id) }},
		{"Adopt", func(l *spinlock.Lock, id spinlock.Identity) error { var g spinlock.Guard; return g.Adopt(l, id) }},
		{"Reclaim", func(l *spinlock.Lock, id spinlock.Identity) error { _, err := l.Reclaim(id); return err }},
		{"ForceUnlock", func(l *spinlock.Lock, _ spinlock.Identity) error { _, err := l.ForceUnlock(); return err }},
		{"Close", func(l *spinlock.Lock, _ spinlock.Identity) error { return l.Close() }},
	}
	for _, mode := range modes {
		for _, segClosed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/segment closed %v", mode, segClosed), func(t *testing.T) {
				t.Parallel()
				path := newSegmentPath(t)
				seg, err := shm.Open(path, shm.Options{})
				require.NoError(t, err)
				t.Cleanup(func() { _ = seg.Close() })
				l, err := spinlock.Named(seg, "l", mode)
				require.NoError(t, err)
				id := holderFor(mode)
				g, err := l.Lock(id)
				require.NoError(t, err)
				require.NoError(t, l.Close())
				if segClosed {
					require.NoError(t, seg.Close())
				}
				other := openPath(t, path, mode)
				before, _ := other.Owner()
				for _, o := range ops {
					require.ErrorIs(t, o.op(l, id), spinlock.ErrLockClosed, o.name)
					require.ErrorIs(t, o.op(l, holderFor(mode)), spinlock.ErrLockClosed, o.name+" by another holder")
					owner, held := other.Owner()
					require.True(t, held, "%s: the hold is as it was", o.name)
					require.Equal(t, before, owner, o.name)
				}
				require.NoError(t, g.Release(), "a release after Close")
				_, held := other.Owner()
				require.False(t, held, "the release reached the file")
			})
		}
	}
}

// A Locker's Lock, which cannot return an error, panics with it once the
// lock is closed (the handle's Close or its segment's), as its doc says:
// for a stranger and for the holder alike, whose recursive Lock is an
// acquisition too. The slot is left as it was.
func TestLockerAfterClose(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		for _, closer := range []string{"handle", "segment"} {
			t.Run(mode.String()+"/"+closer, func(t *testing.T) {
				t.Parallel()
				path := newSegmentPath(t)
				seg, err := shm.Open(path, shm.Options{})
				require.NoError(t, err)
				t.Cleanup(func() { _ = seg.Close() })
				l, err := spinlock.Open(seg, 0, mode)
				require.NoError(t, err)
				holder := l.Locker(holderFor(mode))
				holder.Lock()
				want := shm.ErrClosed
				if closer == "handle" {
					want = spinlock.ErrLockClosed
					require.NoError(t, l.Close())
				} else {
					require.NoError(t, seg.Close())
				}
				before := stateOf(l.Slot())
				require.ErrorIs(t, testproc.RecoverAs[*spinlock.LockerPanic](t, holder.Lock), want, "the holder's Lock")
				require.ErrorIs(t, testproc.RecoverAs[*spinlock.LockerPanic](t, l.Locker(holderFor(mode)).Lock), want, "a stranger's Lock")
				require.Equal(t, before, stateOf(l.Slot()), "the slot changed")
				holder.Unlock() // releases still work
				_, held := openPath(t, path, mode).Owner()
				require.False(t, held, "the release reached the file")
			})
		}
	}
}

// The holder that repaired the data says so after the handle's or the
// segment's Close, as it releases after it: MarkConsistent clears the mark
// in the file, and the next holder (another mapping) is not told. A guard
// that holds nothing is refused as before Close.
func TestMarkConsistentAfterClose(t *testing.T) {
	t.Parallel()
	for _, closer := range []string{"handle", "segment"} {
		t.Run(closer, func(t *testing.T) {
			t.Parallel()
			path := newSegmentPath(t)
			seg, err := shm.Open(path, shm.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = seg.Close() })
			l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
			require.NoError(t, err)
			_, err = l.Lock(spinlock.NewHolder())
			require.NoError(t, err)
			_, err = l.ForceUnlock() // as a dead holder's takeover: marked
			require.NoError(t, err)
			g, err := l.Lock(spinlock.NewHolder())
			require.NoError(t, err)
			require.True(t, g.Inconsistent())
			if closer == "handle" {
				require.NoError(t, l.Close())
			} else {
				require.NoError(t, seg.Close())
			}
			var idle spinlock.Guard
			require.ErrorIs(t, idle.MarkConsistent(), spinlock.ErrNotHeld)
			require.NoError(t, g.MarkConsistent(), "the holder's, after Close")
			require.NoError(t, g.Release())
			next, err := openPath(t, path, spinlock.PIDTID).Lock(spinlock.NewHolder())
			require.NoError(t, err)
			require.False(t, next.Inconsistent(), "the repair said after Close is lost")
			require.NoError(t, next.Release())
		})
	}
}
