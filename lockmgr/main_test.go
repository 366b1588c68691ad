package lockmgr_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

func TestMain(m *testing.M) { testproc.Main(m, helpers) }

// newManager creates a segment with a lock table of entries entries (one
// of them the header) and a Manager over it.
func newManager(tb testing.TB, entries int, opts lockmgr.Options) (*lockmgr.Manager, *shm.Segment) {
	tb.Helper()
	seg, err := shm.Create(testproc.SegmentPath(tb), shm.Options{Options: layout.Options{Slots: 1, Upgrades: 1, LockMgrEntries: entries}})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = seg.Close() })
	m, err := lockmgr.Open(seg, opts)
	require.NoError(tb, err)
	return m, seg
}
