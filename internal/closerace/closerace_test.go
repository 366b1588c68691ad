package closerace_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/txn"
	"github.com/shmlock/shmlock/upgrade"
)

// closes is how many closes each scenario makes of each kind.
func closes() int {
	switch {
	case testproc.Long():
		return 5000
	case testproc.Race:
		return 200 // the race detector slows every round several times over
	}
	return 1000
}

// Waiters block on a lock that another process holds for the whole test;
// segments are closed under them at moments spread around their liveness
// wake-ups (every 50 ms of waiting, waiters look for dead holders, and a
// writer that has waited marks the holder's word). Every waiter returns
// shm.ErrClosed, and when all is done the lock in the file is exactly as
// the holder left it: no mark, no registration, no hold of this process.
// Once the holder releases, another process's TryLock gets the lock: no
// Close wedged it.
func TestCloseAroundLivenessWakeups(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			// Workers of their own segment and holder each, so that each
			// can check the file after every close.
			const workers = 10
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() { closeAroundWakeups(t, k, (closes()+w)/workers) })
			}
			wg.Wait()
		})
	}
}

func closeAroundWakeups(t *testing.T, k kind, rounds int) {
	observer, path := newSegment(t)
	h := startHolder(t, path, k)
	baseline := k.trace(t, observer)
	for round := 1; round <= rounds; round++ {
		results := startWaiters(t, path, k, h, func(seg *shm.Segment) {
			// Two thirds of the closes land in the 3 ms after the
			// waiters' first liveness wake-up (50 ms after they went to
			// sleep, which takes them microseconds), the rest anywhere
			// before it.
			d := time.Duration(rand.Int64N(int64(50 * time.Millisecond)))
			if rand.IntN(3) != 0 {
				d = 49500*time.Microsecond + time.Duration(rand.Int64N(int64(3*time.Millisecond)))
			}
			time.Sleep(d)
		})
		for i, r := range results {
			if !errors.Is(r.err, shm.ErrClosed) {
				t.Errorf("round %d: waiter %d returned %v while the holder held the lock", round, i, r.err)
				return
			}
			if err := r.w.close(); err != nil {
				t.Errorf("round %d: waiter %d: closing its handle: %v", round, i, err)
				return
			}
		}
		if n := k.held(t, observer); n != 0 {
			t.Errorf("round %d: %d holds of this process are left in the file", round, n)
			return
		}
		if tr := k.trace(t, observer); tr != baseline {
			t.Errorf("round %d: the waiters left something behind in the file:\n got %s\nwant %s", round, tr, baseline)
			return
		}
	}
	h.do(t, "release", "released")
	if err := k.take(observer); err != nil {
		t.Errorf("after %d closes the lock is wedged: %v", rounds, err)
	}
	requireClean(t, observer)
}

// Many goroutines wait while the holder (another process) releases, and
// their segment is closed within microseconds of the release, so that
// Close lands on wake-ups, grants and handoffs in progress. Each waiter
// either holds the lock, as the file records (no phantom hold), or
// returns shm.ErrClosed with nothing of it in the file (no leaked hold);
// at most one holds an exclusive lock; every hold is released after the
// Close; and the lock is then free for another process.
func TestCloseRightAfterRelease(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			observer, path := newSegment(t)
			free := k.trace(t, observer)
			h := startHolder(t, path, k)
			granted := 0
			for round := 1; round <= closes(); round++ {
				var released int
				results := startWaiters(t, path, k, h, func(seg *shm.Segment) {
					time.Sleep(2 * time.Millisecond) // the waiters go to sleep
					released = h.send(t, "release")
					spinFor(time.Duration(rand.Int64N(int64(100 * time.Microsecond))))
				})
				held := 0
				for i, r := range results {
					switch {
					case r.err == nil:
						held++
					case !errors.Is(r.err, shm.ErrClosed):
						t.Fatalf("round %d: waiter %d: %v", round, i, r.err)
					}
				}
				granted += held
				if k.exclusive {
					require.LessOrEqual(t, held, 1, "round %d: two owners", round)
				}
				k.check(t, observer, held, len(results), round)
				for i, r := range results {
					if r.err == nil {
						require.NoError(t, r.w.release(), "round %d: waiter %d releases after Close", round, i)
					}
					require.NoError(t, r.w.close(), "round %d: waiter %d", round, i)
				}
				h.wait(t, "released", released)
				require.NoError(t, k.take(observer), "round %d: the lock is wedged", round)
				require.Equal(t, free, k.trace(t, observer), "round %d: something is left in the file", round)
				h.do(t, "take", "held")
			}
			t.Logf("%d closes, %d of them after a grant", closes(), granted)
			requireClean(t, observer)
		})
	}
}

func newSegment(t *testing.T) (*shm.Segment, string) {
	t.Helper()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, options)
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	return seg, path
}

// startHolder starts the helper that holds k's lock, and waits until it
// does.
func startHolder(t *testing.T, path string, k kind) *holder {
	t.Helper()
	c := testproc.StartWithStdin(t, "hold", path, k.name)
	c.WaitLine(t, "held 0")
	return &holder{c: c}
}

type result struct {
	w   waiter
	err error
}

// startWaiters opens the segment at path, starts k.waiters waiters on it,
// runs before, closes the segment and returns what each waiter's
// acquisition returned.
func startWaiters(t *testing.T, path string, k kind, h *holder, before func(*shm.Segment)) []result {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		t.Error(err)
		return nil
	}
	results := make([]result, k.waiters)
	var wg sync.WaitGroup
	for i := range results {
		w, err := k.waiter(t, seg, h)
		if err != nil {
			t.Error(err)
			_ = seg.Close()
			return nil
		}
		results[i].w = w
		wg.Go(func() { results[i].err = w.acquire() })
	}
	if k.started != nil {
		testproc.WaitFor(t, func() bool { return k.started(t, seg, len(results)) }, "the waiters to begin")
	}
	before(seg)
	if err := seg.Close(); err != nil {
		t.Error(err)
	}
	wg.Wait()
	return results
}

// spinFor busy-waits for d: a sleep would take tens of microseconds more.
func spinFor(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// requireClean runs every package's check on the segment: the closes and
// releases of a scenario must leave no damage behind.
func requireClean(t *testing.T, seg *shm.Segment) {
	t.Helper()
	found, err := seg.CheckDirectories()
	require.NoError(t, err)
	more, err := spinlock.Check(seg)
	require.NoError(t, err)
	found = append(found, more...)
	for i := range seg.Len(layout.KindUpgrades) {
		more, err := upgrade.Check(seg, i)
		require.NoError(t, err)
		found = append(found, more...)
	}
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	more, err = m.Check()
	require.NoError(t, err)
	found = append(found, more...)
	more, err = txn.Check(seg)
	require.NoError(t, err)
	require.Empty(t, append(found, more...), "check finds damage")
}
