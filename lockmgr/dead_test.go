package lockmgr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
)

// holdManyHelper takes RESOURCE in MODE once for each OWNER, prints
// "held", and waits to be killed. Args: PATH RESOURCE MODE OWNER...
func holdManyHelper(args []string) int {
	seg, m, _, err := openHelper(args[0])
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	mode, err := lockmgr.ParseMode(args[2])
	if err != nil {
		return fail("%v", err)
	}
	for _, owner := range args[3:] {
		if _, err := m.Acquire(context.Background(), args[1], owner, mode, lockmgr.AcquireOptions{}); err != nil {
			return fail("acquire as %s: %v", owner, err)
		}
	}
	fmt.Println("held")
	time.Sleep(2 * testTimeout)
	return fail("not killed")
}

// A resource whose every holder record is taken by collaborative holders
// that died: a collaborative acquisition conflicts with none of them, so
// none is ended for a conflict, yet their records are the only room there
// is. They make room (reclaimed, as a conflict would end them) instead of
// keeping the resource full for good: the acquisition that does not wait
// is granted, not refused with ErrTooManyHolders, and the one that waits
// is not left asleep behind holders that will never leave.
func TestDeadHoldersMakeRoom(t *testing.T) {
	t.Parallel()
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			t.Parallel()
			m, _, path := newManagerAt(t, 2*(lockmgr.MaxHolders/2), lockmgr.Options{})
			owners := make([]string, lockmgr.MaxHolders)
			for i := range owners {
				owners[i] = fmt.Sprintf("dead-%d", i)
			}
			h := testproc.Start(t, "hold-many", append([]string{path, "r", "collaborative"}, owners...)...)
			h.WaitLine(t, "held")
			h.Kill(t)
			opts := lockmgr.AcquireOptions{}
			if wait {
				opts = untilWoken
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			info, err := m.Acquire(ctx, "r", "new", lockmgr.Collaborative, opts)
			require.NoError(t, err, "the dead holders keep the resource full")
			require.True(t, info.Reclaimed, "the dead holders' end is not told")
			require.True(t, info.Inconsistent)
			ri, err := m.Inspect("r")
			require.NoError(t, err)
			require.Len(t, ri.Holders, 1, "every dead holder is ended, as a conflict ends them")
			require.NoError(t, m.Release("r", "new"))
			found, err := m.Check()
			require.NoError(t, err)
			require.Empty(t, found)
		})
	}
}

// An owner's hold whose process died does not keep that owner out: an
// owner name outlives a process (an agent restarted under its name), and
// the hold of the dead process is ended as any acquisition that conflicts
// with it would end it, not taken for the new process's own (which would
// answer ErrAlreadyHeld for good: nobody else conflicts with it, and it
// has no TTL). A live process's hold under the same name is still held.
func TestSameOwnerAfterDeath(t *testing.T) {
	t.Parallel()
	m, _, path := newManagerAt(t, 8, lockmgr.Options{Logger: discard()})
	ctx := context.Background()
	live := testproc.Start(t, "hold", path, "live", "agent", "exclusive")
	live.WaitLine(t, "held")
	_, err := m.Acquire(ctx, "live", "agent", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrAlreadyHeld, "a live process's hold under the same name")

	dead := testproc.Start(t, "hold", path, "r", "agent", "exclusive")
	dead.WaitLine(t, "held")
	dead.Kill(t)
	for _, mode := range []lockmgr.Mode{lockmgr.Exclusive, lockmgr.Collaborative} {
		info, err := m.Acquire(ctx, "r", "agent", mode, lockmgr.AcquireOptions{})
		require.NoError(t, err, "%v: the dead process's hold keeps its owner out", mode)
		require.Equal(t, mode == lockmgr.Exclusive, info.Reclaimed, "%v: only the first grant ended a dead hold", mode)
		require.True(t, info.Inconsistent)
		ri, err := m.Inspect("r")
		require.NoError(t, err)
		require.Len(t, ri.Holders, 1)
		require.True(t, ri.Holders[0].Alive)
		require.NoError(t, m.Release("r", "agent"))
		require.NoError(t, m.Release("r", "agent"), "the dead hold's end was told by the grant, not by a later release")
	}
	found, err := m.Check()
	require.NoError(t, err)
	require.Empty(t, found)
}
