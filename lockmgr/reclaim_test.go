package lockmgr_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
)

// Reclaim ends the holds of dead processes (here one killed with SIGKILL)
// and the expired ones, leaves live holds alone, reports each, marks the
// resources inconsistent; a dry run reports the same and changes nothing.
func TestReclaimEndsDeadAndExpiredHolds(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	m, _, path := newManagerAt(t, 8, lockmgr.Options{Clock: clk})
	dead := testproc.Start(t, "hold", path, "dead-res", "victim", "exclusive")
	dead.WaitLine(t, "held")
	dead.Kill(t)
	ctx := context.Background()
	_, err := m.Acquire(ctx, "lease", "slow", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Second})
	require.NoError(t, err)
	_, err = m.Acquire(ctx, "live", "me", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	clk.Advance(time.Second)

	want := []lockmgr.EndedHold{
		{Resource: "dead-res", Owner: "victim", PID: dead.PID(), Why: lockmgr.EndedDead},
		{Resource: "lease", Owner: "slow", PID: -1, Why: lockmgr.EndedExpired},
	}
	before := m.List()
	got, err := m.Reclaim(true)
	require.NoError(t, err)
	requireEnded(t, want, got)
	require.Equal(t, before, m.List(), "a dry run changes nothing")

	got, err = m.Reclaim(false)
	require.NoError(t, err)
	requireEnded(t, want, got)
	for _, res := range []string{"dead-res", "lease"} {
		ri, err := m.Inspect(res)
		require.NoError(t, err)
		require.Empty(t, ri.Holders, res)
		require.True(t, ri.Inconsistent, res)
	}
	ri, err := m.Inspect("live")
	require.NoError(t, err)
	require.Len(t, ri.Holders, 1, "a live hold stays")
	got, err = m.Reclaim(false)
	require.NoError(t, err)
	require.Empty(t, got, "nothing left to do")
}

// requireEnded compares ended holds in any order; a PID of -1 in want
// matches this process.
func requireEnded(t *testing.T, want, got []lockmgr.EndedHold) {
	t.Helper()
	require.Len(t, got, len(want))
	for _, w := range want {
		found := false
		for _, g := range got {
			if g.Resource == w.Resource && g.Owner == w.Owner && g.Why == w.Why && (g.PID == w.PID || w.PID == -1) {
				found = true
				id, _ := proc.Unpack(g.Process)
				require.EqualValues(t, g.PID, id.PID, "the packed identity of %+v", g)
			}
		}
		require.True(t, found, "%+v not in %+v", w, got)
	}
}

// An operator ends a live holder's hold: the version strictly grows (the
// holder's fencing token is stale), the resource is free and marked
// inconsistent, and the holder's late release gets ErrLockNotHeld.
func TestForceRelease(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, 4, lockmgr.Options{})
	ctx := context.Background()
	info, err := m.Acquire(ctx, "r", "stuck", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	ended, err := m.ForceRelease("r")
	require.NoError(t, err)
	requireEnded(t, []lockmgr.EndedHold{{Resource: "r", Owner: "stuck", PID: -1, Why: lockmgr.EndedForced}}, ended)
	require.ErrorIs(t, m.CheckVersion("r", info.Version), lockmgr.ErrVersionConflict, "the old fencing token is stale")
	next, err := m.Acquire(ctx, "r", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.Greater(t, next.Version, info.Version)
	require.True(t, next.Inconsistent)
	require.ErrorIs(t, m.Release("r", "stuck"), lockmgr.ErrLockNotHeld, "the old holder's release")
	require.NoError(t, m.Release("r", "next"))
	ended, err = m.ForceRelease("r")
	require.NoError(t, err)
	require.Empty(t, ended)
	ended, err = m.ForceRelease("never")
	require.NoError(t, err)
	require.Empty(t, ended)
}

// An owner whose hold an operator ended, granted the resource again, has
// had its news (the grant): a second release of its new hold, after the
// first, is the release of a lock nobody holds (nil and a warning), not
// an operator's end of a hold again.
func TestForcedOwnerGrantedAgain(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, 4, lockmgr.Options{})
	ctx := context.Background()
	_, err := m.Acquire(ctx, "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	_, err = m.ForceRelease("r")
	require.NoError(t, err)
	_, err = m.Acquire(ctx, "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.NoError(t, m.Release("r", "a"))
	require.NoError(t, m.Release("r", "a"), "a release again, of a lock nobody holds")
}
