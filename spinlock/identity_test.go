package spinlock_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

func TestIdentityFactories(t *testing.T) {
	t.Parallel()
	self := proc.Self().Pack()
	seen := map[spinlock.Identity]bool{}
	for range 1000 {
		h := spinlock.NewHolder()
		require.Equal(t, self, h.PID)
		require.NotZero(t, h.TID)
		require.Zero(t, h.Token)
		tok := spinlock.NewToken()
		require.NotZero(t, uint32(tok.Token), "the futex compares the low 32 bits: they must not be 0")
		require.Zero(t, tok.PID)
		require.Zero(t, tok.TID)
		require.False(t, seen[h] || seen[tok], "identities must not repeat")
		seen[h], seen[tok] = true, true
	}
	require.Contains(t, spinlock.Identity{Token: 0xab}.String(), "token 0xab")
	stale := spinlock.Identity{PID: proc.MarkStale(self), TID: 1}
	require.True(t, strings.Contains(stale.String(), "stale"), "%v", stale)
}

func TestThreadHolder(t *testing.T) {
	t.Parallel()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	id := spinlock.ThreadHolder()
	require.Equal(t, proc.Self().Pack(), id.PID)
	require.EqualValues(t, unix.Gettid(), uint32(id.TID), "low 32 bits: the thread id")
	require.NotEqual(t, id, spinlock.ThreadHolder(), "random high bits tell holders of one thread apart")
	l := newLock(spinlock.PIDTID)
	g, err := l.Lock(id)
	require.NoError(t, err)
	// Another call's holder is another owner, even on this thread: no
	// recursion (the doc tells a caller to keep the Identity).
	_, err = l.TryLock(spinlock.ThreadHolder())
	require.ErrorIs(t, err, spinlock.ErrWouldBlock)
	require.NoError(t, g.Release())
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	_, err := spinlock.Open(seg, seg.Len(layout.KindOwnerSlots), spinlock.PIDTID)
	require.ErrorIs(t, err, shm.ErrIndex)
	_, err = spinlock.Open(seg, -1, spinlock.PIDTID)
	require.ErrorIs(t, err, shm.ErrIndex)
	_, err = spinlock.Named(seg, strings.Repeat("x", layout.MaxNameLen+1), spinlock.PIDTID)
	require.ErrorIs(t, err, layout.ErrBadName)
	_, err = spinlock.Open(seg, 0, spinlock.Mode(7))
	require.ErrorIs(t, err, spinlock.ErrBadMode)
	_, err = spinlock.Named(seg, "x", spinlock.Mode(7))
	require.ErrorIs(t, err, spinlock.ErrBadMode)
	_, err = seg.Lookup(layout.KindOwnerSlots, "x")
	require.ErrorIs(t, err, shm.ErrNotFound, "a Named with a bad mode claims nothing")
	_, err = spinlock.OpenAt(seg, nil, spinlock.PIDTID)
	require.ErrorIs(t, err, spinlock.ErrNoSlot)
	_, err = spinlock.OpenAt(seg, spinlock.NewInProcessState(), spinlock.Mode(7))
	require.ErrorIs(t, err, spinlock.ErrBadMode)
}
