package spinlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// forceStepHelper (PATH STOPS) forces owner slot 0 of the segment at PATH
// (pid/tid mode), saying how far it got: "busy" when it finds another
// force's lock held, "took" when it has taken the lock word over, "taken"
// when it has made the takeover's other stores (each the first time
// only); at each of those named in STOPS (comma-separated, or "-" for
// none) it then waits for a line on stdin. It prints "result forced PID
// TID" (the identity freed, in hex) or "result error ERR", then waits for
// one more line on stdin (end of input will do) before it exits, so that
// the parent can look at the slot while the forcer lives.
func forceStepHelper(args []string) int {
	steps := testproc.NewSteps(args[1])
	spinlock.SetForceHooks(steps.Hook("busy"), steps.Hook("took"), steps.Hook("taken"))
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return fail("open: %v", err)
	}
	defer seg.Close()
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	if err != nil {
		return fail("open: %v", err)
	}
	if owner, err := l.ForceUnlock(); err != nil {
		fmt.Println("result error", err)
	} else {
		fmt.Printf("result forced %x %x\n", owner.PID, owner.TID)
	}
	steps.Wait()
	return 0
}

// Two forces of one slot, from two processes: the first has taken the
// lock word over and not yet stored its TID when the second reads the
// slot. Overlapping, the second took the first's takeover over, the
// first's TID landed on the second's hold, and both gave up (ErrNotOwner):
// the slot stayed with the second forcer's process, held by nobody, for
// as long as it lived. Forces serialize (ForceUnlock): the second waits
// for the first, which frees the hold, and then finds the slot free. The
// helpers stop at the named points, so the interleaving is exact; both
// still live when the slot is looked at.
func TestTwoForcesOverlap(t *testing.T) {
	t.Parallel()
	path, l, holder, g := heldSlot(t)

	a := testproc.StartWithStdin(t, "force-step", path, "took")
	a.WaitLine(t, "took") // the first has the lock word, not yet its TID
	b := testproc.StartWithStdin(t, "force-step", path, "taken")
	waitFor(t, func() bool {
		_, taken := testproc.Line(b.Out.String(), "taken")
		_, busy := testproc.Line(b.Out.String(), "busy")
		return taken || busy
	}, "the second forcer to take the slot over or wait")
	a.Send(t, "go")
	aGot := a.WaitLine(t, "result ")
	if _, taken := testproc.Line(b.Out.String(), "taken"); taken {
		b.Send(t, "go")
	}
	bGot := b.WaitLine(t, "result ")
	st := stateOf(l.Slot())
	next, err := l.TryLock(spinlock.NewHolder())
	require.NoError(t, err, "a lock after both forces, their processes alive: slot %+v (the second forcer is %x)", st, b.Identity(t))
	require.NoError(t, next.Release())
	require.Equal(t, fmt.Sprintf("forced %x %x", holder.PID, holder.TID), aGot, "the first force")
	require.True(t, strings.HasPrefix(bGot, "error ") && strings.Contains(bGot, spinlock.ErrNotHeld.Error()), "the second force: %s", bGot)
	a.Send(t, "end")
	b.Send(t, "end")
	a.WaitOK(t)
	b.WaitOK(t)
	require.ErrorIs(t, g.Release(), spinlock.ErrNotOwner, "the forced holder's own release")
}

// Two ForceUnlock calls of one slot from two processes serialize: while
// the first is stopped inside its force, the second waits, reading
// nothing, and a third in this process with a deadline gives up, having
// changed nothing. The first frees the hold, the second then finds it
// free.
func TestForcesSerialize(t *testing.T) {
	t.Parallel()
	path, l, holder, g := heldSlot(t)
	a := testproc.StartWithStdin(t, "force-step", path, "took")
	a.WaitLine(t, "took") // stopped inside its force
	b := testproc.StartWithStdin(t, "force-step", path, "-")
	waitFor(t, func() bool {
		_, busy := testproc.Line(b.Out.String(), "busy")
		_, took := testproc.Line(b.Out.String(), "took")
		return busy || took
	}, "the second forcer to wait or take the slot over")
	_, took := testproc.Line(b.Out.String(), "took")
	require.False(t, took, "the second force took the slot over while the first ran:\n%s", b.Out)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	before := stateOf(l.Slot())
	_, err := l.ForceUnlockContext(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a force with a deadline while another runs")
	require.Equal(t, before, stateOf(l.Slot()), "the force that gave up changed the slot")
	require.Equal(t, a.Identity(t), before.PID, "the first forcer has the lock word")
	a.Send(t, "go")
	require.Equal(t, fmt.Sprintf("forced %x %x", holder.PID, holder.TID), a.WaitLine(t, "result "))
	require.Contains(t, b.WaitLine(t, "result "), spinlock.ErrNotHeld.Error())
	a.Send(t, "end")
	b.Send(t, "end")
	a.WaitOK(t)
	b.WaitOK(t)
	require.ErrorIs(t, g.Release(), spinlock.ErrNotOwner)
}

// A token-mode force is one CAS and takes no lock: it goes on while a
// force of the slot is stopped mid-way (here this test holds the slot's
// operator lock).
func TestTokenForceTakesNoLock(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	l, err := spinlock.Open(seg, 0, spinlock.Token)
	require.NoError(t, err)
	tok := spinlock.NewToken()
	_, err = l.Lock(tok)
	require.NoError(t, err)
	unlock, ok, err := seg.TryLockOperator(layout.KindOwnerSlots, 0)
	require.NoError(t, err)
	require.True(t, ok)
	defer unlock()
	owner, err := l.ForceUnlockContext(t.Context())
	require.NoError(t, err)
	require.Equal(t, tok, owner)
	_, err = l.ForceUnlock()
	require.True(t, errors.Is(err, spinlock.ErrNotHeld), "%v", err)
}

// heldSlot makes a segment whose slot 0 a new holder of this process
// holds in pid/tid mode: what the forcers of these tests force.
func heldSlot(t *testing.T) (path string, l *spinlock.Lock, holder spinlock.Identity, g *spinlock.Guard) {
	t.Helper()
	seg, path := newSegment(t)
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	holder = spinlock.NewHolder()
	g = new(spinlock.Guard)
	require.NoError(t, g.Lock(l, holder))
	return path, l, holder, g
}
