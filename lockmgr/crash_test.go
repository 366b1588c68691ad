package lockmgr_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
)

// crashAtHelper makes one change of the table and stops itself (SIGSTOP)
// at the named step of it, under the entry lock, for the test to kill it
// there. OP is acquire (RESOURCE OWNER MODE), release (RESOURCE OWNER: acquires
// exclusively, then releases) or force (RESOURCE). Args:
// PATH STEP OP RESOURCE [OWNER MODE].
func crashAtHelper(args []string) int {
	seg, m, _, err := openHelper(args[0])
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	step := args[1]
	lockmgr.SetStepHook(func(s string) {
		if s != step {
			return
		}
		fmt.Println("at " + s)
		// Continued rather than killed, it must not go on changing the
		// table past the step as if it had crashed there.
		if err := testproc.StopSelf(); err != nil {
			os.Exit(fail("stop at %s: %v", s, err))
		}
		os.Exit(fail("continued at %s", s))
	})
	switch args[2] {
	case "acquire":
		mode, err := lockmgr.ParseMode(args[5])
		if err != nil {
			return fail("%v", err)
		}
		_, err = m.Acquire(context.Background(), args[3], args[4], mode, lockmgr.AcquireOptions{})
		fmt.Printf("acquire: %v\n", err)
	case "release": // acquires, then releases
		_, err := m.Acquire(context.Background(), args[3], args[4], lockmgr.Exclusive, lockmgr.AcquireOptions{})
		if err != nil {
			return fail("acquire: %v", err)
		}
		fmt.Printf("release: %v\n", m.Release(args[3], args[4]))
	case "force":
		_, err := m.ForceRelease(args[3])
		fmt.Printf("force: %v\n", err)
	}
	return fail("step %s not reached", step)
}

// crashAt runs crashAtHelper to step and kills it there.
func crashAt(t *testing.T, path, step string, args ...string) {
	t.Helper()
	c := testproc.Start(t, "crash-at", append([]string{path, step}, args...)...)
	c.WaitLine(t, "at "+step)
	c.WaitStopped(t)
	c.Kill(t)
}

// requireCrashLeft fails the test unless Check finds one thing for each of
// want, which its line contains, and nothing else: the trace of a crash at
// the step, read without the locks the dead process left taken. The test
// then goes on from the state it means to repair, not from one where the
// crash came before the step or after it.
func requireCrashLeft(t *testing.T, m *lockmgr.Manager, want ...string) {
	t.Helper()
	found, err := m.Check()
	require.NoError(t, err)
	require.Len(t, found, len(want), "the crash's trace: %q", found)
	for i, w := range want {
		require.Contains(t, found[i], w, "the crash's trace: %q", found)
	}
}

// What Check says of a crash's traces (check.go).
const (
	noHolder = "with no holder"                                     // a hold's end cut off before its mode was cleared
	orphan   = "an overflow entry that no resource's chain reaches" // a grow or a retire cut off before the chain changed
)

// A process killed while it reclaimed a dead holder's hold, right after it
// freed the holder's record, leaves the resource marked inconsistent: the
// next holder is told.
func TestCrashMidReclaimMarksInconsistent(t *testing.T) {
	t.Parallel()
	m, _, path := newManagerAt(t, 8, lockmgr.Options{})
	dead := testproc.Start(t, "hold", path, "r", "victim", "exclusive")
	dead.WaitLine(t, "held")
	dead.Kill(t)
	crashAt(t, path, "endHold:process", "acquire", "r", "reclaimer", "exclusive")
	requireCrashLeft(t, m, noHolder) // the victim's hold ended, the reclaimer's not begun
	info, err := m.Acquire(context.Background(), "r", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.True(t, info.Inconsistent, "the dead holder's end is not told: %+v", info)
	require.False(t, info.Reclaimed, "a hold was left to reclaim: %+v", info)
}

// A process killed while it forced a live hold off, right after it freed
// the holder's record, leaves the resource marked inconsistent and the
// holder's late release is told of the forced end.
func TestCrashMidForceRelease(t *testing.T) {
	t.Parallel()
	m, _, path := newManagerAt(t, 8, lockmgr.Options{Logger: discard()})
	ctx := context.Background()
	_, err := m.Acquire(ctx, "f", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	crashAt(t, path, "endHold:process", "force", "f")
	requireCrashLeft(t, m, noHolder) // its record freed, no tombstone in it yet
	require.ErrorIs(t, m.Release("f", "holder"), lockmgr.ErrLockNotHeld, "the forced end is not told")
	info, err := m.Acquire(ctx, "f", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.True(t, info.Inconsistent, "the forced end is not told: %+v", info)
}

// retireSetup makes a table of three entries where the next new resource
// recycles "a", a resource nobody holds with an overflow entry; "c" holds
// the last entry, two holders of it.
func retireSetup(t *testing.T) (*lockmgr.Manager, string) {
	t.Helper()
	m, _, path := newManagerAt(t, 4, lockmgr.Options{})
	ctx := context.Background()
	C := lockmgr.Collaborative
	for _, o := range []string{"a1", "a2", "a3"} { // a's third holder needs an overflow entry
		_, err := m.Acquire(ctx, "a", o, C, lockmgr.AcquireOptions{})
		require.NoError(t, err)
	}
	for _, o := range []string{"c1", "c2"} {
		_, err := m.Acquire(ctx, "c", o, C, lockmgr.AcquireOptions{})
		require.NoError(t, err)
	}
	for _, o := range []string{"a1", "a2", "a3"} {
		require.NoError(t, m.Release("a", o))
	}
	return m, path
}

// A process killed while it recycled a resource with an overflow entry:
//   - right after it freed the overflow entry: it leaves no link from the
//     resource to the freed entry (another resource's chain that takes it
//     would otherwise be the first's too, whose holders then block it);
//   - after it unlinked the chain and before it freed the entries: they are
//     unreachable, and the next taker of the insert lock frees them (the
//     table has no other entry for c's third holder).
func TestCrashMidRetire(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		step string
		left []string // Check's findings after the crash
	}{
		{"retire:overflow", nil},
		{"retire:unlinked", []string{orphan}},
	} {
		t.Run(tc.step, func(t *testing.T) {
			t.Parallel()
			m, path := retireSetup(t)
			ctx, C := context.Background(), lockmgr.Collaborative
			crashAt(t, path, tc.step, "acquire", "b", "b1", "exclusive") // recycles a
			requireCrashLeft(t, m, tc.left...)
			for r, in := range map[string]bool{"a": true, "b": false} { // a not yet freed, b not yet in
				ri, err := m.Inspect(r)
				require.NoError(t, err)
				require.Equal(t, in, ri.Entry != 0, "resource %s in the table", r)
			}
			_, err := m.Acquire(ctx, "c", "c3", C, lockmgr.AcquireOptions{}) // needs an overflow entry
			require.NoError(t, err, "the overflow entry was not freed")
			_, err = m.Acquire(ctx, "a", "z", lockmgr.Exclusive, lockmgr.AcquireOptions{})
			require.NoError(t, err, "a's chain has c's overflow entry")
			found, err := m.Check()
			require.NoError(t, err)
			require.Empty(t, found)
		})
	}
}

// A process killed while it released a resource, holding the entry's lock,
// does not keep the entry from being recycled when the table is full:
// recycle takes a dead process's entry lock over as lookups do.
func TestCrashMidReleaseRecycles(t *testing.T) {
	t.Parallel()
	m, _, path := newManagerAt(t, 2, lockmgr.Options{}) // one resource entry
	crashAt(t, path, "endHold:process", "release", "old", "o")
	requireCrashLeft(t, m, noHolder) // the hold ended, its mode not cleared
	info, err := m.Acquire(context.Background(), "new", "n", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err, "the entry of a resource nobody holds is not recycled")
	require.Greater(t, info.Version, uint64(1), "the version goes on from the recycled resource's")
}

// A process killed while it released the last hold of a resource, after
// the hold's end and before it cleared the resource's mode, leaves a mode
// with no holder: Check reports it and Inspect shows the resource
// exclusive and unlocked. Reclaim, the repair that Check's findings call
// for (shmctl reclaim), clears it.
func TestCrashMidReleaseReclaimClearsMode(t *testing.T) {
	t.Parallel()
	m, _, path := newManagerAt(t, 8, lockmgr.Options{})
	crashAt(t, path, "endHold:process", "release", "r", "o")
	requireCrashLeft(t, m, noHolder)
	ended, err := m.Reclaim(false)
	require.NoError(t, err)
	require.Empty(t, ended, "a released hold is not ended again")
	found, err := m.Check()
	require.NoError(t, err)
	require.Empty(t, found)
	ri, err := m.Inspect("r")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Mode(0), ri.Mode)
	require.Equal(t, lockmgr.Unlocked, ri.State)
}

// A process killed while it linked a new overflow entry to a chain, after
// it made the entry an overflow entry and before the link, leaves an entry
// that no chain reaches. Whoever takes the insert lock over from it frees
// that entry: else it were lost to the table for good (here the table is
// full without it).
func TestCrashMidGrowFreesOrphan(t *testing.T) {
	t.Parallel()
	m, _, path := newManagerAt(t, 4, lockmgr.Options{}) // three entries
	ctx := context.Background()
	C := lockmgr.Collaborative
	for _, o := range []string{"a1", "a2"} { // a's entry full
		_, err := m.Acquire(ctx, "a", o, C, lockmgr.AcquireOptions{})
		require.NoError(t, err)
	}
	crashAt(t, path, "grow:unlinked", "acquire", "a", "a3", "collaborative")
	requireCrashLeft(t, m, orphan)
	for _, r := range []string{"b", "c"} { // one of them takes the orphan's entry
		_, err := m.Acquire(ctx, r, "o", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.NoError(t, err, "resource %s", r)
	}
	found, err := m.Check()
	require.NoError(t, err)
	require.Empty(t, found)
}
