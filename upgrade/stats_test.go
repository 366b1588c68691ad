package upgrade_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/upgrade"
)

// An upgrade mutex's counters: a second handle that waits 10 ms for the
// unique lock, N times, counts N contended waits and N timeouts; a shared
// waiter released by the writer's Unlock counts one granted wait; the
// uncontended acquisitions count nothing.
func TestLockStatsTimeouts(t *testing.T) {
	t.Parallel()
	const n = 3
	seg, _ := newSegment(t)
	a, err := upgrade.Open(seg, 0)
	require.NoError(t, err)
	b, err := upgrade.Open(seg, 0)
	require.NoError(t, err)
	st := seg.LockStats(layout.KindUpgrades, 0)
	require.NotNil(t, st)

	require.NoError(t, a.Lock())
	require.NoError(t, a.Unlock())
	require.NoError(t, a.LockUpgrade())
	require.NoError(t, a.UpgradeToUnique())
	require.Zero(t, st.Contended.Load(), "uncontended")

	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		err := b.LockContext(ctx)
		cancel()
		require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
	}
	require.Equal(t, uint64(n), st.Contended.Load(), "Contended")
	require.Equal(t, uint32(n), st.Timeouts.Load(), "Timeouts")

	done := make(chan error)
	go func() { done <- b.LockShared() }()
	// Asleep, its wait begun: a reader that came after the downgrade
	// would get in at once and count no wait.
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.SharedWaiters == 1 }, "the reader to sleep behind the writer")
	require.NoError(t, a.UniqueToUpgrade())
	require.NoError(t, <-done)
	require.NoError(t, b.UnlockShared())
	require.NoError(t, a.UnlockUpgrade())
	require.Equal(t, uint64(n+1), st.Contended.Load(), "Contended")
	require.Equal(t, uint32(n), st.Timeouts.Load(), "Timeouts")
	var hist uint32
	for i := range st.WaitHist {
		hist += st.WaitHist[i].Load()
	}
	require.Equal(t, uint32(n+1), hist, "waits in the histogram")
}
