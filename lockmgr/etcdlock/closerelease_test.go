package etcdlock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// TestReleaseDuringClose: a hold with a TTL outlives its Manager's
// session, so its Release is allowed during and after Close; each such
// Release revokes the hold's lease in the background. Close waited for
// those revocations with a WaitGroup that the Releases went on adding to
// meanwhile: an Add from zero during Wait, which the race detector
// reports and which may panic ("WaitGroup is reused before previous Wait
// has returned").
func TestReleaseDuringClose(t *testing.T) {
	t.Parallel()
	const holds = 48
	for round := range 6 {
		p := newPrefix(t)
		m, err := etcdlock.New(testCtx(t), newClient(t), etcdlock.Options{Prefix: p, SessionTTL: liveSessionTTL})
		require.NoError(t, err)
		// A TTL the test cannot outlive: any TTL makes a hold outlive
		// the session, and with 5s the first holds expired before their
		// release while the race detector on a loaded machine took longer
		// than that over the 48 acquisitions.
		for i := range holds {
			_, err := m.Acquire(testCtx(t), fmt.Sprintf("r%d", i), "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Hour})
			require.NoError(t, err)
		}
		// Releases in parallel, in waves, so that the count of
		// revocations in flight goes to zero and up again while Close
		// waits.
		started := make(chan struct{})
		var wg sync.WaitGroup
		for i := range holds {
			wg.Go(func() {
				if i >= 4 {
					<-started
					time.Sleep(time.Duration(i%8) * time.Millisecond)
				}
				if err := m.Release(fmt.Sprintf("r%d", i), "a"); err != nil {
					t.Errorf("round %d: release %d: %v", round, i, err)
				}
				if i == 0 {
					close(started)
				}
			})
		}
		<-started
		require.NoError(t, m.Close())
		wg.Wait()
		other := newManager(t, p)
		for i := range holds {
			ri, err := other.Inspect(fmt.Sprintf("r%d", i))
			require.NoError(t, err)
			require.Empty(t, ri.Holders, "round %d: r%d", round, i)
		}
	}
}

// TestReleaseAfterCloseHoldTime: Close folds the Manager's total hold
// time into the shared one and deletes its own key; a Release after
// Close (a TTL hold outlives the session) adds its own hold's time and no
// more. Before, the Manager's running total still held what Close had
// folded, and the Release wrote it to a new key of the Manager: Overview
// counted that time twice (HoldTime grew by r1's 100ms hold besides r2's).
func TestReleaseAfterCloseHoldTime(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	m := newManager(t, p)
	other := newManager(t, p)
	_, err := m.Acquire(testCtx(t), "r1", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond) // a hold time that Close folds, not a synchronisation
	require.NoError(t, m.Release("r1", "a"))
	before := time.Now()
	_, err = m.Acquire(testCtx(t), "r2", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, m.Close())
	o, err := other.Overview()
	require.NoError(t, err)
	folded := o.Stats.HoldTime
	require.NoError(t, m.Release("r2", "a"))
	span := time.Since(before) // r2's hold lies within it
	o, err = other.Overview()
	require.NoError(t, err)
	require.LessOrEqual(t, o.Stats.HoldTime-folded, span, "a Release after Close adds its own hold's time only")
	require.EqualValues(t, 2, o.Stats.Released)
}
