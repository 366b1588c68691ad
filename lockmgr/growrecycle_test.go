package lockmgr_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/lockmgr"
)

// TestOverflowRecyclesIdleResource: a resource stays in the table after
// its last release, so a table in use for a while has every entry taken
// by resources that nobody holds. An insert then recycles one of them;
// so must a collaborative resource that needs an overflow entry for its
// next holder. Before, grow looked for an empty or free entry only, and
// the holder past the first entry's records got ErrTableFull for as long
// as the idle resources stayed, though the table had room.
func TestOverflowRecyclesIdleResource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, _ := newManager(t, 4, lockmgr.Options{}) // three resources
	for _, r := range []string{"idle-1", "idle-2"} {
		_, err := m.Acquire(ctx, r, "o", X, lockmgr.AcquireOptions{})
		require.NoError(t, err)
		require.NoError(t, m.Release(r, "o"))
	}
	owners := []string{"a", "b", "c", "d", "e", "f"} // three entries' records
	var last uint64
	for i, o := range owners {
		info, err := m.Acquire(ctx, "shared", o, C, lockmgr.AcquireOptions{})
		require.NoError(t, err, "holder %d of a table whose other resources nobody holds", i)
		require.Greater(t, info.Version, last)
		last = info.Version
	}
	_, err := m.Acquire(ctx, "shared", "g", C, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrTableFull, "every entry is the resource's now")
	ri, err := m.Inspect("shared")
	require.NoError(t, err)
	require.Len(t, ri.Holders, len(owners))
	for _, o := range owners {
		require.NoError(t, m.Release("shared", o))
	}
	for _, r := range []string{"idle-1", "idle-2"} {
		_, err := m.Acquire(ctx, r, "o", X, lockmgr.AcquireOptions{})
		require.NoError(t, err, "%s comes back", r)
		require.NoError(t, m.Release(r, "o"))
	}
	problems, err := m.Check()
	require.NoError(t, err)
	require.Empty(t, problems, "the table is sound")
}
