package lockmgr

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// Reclaim frees overflow entries that no chain reaches (left by a process
// that died linking or unlinking one, under a build that did not free
// them when its insert lock was taken over), and leaves the reached ones.
func TestReclaimFreesOrphans(t *testing.T) {
	t.Parallel()
	seg, err := shm.Create(testproc.SegmentPath(t), shm.Options{Options: layout.Options{LockMgrEntries: 8}})
	require.NoError(t, err)
	defer seg.Close()
	m, err := Open(seg, Options{})
	require.NoError(t, err)
	ctx := t.Context()
	for _, o := range []string{"a1", "a2", "a3"} { // a's third holder needs an overflow entry
		_, err := m.Acquire(ctx, "a", o, Collaborative, AcquireOptions{})
		require.NoError(t, err)
	}
	orphan := -1
	for i, e := range m.t.entries[1:] {
		if kindOf(e.Ctl.Load()) == kindEmpty {
			orphan = i + 1
			e.Ctl.Store(kindOverflow)
			break
		}
	}
	require.NotEqual(t, -1, orphan)
	found, err := m.Check()
	require.NoError(t, err)
	require.Len(t, found, 1, "the orphan")
	_, err = m.Reclaim(false)
	require.NoError(t, err)
	found, err = m.Check()
	require.NoError(t, err)
	require.Empty(t, found)
	require.Equal(t, kindFree, kindOf(m.t.entries[orphan].Ctl.Load()))
	for _, o := range []string{"a1", "a2", "a3"} { // a's own overflow entry stayed
		require.NoError(t, m.Release("a", o))
	}
}
