package spinlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
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

	c := testproc.Start(t, "named", path, "x")
	var pid, tid uint64
	_, err = fmt.Sscanf(c.WaitLine(t, "held "), "%x %x", &pid, &tid)
	require.NoError(t, err)
	require.Equal(t, c.Identity(t), pid)
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
	c.WaitOK(t)
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	require.False(t, g.Reclaimed())
	require.EqualValues(t, 1, l.Generation(), "the other process's release")
	require.NoError(t, g.Release())
}

// Named records the mode: naming the lock in the other mode is refused,
// an empty name is a bad name, and Index releases the claim.
func TestNamedModeAndIndex(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	l, err := spinlock.Named(seg, "m", spinlock.Token)
	require.NoError(t, err)
	_, err = spinlock.Named(seg, "m", spinlock.PIDTID)
	require.ErrorIs(t, err, spinlock.ErrModeMismatch)
	require.ErrorIs(t, err, shm.ErrUseMismatch)
	_, err = spinlock.Named(seg, "", spinlock.PIDTID)
	require.ErrorIs(t, err, layout.ErrBadName)

	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Len(t, claims, 1, "refused calls claimed nothing")
	mode, said := spinlock.ModeOfClaimUse(claims[0].Use)
	require.True(t, said)
	require.Equal(t, spinlock.Token, mode)
	require.Equal(t, claims[0].Index, l.Index())
	require.Equal(t, -1, spinlock.New(spinlock.NewInProcessState(), spinlock.PIDTID).Index())

	require.NoError(t, seg.Release(layout.KindOwnerSlots, l.Index()))
	_, err = seg.Lookup(layout.KindOwnerSlots, "m")
	require.ErrorIs(t, err, shm.ErrNotFound)
}

// Open by index refuses the mode a slot's claim contradicts, as Named
// does, and changes nothing; a slot whose claim says no mode (Claim) takes
// the mode of its first Open and then refuses the other; one whose use is
// no mode, or that is not claimed, opens in either mode.
func TestOpenRefusesTheClaimsOtherMode(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	for _, mode := range []spinlock.Mode{spinlock.PIDTID, spinlock.Token} {
		other := spinlock.Mode(1 - mode)
		named, err := spinlock.Named(seg, "m"+mode.String(), mode)
		require.NoError(t, err)
		before, err := seg.Claims(layout.KindOwnerSlots)
		require.NoError(t, err)
		_, err = spinlock.Open(seg, named.Index(), other)
		require.ErrorIs(t, err, spinlock.ErrModeMismatch, "%v slot opened as %v", mode, other)
		require.ErrorIs(t, err, shm.ErrUseMismatch)
		after, err := seg.Claims(layout.KindOwnerSlots)
		require.NoError(t, err)
		require.Equal(t, before, after, "a refused Open changes no claim")
		l, err := spinlock.Open(seg, named.Index(), mode)
		require.NoError(t, err)
		require.NoError(t, l.Close())
		require.NoError(t, named.Close())
	}
	unsaid, err := seg.Claim(layout.KindOwnerSlots, "unsaid")
	require.NoError(t, err)
	notAMode, err := seg.ClaimAs(layout.KindOwnerSlots, "other-use", 7)
	require.NoError(t, err)
	unclaimed := seg.Len(layout.KindOwnerSlots) - 1
	l, err := spinlock.Open(seg, unsaid, spinlock.Token)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	_, err = spinlock.Open(seg, unsaid, spinlock.PIDTID)
	require.ErrorIs(t, err, spinlock.ErrModeMismatch, "the claim took token mode from its first Open")
	for _, i := range []int{notAMode, unclaimed} {
		for _, mode := range []spinlock.Mode{spinlock.PIDTID, spinlock.Token} {
			l, err := spinlock.Open(seg, i, mode)
			require.NoError(t, err, "slot %d in %v mode", i, mode)
			require.NoError(t, l.Close())
		}
	}
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

// Short-lived processes each name a lock of their own on a segment with
// four slots, use it and close it: the claims of the ones that exited are
// recycled, so none of the 40 finds the table full. (A process killed
// without Close leaves its reference: see the segment's reclaim.)
func TestNamedClaimsAreRecycled(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 4, LockMgrEntries: scratchEntries}})
	require.NoError(t, err)
	defer seg.Close()
	const procs, atOnce = 40, 3
	for i := 0; i < procs; i += atOnce {
		var batch []*testproc.Child
		for j := i; j < min(i+atOnce, procs); j++ {
			batch = append(batch, testproc.Start(t, "named-once", path, fmt.Sprintf("job-%d", j)))
		}
		for _, c := range batch {
			c.WaitOK(t)
		}
	}
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Empty(t, claims, "every process closed its lock")
}

// namedOnceHelper names a lock, takes it, releases it and closes it:
// PATH NAME.
func namedOnceHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	l, err := spinlock.Named(seg, args[1], spinlock.PIDTID)
	if err != nil {
		return fail("%v", err)
	}
	g, err := l.Lock(spinlock.NewHolder())
	if err != nil {
		return fail("lock: %v", err)
	}
	if err := g.Release(); err != nil {
		return fail("release: %v", err)
	}
	if err := l.Close(); err != nil {
		return fail("close: %v", err)
	}
	if _, err := l.Lock(spinlock.NewHolder()); !errors.Is(err, spinlock.ErrLockClosed) {
		return fail("lock after close: %v", err)
	}
	return 0
}

// Many short-lived processes name a lock each on a segment of four slots
// and exit without Close, some killed with SIGKILL: their references are
// recorded per process, so the next claim that finds no room drops the
// dead ones' and recycles the claims; none of them finds the table full.
// A live process's claim is never dropped meanwhile.
func TestDeadProcessesNamesComeBack(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 4, LockMgrEntries: scratchEntries}})
	require.NoError(t, err)
	defer seg.Close()
	live := testproc.Start(t, "claim-exit", path, "live", "wait")
	live.WaitLine(t, "ready")

	procs := 1000
	if testproc.Race {
		procs = 200
	}
	// Three at a time: with the live process's claim they fill the four
	// slots, so every batch after the first lives on the claims of the dead
	// ones before it. (Four at a time failed once in CI: a batch whose four
	// were alive together found the table full.)
	testproc.Churn(t, procs, 3, "claim-exit", path, "job")
	i, err := seg.Lookup(layout.KindOwnerSlots, "live")
	require.NoError(t, err, "the live process's claim stays")
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	for _, c := range claims {
		if c.Index == i {
			require.EqualValues(t, 1, c.Refs)
		}
	}
	found, err := seg.CheckDirectories()
	require.NoError(t, err)
	require.Empty(t, found)
}

// claimExitHelper names a lock, takes and releases it, and then exits or
// waits to be killed, never closing it: PATH NAME exit|wait.
func claimExitHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return fail("%v", err)
	}
	l, err := spinlock.Named(seg, args[1], spinlock.PIDTID)
	if err != nil {
		return fail("%v", err)
	}
	g, err := l.Lock(spinlock.NewHolder())
	if err != nil {
		return fail("lock: %v", err)
	}
	if err := g.Release(); err != nil {
		return fail("release: %v", err)
	}
	if args[2] == "exit" {
		fmt.Println("ready exiting")
		return 0
	}
	fmt.Println("ready")
	time.Sleep(3 * testTimeout)
	return fail("not killed")
}
