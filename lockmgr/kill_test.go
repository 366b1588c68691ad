package lockmgr_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
)

// Scratch words of TestKillHolders, after those of procs_test.go: a stop
// flag, the reclaims reported by all workers (plain, under the lock), and
// a record per worker: its tally of committed increments and its count of
// reclaims, both plain and written only under the lock, so they survive
// its death.
const (
	offStop      = 448
	offReclaims  = 512
	offRecords   = 4096
	recordSize   = 32
	recordTally  = 0
	recordReclms = 8
	maxRecords   = (scratchBytes - offRecords) / recordSize
)

func recordOff(i int) uint64 {
	if i < 0 || i >= maxRecords {
		panic(fmt.Sprintf("record %d outside [0, %d)", i, maxRecords))
	}
	return uint64(offRecords + i*recordSize)
}

// killWorkerHelper takes "job" exclusively in a loop until told to stop:
// under each hold it records a reported reclaim, then increments the
// counter and its tally. Args: PATH RECORD.
func killWorkerHelper(args []string) int {
	seg, m, sc, err := openHelper(args[0])
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	rec, _ := strconv.Atoi(args[1])
	owner := "worker-" + args[1]
	tally, reclaims := sc.plain(recordOff(rec)+recordTally), sc.plain(recordOff(rec)+recordReclms)
	counter, global := sc.plain(offCounter), sc.plain(offReclaims)
	marker := sc.atomic(offMarker)
	me := uint64(os.Getpid())
	ctx := context.Background()
	rounds := uint64(0)
	fmt.Println("ready")
	for sc.atomic(offStop).Load() == 0 {
		info, err := m.Acquire(ctx, "job", owner, lockmgr.Exclusive, retryOpts)
		if err != nil {
			return fail("acquire: %v", err)
		}
		if !marker.CompareAndSwap(0, me) {
			// A killed holder leaves its marker: it is only wrong if the
			// hold was not reclaimed from it.
			if !info.Reclaimed {
				return fail("two holders: %d and me (%d)", marker.Load(), me)
			}
			marker.Store(me)
		}
		if info.Reclaimed {
			*reclaims++
			*global++
			fmt.Println("reclaimed")
		}
		*counter++
		*tally++
		rounds++
		if rounds%4 == 0 {
			// Hold for a while now and then, so that the parent's
			// SIGSTOP often finds a holder.
			time.Sleep(100 * time.Microsecond)
		}
		marker.Store(0)
		if err := m.Release("job", owner); err != nil {
			return fail("release: %v", err)
		}
	}
	fmt.Printf("done rounds=%d reclaims=%d\n", rounds, *reclaims)
	return 0
}

// TestKillHolders: workers take one resource in a loop while the parent
// kill -9s one at random moments (mostly the holder) and starts a
// replacement; see testproc.Torture for why the accounting is exact. The
// victim holds the lock iff Inspect shows its pid as the holder.
//
// At the end the counter equals the tallies plus the untallied increments,
// every reclaim was reported once by a worker and counted once by the
// table's statistics, and the resource is free.
func TestKillHolders(t *testing.T) {
	t.Parallel()
	const workers = 3
	wantKills, wantDue, maxKills := 6, 3, 60
	if long() {
		wantKills, wantDue, maxKills = 200, 80, 1000
	}
	require.Less(t, workers+maxKills, maxRecords)
	m, seg, path := newManagerAt(t, 8, lockmgr.Options{})
	sc, err := scratchOf(seg)
	require.NoError(t, err)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)

	started := 0
	sumTallies := func() uint64 {
		var s uint64
		for i := range started {
			s += sc.atomic(recordOff(i) + recordTally).Load()
		}
		return s
	}
	res := testproc.Torture{
		Workers: workers, Kills: wantKills, HolderKills: wantDue, MaxKills: maxKills,
		Rng: rand.New(rand.NewPCG(seed, 0)),
		Start: func() *testproc.Child {
			c := testproc.Start(t, "kill-worker", path, strconv.Itoa(started))
			started++
			c.WaitLine(t, "ready")
			return c
		},
		Holds: func(c *testproc.Child) bool {
			ri, err := m.Inspect("job")
			require.NoError(t, err)
			return len(ri.Holders) > 0 && ri.Holders[0].PID == c.PID()
		},
		Uncounted: func() uint64 { return sc.atomic(offCounter).Load() - sumTallies() },
		Reclaims:  func() uint64 { return sc.atomic(offReclaims).Load() },
	}.Run(t)
	all, kills, due, untallied := res.All, res.Kills, res.HolderKills, res.Untallied

	sc.atomic(offStop).Store(1)
	reported := 0
	for i, c := range all {
		alive := res.Alive(c)
		if alive {
			c.WaitOK(t)
		}
		out := c.Out.String()
		require.NotContains(t, out, "FAIL", "worker pid %d", c.PID())
		reported += strings.Count(out, "reclaimed\n")
		if alive {
			var rounds, reclaims uint64
			_, err := fmt.Sscanf(c.WaitLine(t, "done "), "rounds=%d reclaims=%d", &rounds, &reclaims)
			require.NoError(t, err)
			require.Equal(t, rounds, sc.atomic(recordOff(i)+recordTally).Load(), "worker pid %d: rounds and tally", c.PID())
		}
	}
	var recorded uint64
	for i := range all {
		recorded += sc.atomic(recordOff(i) + recordReclms).Load()
	}
	counter, tallies := sc.atomic(offCounter).Load(), sumTallies()
	st := m.Stats()
	t.Logf("%d kills, %d of them holding the lock; %d increments (%d untallied); %+v", kills, due, counter, untallied, st)
	require.EqualValues(t, due, sc.atomic(offReclaims).Load(), "reclaims recorded")
	require.EqualValues(t, due, recorded, "reclaims recorded per worker")
	require.Equal(t, due, reported, "reclaims printed")
	require.EqualValues(t, due, st.Reclaimed, "reclaims counted by the table")
	require.Equal(t, tallies+untallied, counter)
	require.Zero(t, st.ActiveLocks)
	info, err := m.Acquire(context.Background(), "job", "last", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.False(t, info.Reclaimed)
	found, err := m.Check()
	require.NoError(t, err)
	require.Empty(t, found, "the kills left damage in the table")
}
