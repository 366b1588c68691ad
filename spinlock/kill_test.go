package spinlock_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/spinlock"
)

// TestKillHolders is the robustness test: worker processes take a PIDTID
// lock in a loop while the parent kill -9s one of them at random moments
// (mostly the one holding the lock) and starts a replacement; see
// testproc.Torture for why the accounting is exact. The victim holds the
// lock iff the slot's PID word is its identity.
//
// The workers check each acquisition themselves: the marker word must be 0
// (else two owners), and the generation must be exactly the one the last
// holder announced (one release since), or one more after a reclaim (the
// dead holder may have bumped it in a release it did not finish).
func TestKillHolders(t *testing.T) {
	t.Parallel()
	const workers = 4
	wantKills, wantDue, maxKills := 8, 3, 60
	if long() {
		wantKills, wantDue, maxKills = 300, 100, 1000
	}
	require.Less(t, workers+maxKills, maxRecords)

	seg, path := newSegment(t)
	sc, err := scratchOf(seg)
	require.NoError(t, err)
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	slot := l.Slot()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	packed := map[*testproc.Child]uint64{} // each worker's identity, as the slot records it
	sumTallies := func() uint64 {
		var sum uint64
		for i := range len(packed) {
			sum += sc.atomic(recordOff(i) + recordTally).Load()
		}
		return sum
	}
	res := testproc.Torture{
		Workers: workers, Kills: wantKills, HolderKills: wantDue, MaxKills: maxKills, Rng: rng,
		Start: func() *testproc.Child {
			c := testproc.Start(t, "kill-worker", path, strconv.Itoa(len(packed)), strconv.FormatUint(rng.Uint64(), 10))
			packed[c] = c.Identity(t)
			return c
		},
		Holds:     func(c *testproc.Child) bool { return slot.PID.Load() == packed[c] },
		Uncounted: func() uint64 { return sc.atomic(offCounter).Load() - sumTallies() },
		Reclaims:  func() uint64 { return sc.atomic(offReclaims).Load() },
	}.Run(t)
	all, kills, due, untallied := res.All, res.Kills, res.HolderKills, res.Untallied

	sc.atomic(offStop).Store(1)
	var reported int
	for i, w := range all {
		alive := res.Alive(w)
		if alive {
			w.WaitOK(t)
		}
		out := w.Out.String()
		if strings.Contains(out, "FAIL") {
			t.Errorf("worker pid %d (alive to the end: %v) reported:\n%s", w.PID(), alive, out)
		}
		reported += strings.Count(out, "reclaimed\n")
		if alive {
			var rounds, reclaims uint64
			_, err := fmt.Sscanf(w.WaitLine(t, "done "), "rounds=%d reclaims=%d", &rounds, &reclaims)
			require.NoError(t, err)
			rec := recordOff(i)
			require.Equal(t, rounds, sc.atomic(rec+recordTally).Load(), "worker pid %d: rounds and tally", w.PID())
			require.Equal(t, reclaims, sc.atomic(rec+recordReclaims).Load(), "worker pid %d: reclaims printed and recorded", w.PID())
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	var recorded uint64
	for i := range all {
		recorded += sc.atomic(recordOff(i) + recordReclaims).Load()
	}
	tallies := sumTallies()
	counter := sc.atomic(offCounter).Load()
	gen := l.Generation()
	t.Logf("%d kills, %d of them holding the lock; %d increments (%d by victims killed before their tally), generation %d, %d sleepers left registered by victims",
		kills, due, counter, untallied, gen, slot.Sleepers())

	if got := sc.atomic(offReclaims).Load(); got != uint64(due) {
		t.Errorf("reclaims: got %d, want one per kill of a holder, %d", got, due)
	}
	if recorded != uint64(due) || reported != due {
		t.Errorf("reclaims recorded per worker %d, printed %d; want %d", recorded, reported, due)
	}
	if counter != tallies+uint64(untallied) {
		t.Errorf("counter: got %d, want the workers' tallies %d + %d by victims killed before their tally", counter, tallies, untallied)
	}
	if want := sc.atomic(offNextGen).Load(); gen != want {
		t.Errorf("generation: got %d, want %d, one past the last holder's", gen, want)
	}
	if gen < tallies {
		t.Errorf("generation %d is below the %d acquisitions that committed", gen, tallies)
	}

	// The lock is free and clean (Pad may count sleepers that were killed).
	st := stateOf(slot)
	if st.PID != 0 || st.TID != 0 || st.Recursion&layout.SlotRecursion != 0 {
		t.Fatalf("lock not free at the end: %+v", st)
	}
	g, err := l.TryLock(spinlock.NewHolder())
	require.NoError(t, err)
	require.False(t, g.Reclaimed())
	// The workers never say they repaired anything: a holder died, so the
	// slot stays marked until someone does.
	require.Equal(t, res.HolderKills > 0, g.Inconsistent())
	require.NoError(t, g.MarkConsistent())
	require.False(t, g.Inconsistent())
	require.NoError(t, g.Release())
	found, err := spinlock.Check(seg)
	require.NoError(t, err)
	require.Empty(t, found, "the kills left damage in the slots")
}

// killWorkerHelper is one worker of TestKillHolders. It loops until the stop
// word is set, and keeps its accounting in its record, under the lock.
func killWorkerHelper(args []string) int {
	rec, _ := strconv.Atoi(args[1])
	seed, _ := strconv.ParseUint(args[2], 10, 64)
	seg, l, sc, err := openLock(args[0], spinlock.PIDTID)
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	pid := uint64(os.Getpid())
	rng := rand.New(rand.NewPCG(seed, pid))
	me := spinlock.NewHolder()
	marker, stop := sc.atomic(offMarker), sc.atomic(offStop)
	counter, nextGen, reclaims := sc.plain(offCounter), sc.plain(offNextGen), sc.plain(offReclaims)
	tally, myReclaims := sc.plain(recordOff(rec)+recordTally), sc.plain(recordOff(rec)+recordReclaims)

	var rounds, reclaimed uint64
	var g spinlock.Guard
	for stop.Load() == 0 {
		if err := g.Lock(l, me); err != nil {
			return fail("lock: %v", err)
		}
		gen := l.Generation()
		if want := *nextGen; gen != want && !(g.Reclaimed() && gen == want+1) {
			return fail("generation %d after acquiring (reclaimed %v), want %d", gen, g.Reclaimed(), want)
		}
		*nextGen = gen + 1
		if g.Reclaimed() {
			// Printed before it is recorded: once the parent sees the
			// record, the line is in the pipe even if we die next.
			fmt.Println("reclaimed")
			*myReclaims++
			*reclaims++
			reclaimed++
			marker.Store(0) // repair: the dead holder's critical section is over
		}
		if m := marker.Load(); m != 0 {
			return fail("DOUBLE OWNER: pid %d is inside the critical section with me (%d)", m, pid)
		}
		marker.Store(pid)
		*counter++
		*tally++
		hold(rng)
		if m := marker.Load(); m != pid {
			return fail("DOUBLE OWNER: marker %d, want mine (%d)", m, pid)
		}
		marker.Store(0)
		if err := g.Release(); err != nil {
			return fail("release: %v", err)
		}
		rounds++
		if rng.IntN(4) == 0 {
			runtime.Gosched()
		}
	}
	fmt.Printf("done rounds=%d reclaims=%d\n", rounds, reclaimed)
	return 0
}

// hold keeps the lock for a random while: not at all (so that workers race
// for the lock), a few microseconds of work, or a sleep of up to 2 ms (so
// that the holder is often asleep, and easy to catch, inside the critical
// section).
func hold(rng *rand.Rand) {
	switch rng.IntN(3) {
	case 0:
	case 1:
		for end := time.Now().Add(time.Duration(rng.IntN(20)) * time.Microsecond); time.Now().Before(end); {
		}
	default:
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
	}
}
