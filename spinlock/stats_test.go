package spinlock_test

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/spinlock"
)

func init() {
	helpers["stats-timeouts"] = statsTimeoutsHelper // PATH N
}

// The contention counters of a slot, exact across processes: a child that
// times out N times behind the parent's hold counts N contended waits and
// N timeouts, all in the slot's stats entry; the parent's reclaim of a
// killed holder counts one reclaim; the parent's uncontended locks count
// nothing.
func TestStatsAcrossProcesses(t *testing.T) {
	t.Parallel()
	const n = 5
	seg, path := newSegment(t)
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	st := seg.LockStats(layout.KindOwnerSlots, 0)
	require.NotNil(t, st)

	me := spinlock.NewHolder()
	for range 3 { // uncontended: nothing counted
		g, err := l.Lock(me)
		require.NoError(t, err)
		require.NoError(t, g.Release())
	}
	require.Zero(t, st.Contended.Load(), "uncontended locks")

	g, err := l.Lock(me)
	require.NoError(t, err)
	testproc.Start(t, "stats-timeouts", path, strconv.Itoa(n)).WaitOK(t)
	require.NoError(t, g.Release())
	require.Equal(t, uint64(n), st.Contended.Load(), "Contended")
	require.Equal(t, uint32(n), st.Timeouts.Load(), "Timeouts")
	require.Zero(t, st.Reclaims.Load(), "Reclaims")
	require.GreaterOrEqual(t, st.WaitNanos.Load(), uint64(n*10*time.Millisecond), "WaitNanos: %d waits of 10 ms", n)
	var hist uint32
	for i := range st.WaitHist {
		hist += st.WaitHist[i].Load()
	}
	require.Equal(t, uint32(n), hist, "waits in the histogram")
	require.Zero(t, st.WaitHist[0].Load()+st.WaitHist[1].Load()+st.WaitHist[2].Load(), "no wait under 1 ms")

	holder := testproc.Start(t, "hold", path, "1")
	holder.WaitLine(t, "held")
	holder.Kill(t)
	holder.WaitKilled(t)
	g, err = l.TryLockFor(me, testTimeout)
	require.NoError(t, err)
	require.True(t, g.Reclaimed())
	require.NoError(t, g.Release())
	// A waiter takes a dead holder's lock over at its first liveness
	// check, when a sleep runs out: this one slept. (A 10 ms wait need
	// not: on a loaded machine its sched_yields before the sleep can take
	// all of it.)
	require.Positive(t, st.Sleeps.Load(), "the reclaim came after a sleep")
	require.Equal(t, uint32(1), st.Reclaims.Load(), "Reclaims")
	require.Equal(t, uint64(n+1), st.Contended.Load(), "Contended")
	require.Equal(t, uint32(n), st.Timeouts.Load(), "Timeouts: the reclaim was granted")
	require.Nil(t, seg.LockStats(layout.KindOwnerSlots, 8), "no such slot")
}

// statsTimeoutsHelper waits for slot 0 for 10 ms, N times, and wants a
// timeout each time: PATH N.
func statsTimeoutsHelper(args []string) int {
	n, _ := strconv.Atoi(args[1])
	seg, l, _, err := openLock(args[0], spinlock.PIDTID)
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	for i := range n {
		if _, err := l.TryLockFor(spinlock.NewHolder(), 10*time.Millisecond); !errors.Is(err, spinlock.ErrTimeout) {
			return fail("wait %d: got %v, want ErrTimeout", i, err)
		}
	}
	fmt.Println("done")
	return 0
}

// Under contention every wait is counted once, in Contended and in one
// bucket of the histogram, whether it was granted while spinning (untimed,
// first bucket) or after yielding or sleeping (timed): Contended equals
// the histogram's total, and nobody gave up. Goroutines hammer the lock
// until some of them have waited (two Ps do not always overlap in one
// round).
func TestStatsSpunAndTimedWaits(t *testing.T) {
	t.Parallel()
	if runtime.GOMAXPROCS(0) < 2 {
		// One P runs one goroutine at a time: they overlap only where the
		// scheduler preempts a holder, which 50 rounds may never see.
		t.Skip("needs GOMAXPROCS >= 2 for the goroutines to contend")
	}
	seg, _ := newSegment(t)
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	st := seg.LockStats(layout.KindOwnerSlots, 0)
	require.NotNil(t, st)

	const goroutines, iters = 8, 20000
	for round := 0; st.Contended.Load() == 0 && round < 50; round++ {
		errs := make(chan error, goroutines)
		start := make(chan struct{})
		for range goroutines {
			go func() {
				me := spinlock.NewHolder()
				<-start
				for range iters {
					g, err := l.Lock(me)
					if err == nil {
						err = g.Release()
					}
					if err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		close(start)
		for range goroutines {
			require.NoError(t, <-errs)
		}
	}
	var hist uint64
	for i := range st.WaitHist {
		hist += uint64(st.WaitHist[i].Load())
	}
	require.NotZero(t, st.Contended.Load(), "8 goroutines on one lock never waited in 50 rounds")
	require.Equal(t, st.Contended.Load(), hist, "every wait in one bucket")
	require.Zero(t, st.Timeouts.Load())
}
