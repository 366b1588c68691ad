package clib_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// The spinlock tests mix Go and C processes (tests/helpers/spin.c) on one
// named spinlock of one segment. What they share besides the lock is a data
// region, whose words both sides lay out alike:
const (
	spinRegionName = "clib.spin.region"
	spinRegionSize = 32768
	spinCounter    = 0  // plain: changed only under the lock
	spinMarker     = 8  // atomic: the pid inside the critical section, or 0
	spinStop       = 16 // atomic: the workers stop when it is non-zero
	spinReclaims   = 24 // plain: reclaims of every worker
	spinNextGen    = 32 // plain: the generation the next holder must find
	spinRelease    = 40 // atomic: a holding helper releases when it is non-zero
	spinGo         = 48 // atomic: the counting helpers start when it is non-zero
	spinRecords    = 64 // per worker: tally, reclaims (plain), 16 bytes each
	spinRecordSize = 16
	spinMaxRecords = (spinRegionSize - spinRecords) / spinRecordSize
)

func init() {
	helpers["spin-count"] = spinCountHelper   // PATH NAME MODE ITERS
	helpers["spin-worker"] = spinWorkerHelper // PATH NAME REC SEED
	helpers["spin-hold"] = spinHoldHelper     // PATH NAME MODE
	helpers["spin-wait"] = spinWaitHelper     // PATH NAME MODE
}

// spinRegion is the shared region of one segment.
type spinRegion struct{ mem []byte }

func (r spinRegion) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off]))
}

// plain is a word the lock protects, read and written without atomics on
// purpose: a lock that failed to exclude would lose updates.
func (r spinRegion) plain(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }

func spinRegionOf(seg *shm.Segment) (spinRegion, error) {
	r, err := seg.Data(spinRegionName, spinRegionSize)
	if err != nil {
		return spinRegion{}, err
	}
	return spinRegion{mem: r.Bytes()}, nil
}

func newSpinSegment(t *testing.T) (*shm.Segment, string, spinRegion) {
	t.Helper()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 8, DataBytes: 64 << 10}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close(); _ = shm.Remove(path) })
	r, err := spinRegionOf(seg)
	require.NoError(t, err)
	return seg, path, r
}

func spinMode(s string) spinlock.Mode {
	if s == "token" {
		return spinlock.Token
	}
	return spinlock.PIDTID
}

// openSpin is what every Go helper does first.
func openSpin(path, name string, mode spinlock.Mode) (*shm.Segment, *spinlock.Lock, spinRegion, error) {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		return nil, nil, spinRegion{}, err
	}
	l, err := spinlock.Named(seg, name, mode)
	if err == nil {
		var r spinRegion
		if r, err = spinRegionOf(seg); err == nil {
			return seg, l, r, nil
		}
	}
	_ = seg.Close()
	return nil, nil, spinRegion{}, err
}

func spinFail(format string, args ...any) int {
	fmt.Printf("FAIL "+format+"\n", args...)
	return 1
}

func newIdentity(mode spinlock.Mode) spinlock.Identity {
	if mode == spinlock.Token {
		return spinlock.NewToken()
	}
	return spinlock.NewHolder()
}

func spinCountHelper(args []string) int {
	mode := spinMode(args[2])
	iters, _ := strconv.Atoi(args[3])
	seg, l, r, err := openSpin(args[0], args[1], mode)
	if err != nil {
		return spinFail("%v", err)
	}
	defer seg.Close()
	counter := r.plain(spinCounter)
	id := newIdentity(mode)
	fmt.Println("ready")
	for r.word(spinGo).Load() == 0 {
		runtime.Gosched()
	}
	for range iters {
		if mode == spinlock.Token {
			id = spinlock.NewToken()
		}
		g, err := l.Lock(id)
		if err != nil {
			return spinFail("lock: %v", err)
		}
		*counter++
		if err := g.Release(); err != nil {
			return spinFail("release: %v", err)
		}
	}
	fmt.Printf("done %d\n", iters)
	return 0
}

// TestSpinCounterMixed: two Go and two C processes take one named spinlock
// in turn and increment a plain counter under it: the count is exact.
func TestSpinCounterMixed(t *testing.T) {
	t.Parallel()
	iters := 200000
	if testing.Short() {
		iters = 20000
	}
	for _, mode := range []string{"pidtid", "token"} {
		t.Run(mode, func(t *testing.T) {
			_, path, r := newSpinSegment(t)
			name := "clib.spin.counter." + mode
			var cs []*testproc.Child
			for range 2 {
				cs = append(cs, testproc.Start(t, "spin-count", path, name, mode, strconv.Itoa(iters)),
					cChild(t, "count", path, name, mode, strconv.Itoa(iters)))
			}
			for _, c := range cs {
				c.WaitLine(t, "ready")
			}
			r.word(spinGo).Store(1) // all at once, so that they contend
			for _, c := range cs {
				c.WaitOK(t)
			}
			require.Equal(t, uint64(4*iters), *r.plain(spinCounter), "counter: lost updates")
		})
	}
}

// cChild runs the C helper spin as a testproc.Child.
func cChild(t testing.TB, args ...string) *testproc.Child { return startC(t, "spin", args...) }

func spinWorkerHelper(args []string) int {
	rec, _ := strconv.Atoi(args[2])
	seed, _ := strconv.ParseUint(args[3], 10, 64)
	seg, l, r, err := openSpin(args[0], args[1], spinlock.PIDTID)
	if err != nil {
		return spinFail("%v", err)
	}
	defer seg.Close()
	pid := uint64(os.Getpid())
	rng := rand.New(rand.NewPCG(seed, pid))
	me := spinlock.NewHolder()
	marker, stop := r.word(spinMarker), r.word(spinStop)
	counter, nextGen, reclaims := r.plain(spinCounter), r.plain(spinNextGen), r.plain(spinReclaims)
	tally := r.plain(spinRecords + rec*spinRecordSize)
	myReclaims := r.plain(spinRecords + rec*spinRecordSize + 8)
	fmt.Println("ready")
	var rounds, reclaimed uint64
	var g spinlock.Guard
	for stop.Load() == 0 {
		if err := g.Lock(l, me); err != nil {
			return spinFail("lock: %v", err)
		}
		gen := l.Generation()
		if want := *nextGen; gen != want && !(g.Reclaimed() && gen == want+1) {
			return spinFail("generation %d after acquiring (reclaimed %v), want %d", gen, g.Reclaimed(), want)
		}
		*nextGen = gen + 1
		if g.Reclaimed() {
			fmt.Println("reclaimed")
			*myReclaims++
			*reclaims++
			reclaimed++
			marker.Store(0)
		} else if g.Inconsistent() != (*reclaims != 0) {
			return spinFail("inconsistent %v after %d reclaims", g.Inconsistent(), *reclaims)
		}
		if m := marker.Load(); m != 0 {
			return spinFail("DOUBLE OWNER: pid %d is inside the critical section with me (%d)", m, pid)
		}
		marker.Store(pid)
		*counter++
		*tally++
		spinHold(rng)
		if m := marker.Load(); m != pid {
			return spinFail("DOUBLE OWNER: marker %d, want mine (%d)", m, pid)
		}
		marker.Store(0)
		if err := g.Release(); err != nil {
			return spinFail("release: %v", err)
		}
		rounds++
		if rng.IntN(4) == 0 {
			runtime.Gosched()
		}
	}
	fmt.Printf("done rounds=%d reclaims=%d\n", rounds, reclaimed)
	return 0
}

// spinHold keeps the lock a random while: not at all, a few microseconds
// of work, or a sleep of up to 2 ms (the C worker does the same).
func spinHold(rng *rand.Rand) {
	switch rng.IntN(3) {
	case 0:
	case 1:
		for end := nowPlus(rng.IntN(20)); !past(end); {
		}
	default:
		sleepMicros(rng.IntN(2000))
	}
}

// TestSpinKillMixed is spinlock's TestKillHolders with Go and C workers in
// turn: the test SIGKILLs one at random moments (mostly the holder) and
// starts a replacement of the same language; see testproc.Torture for why
// the accounting is exact. Each holder's death is reclaimed exactly once,
// by a worker of either language, and nobody ever finds a second owner.
func TestSpinKillMixed(t *testing.T) {
	t.Parallel()
	const workers = 4
	wantKills, wantDue, maxKills := 10, 4, 60
	if testproc.Long() {
		wantKills, wantDue, maxKills = 300, 100, 1000
	}
	require.Less(t, workers+maxKills, spinMaxRecords)
	seg, path, r := newSpinSegment(t)
	const name = "clib.spin.kill"
	l, err := spinlock.Named(seg, name, spinlock.PIDTID)
	require.NoError(t, err)
	defer l.Close()
	slot := l.Slot()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	var started []*testproc.Child
	packed := map[*testproc.Child]uint64{}
	sumTallies := func() uint64 {
		var sum uint64
		for i := range started {
			sum += r.word(spinRecords + i*spinRecordSize).Load()
		}
		return sum
	}
	res := testproc.Torture{
		Workers: workers, Kills: wantKills, HolderKills: wantDue, MaxKills: maxKills, Rng: rng,
		Start: func() *testproc.Child {
			rec, s := strconv.Itoa(len(started)), strconv.FormatUint(rng.Uint64(), 10)
			var c *testproc.Child
			if len(started)%2 == 0 {
				c = testproc.Start(t, "spin-worker", path, name, rec, s)
			} else {
				c = cChild(t, "worker", path, name, rec, s)
			}
			c.WaitLine(t, "ready")
			started = append(started, c)
			packed[c] = c.Identity(t)
			return c
		},
		Holds:     func(c *testproc.Child) bool { return slot.PID.Load() == packed[c] },
		Uncounted: func() uint64 { return r.word(spinCounter).Load() - sumTallies() },
		Reclaims:  func() uint64 { return r.word(spinReclaims).Load() },
	}.Run(t)

	r.word(spinStop).Store(1)
	var reported, byC, byGo int
	for i, w := range res.All {
		alive := res.Alive(w)
		if alive {
			w.WaitOK(t)
		}
		out := w.Out.String()
		if strings.Contains(out, "FAIL") {
			t.Errorf("worker %s pid %d (alive to the end: %v) reported:\n%s", w.Name, w.PID(), alive, out)
		}
		n := strings.Count(out, "reclaimed\n")
		reported += n
		if i%2 == 0 {
			byGo += n
		} else {
			byC += n
		}
		if alive {
			var rounds, reclaims uint64
			_, err := fmt.Sscanf(w.WaitLine(t, "done "), "rounds=%d reclaims=%d", &rounds, &reclaims)
			require.NoError(t, err)
			rec := spinRecords + i*spinRecordSize
			require.Equal(t, rounds, r.word(rec).Load(), "worker %s pid %d: rounds and tally", w.Name, w.PID())
			require.Equal(t, reclaims, r.word(rec+8).Load(), "worker %s pid %d: reclaims printed and recorded", w.Name, w.PID())
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	var recorded uint64
	for i := range res.All {
		recorded += r.word(spinRecords + i*spinRecordSize + 8).Load()
	}
	tallies, counter := sumTallies(), r.word(spinCounter).Load()
	t.Logf("%d kills, %d of them holding the lock; %d increments (%d by victims before their tally); reclaims by Go %d, by C %d",
		res.Kills, res.HolderKills, counter, res.Untallied, byGo, byC)
	require.Equal(t, uint64(res.HolderKills), r.word(spinReclaims).Load(), "reclaims: one per kill of a holder")
	require.Equal(t, uint64(res.HolderKills), recorded, "reclaims recorded per worker")
	require.Equal(t, res.HolderKills, reported, "reclaims printed")
	require.Equal(t, tallies+res.Untallied, counter, "counter: the tallies plus the victims' untallied increments")
	require.Equal(t, r.word(spinNextGen).Load(), l.Generation(), "generation: one past the last holder's")

	require.Zero(t, slot.PID.Load(), "lock not free at the end")
	g, err := l.TryLock(spinlock.NewHolder())
	require.NoError(t, err)
	require.Equal(t, res.HolderKills > 0, g.Inconsistent())
	require.NoError(t, g.MarkConsistent())
	require.NoError(t, g.Release())
}

func nowPlus(micros int) time.Time { return time.Now().Add(time.Duration(micros) * time.Microsecond) }
func past(t time.Time) bool        { return time.Now().After(t) }
func sleepMicros(n int)            { time.Sleep(time.Duration(n) * time.Microsecond) }

func spinHoldHelper(args []string) int {
	mode := spinMode(args[2])
	seg, l, r, err := openSpin(args[0], args[1], mode)
	if err != nil {
		return spinFail("%v", err)
	}
	defer seg.Close()
	g, err := l.Lock(newIdentity(mode))
	if err != nil {
		return spinFail("lock: %v", err)
	}
	fmt.Println("held")
	for r.word(spinRelease).Load() == 0 {
		sleepMicros(200)
	}
	if err := g.Release(); err != nil {
		return spinFail("release: %v", err)
	}
	fmt.Println("released")
	return 0
}

func spinWaitHelper(args []string) int {
	mode := spinMode(args[2])
	seg, l, _, err := openSpin(args[0], args[1], mode)
	if err != nil {
		return spinFail("%v", err)
	}
	defer seg.Close()
	id := newIdentity(mode)
	if _, err := l.TryLock(id); err != spinlock.ErrWouldBlock {
		return spinFail("trylock: %v, want the lock held", err)
	}
	w, err := testproc.StartWaiting() // before "waiting": see cmd_wait in tests/helpers/spin.c
	if err != nil {
		return spinFail("%v", err)
	}
	fmt.Println("waiting")
	g, err := l.Lock(id)
	if err != nil {
		return spinFail("lock: %v", err)
	}
	if err := w.Report(); err != nil {
		return spinFail("%v", err)
	}
	if err := g.Release(); err != nil {
		return spinFail("release: %v", err)
	}
	return 0
}

// TestSpinWakeCrossLanguage: a waiter of one language sleeps in the futex
// (it uses next to no CPU while the lock is held) and the release of the
// other language wakes it.
func TestSpinWakeCrossLanguage(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex // one at a time: each blocks for testproc.BlockedFor
	for _, mode := range []string{"pidtid", "token"} {
		for _, waiterC := range []bool{true, false} {
			what := fmt.Sprintf("%s/go-holder-c-waiter", mode)
			if !waiterC {
				what = fmt.Sprintf("%s/c-holder-go-waiter", mode)
			}
			t.Run(what, func(t *testing.T) {
				mu.Lock()
				defer mu.Unlock()
				_, path, r := newSpinSegment(t)
				const name = "clib.spin.wake"
				var holder, waiter *testproc.Child
				if waiterC {
					holder = testproc.Start(t, "spin-hold", path, name, mode)
				} else {
					holder = cChild(t, "hold", path, name, mode)
				}
				holder.WaitLine(t, "held")
				if waiterC {
					waiter = cChild(t, "wait", path, name, mode)
				} else {
					waiter = testproc.Start(t, "spin-wait", path, name, mode)
				}
				waiter.WaitLine(t, "waiting")
				testproc.RequireSlept(t, waiter, what, func() error {
					r.word(spinRelease).Store(1)
					return nil
				})
				holder.WaitOK(t)
			})
		}
	}
}
