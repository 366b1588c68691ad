package lockmgr_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
)

// A contended resource's counters: N acquisitions that wait 10 ms behind a
// holder and give up count N contended waits and N timeouts in the stats
// entry of the resource's lock-manager entry; the uncontended grant counts
// nothing.
func TestLockStatsTimeouts(t *testing.T) {
	t.Parallel()
	const n = 3
	m, seg := newManager(t, 8, lockmgr.Options{})
	ctx := context.Background()
	_, err := m.Acquire(ctx, "res", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	for range n {
		_, err := m.Acquire(ctx, "res", "waiter", lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: 10 * time.Millisecond})
		require.True(t, errors.Is(err, lockmgr.ErrTimeout), "got %v, want ErrTimeout", err)
	}
	var contended uint64
	var timeouts, hist uint32
	for i := range seg.Len(layout.KindLockMgr) {
		st := seg.LockStats(layout.KindLockMgr, i)
		require.NotNil(t, st)
		contended += st.Contended.Load()
		timeouts += st.Timeouts.Load()
		for j := range st.WaitHist {
			hist += st.WaitHist[j].Load()
		}
	}
	require.Equal(t, uint64(n), contended, "Contended")
	require.Equal(t, uint32(n), timeouts, "Timeouts")
	require.Equal(t, uint32(n), hist, "waits in the histogram")
}

// Stats never goes back: a resource recycled while Stats reads the table
// moves its counters into the header, which Stats may have read already,
// and its entry then holds another resource's counters. Stats reads again
// rather than report the sum without them (a Prometheus counter that goes
// back is taken for a reset, package metrics). The recycling happens at
// the step hook, after Stats read the header. Not parallel: it sets the
// package's step hook.
func TestStatsAcrossRecycling(t *testing.T) {
	m, _ := newManager(t, 2, lockmgr.Options{}) // one resource entry
	ctx := context.Background()
	grantAndRelease(t, m, "a", 3)
	before := m.Stats()
	recycled := false
	lockmgr.SetStepHook(func(step string) {
		if step == "stats:head" && !recycled {
			recycled = true
			_, err := m.Acquire(ctx, "b", "o", lockmgr.Exclusive, lockmgr.AcquireOptions{}) // recycles a
			require.NoError(t, err)
			require.NoError(t, m.Release("b", "o"))
		}
	})
	defer lockmgr.SetStepHook(nil)
	got := m.Stats()
	require.True(t, recycled, "the hook did not run")
	require.Equal(t, before.TotalLocks+1, got.TotalLocks, "TotalLocks")
	require.Equal(t, before.Released+1, got.Released, "Released")
	require.Equal(t, 1, got.Resources)
}

// An entry recycled for another resource changes its version: the new
// resource starts above every version the entry had. The readers (List,
// Inspect, Stats) take an entry whose lock was free and whose version did
// not move while they read it for a whole one; an entry recycled and given
// a resource of the same version in between (a Declare, which grants
// nothing) passed, and a reader could pair the old name with words of the
// new resource's chain.
func TestRecycledEntryChangesVersion(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, 2, lockmgr.Options{}) // one resource entry
	ctx := context.Background()
	info, err := m.Acquire(ctx, "a", "o", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.NoError(t, m.Release("a", "o"))
	before, err := m.Inspect("a")
	require.NoError(t, err)
	require.Greater(t, before.Version, info.Version)
	require.NoError(t, m.Declare("b")) // recycles a's entry
	after, err := m.Inspect("b")
	require.NoError(t, err)
	require.Greater(t, after.Version, before.Version, "the entry's version moved with its resource")
	gone, err := m.Inspect("a")
	require.NoError(t, err)
	require.Zero(t, gone.Entry, "a is no longer in the table")
}

// A resource that takes a recycled entry starts with the entry's
// contention counters at zero: they are exported under its name (package
// metrics). Before, it inherited the counters of the resource recycled
// (here a contended wait that gave up), and a resource that came back at
// another entry showed that entry's.
func TestLockStatsResetOnRecycle(t *testing.T) {
	t.Parallel()
	m, seg := newManager(t, 2, lockmgr.Options{}) // one resource entry
	ctx := context.Background()
	_, err := m.Acquire(ctx, "a", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	_, err = m.Acquire(ctx, "a", "waiter", lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: 10 * time.Millisecond})
	require.True(t, errors.Is(err, lockmgr.ErrTimeout), "got %v, want ErrTimeout", err)
	ri, err := m.Inspect("a")
	require.NoError(t, err)
	st := seg.LockStats(layout.KindLockMgr, ri.Entry)
	require.Equal(t, uint64(1), st.Contended.Load(), "a's contended wait")
	require.NoError(t, m.Release("a", "holder"))

	_, err = m.Acquire(ctx, "b", "o", lockmgr.Exclusive, lockmgr.AcquireOptions{}) // recycles a's entry, uncontended
	require.NoError(t, err)
	ri, err = m.Inspect("b")
	require.NoError(t, err)
	require.Equal(t, st, seg.LockStats(layout.KindLockMgr, ri.Entry), "b took a's entry")
	var zero layout.LockStats
	require.Equal(t, &zero, st, "b's counters")
}

// Stats waits for a recycle under way, however long its process is away
// from the CPU in the middle of it: here the recycler stops in retire,
// with the recycled resource's counters moved into the header and still
// in its entry, until Stats has begun to sleep for it (or has returned).
// Before, Stats gave up after snapshotTries yields and summed both, 3
// grants counted twice, which the next Stats took back (a Prometheus
// counter going back; TestScrapeUnderChurn in package metrics saw it
// under load). Not parallel: it sets the package's step hook.
func TestStatsWaitsForARecycle(t *testing.T) {
	m, _ := newManager(t, 2, lockmgr.Options{}) // one resource entry
	ctx := context.Background()
	grantAndRelease(t, m, "a", 3)
	before := m.Stats()
	require.Equal(t, uint64(3), before.TotalLocks)
	paused, waiting, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	lockmgr.SetStepHook(func(step string) {
		switch step {
		case "retire:unlinked":
			close(paused)
			select {
			case <-waiting:
			case <-returned:
			}
		case "stats:wait":
			once.Do(func() { close(waiting) })
		}
	})
	defer lockmgr.SetStepHook(nil)
	acquired := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, "b", "o", lockmgr.Exclusive, lockmgr.AcquireOptions{}) // recycles a
		acquired <- err
	}()
	testproc.Receive(t, paused, "the recycle of a to stop in retire")
	got := m.Stats()
	close(returned)
	require.NoError(t, testproc.Receive(t, acquired, "b's grant"))
	require.Contains(t, []uint64{3, 4}, got.TotalLocks, "a's 3 grants, and b's if it came first")
}

// grantAndRelease acquires and releases resource n times, as owner "o".
func grantAndRelease(t *testing.T, m *lockmgr.Manager, resource string, n int) {
	t.Helper()
	for range n {
		_, err := m.Acquire(context.Background(), resource, "o", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.NoError(t, err)
		require.NoError(t, m.Release(resource, "o"))
	}
}
