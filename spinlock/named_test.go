package spinlock_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/spinlock"
)

// Two processes that name one lock share one owner slot.
func TestNamedAcrossProcesses(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	sc, err := scratchOf(seg)
	require.NoError(t, err)
	l, err := spinlock.Named(seg, "x", spinlock.PIDTID)
	require.NoError(t, err)
	again, err := spinlock.Named(seg, "x", spinlock.PIDTID)
	require.NoError(t, err)
	require.Same(t, l.Slot(), again.Slot(), "one name, one slot, in one process")
	other, err := spinlock.Named(seg, "y", spinlock.PIDTID)
	require.NoError(t, err)
	require.NotSame(t, l.Slot(), other.Slot())

	c := startChild(t, "named", path, "x")
	var pid, tid uint64
	_, err = fmt.Sscanf(c.waitLine(t, "held "), "%x %x", &pid, &tid)
	require.NoError(t, err)
	require.Equal(t, c.identity(t), pid)
	owner, held := l.Owner()
	require.True(t, held, "the other process's hold is visible here")
	require.Equal(t, spinlock.Identity{PID: pid, TID: tid}, owner)
	_, err = l.TryLock(spinlock.NewHolder())
	require.ErrorIs(t, err, spinlock.ErrWouldBlock)
	_, err = other.TryLock(spinlock.NewHolder())
	require.NoError(t, err, "another name is another lock")

	i, err := seg.Lookup(layout.KindOwnerSlots, "x")
	require.NoError(t, err)
	slot, err := seg.Slot(i)
	require.NoError(t, err)
	require.Same(t, slot, l.Slot())

	sc.atomic(offStop).Store(1)
	c.waitOK(t)
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	require.False(t, g.Reclaimed())
	require.EqualValues(t, 1, l.Generation(), "the other process's release")
	require.NoError(t, g.Release())
}

func namedHelper(args []string) int {
	seg, _, sc, err := openLock(args[0], spinlock.PIDTID)
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	l, err := spinlock.Named(seg, args[1], spinlock.PIDTID)
	if err != nil {
		return fail("%v", err)
	}
	me := spinlock.NewHolder()
	g, err := l.TryLock(me)
	if err != nil {
		return fail("lock: %v", err)
	}
	fmt.Printf("held %x %x\n", me.PID, me.TID)
	if err := waitWord(sc.atomic(offStop), 1); err != nil {
		return fail("%v", err)
	}
	if err := g.Release(); err != nil {
		return fail("release: %v", err)
	}
	return 0
}
