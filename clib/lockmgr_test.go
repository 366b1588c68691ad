package clib_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// The scratch words of the lock-manager tests, in the data region
// "lockmgr-test" (tests/helpers/lockmgr.c has the same offsets). The
// counter, the last exclusive version and the records are plain words:
// loaded and stored, never incremented atomically, and only under the
// exclusive hold, so that two holders at once would lose increments or see
// a version go back. The marker, the stop word and the reclaim count are
// atomic.
const (
	lmRegion         = "lockmgr-test"
	lmRegionSize     = 8192
	lmOffCounter     = 0
	lmOffLastVersion = 64
	lmOffMarker      = 128
	lmOffStop        = 192
	lmOffReclaims    = 256
	lmOffRecords     = 1024
	lmRecordSize     = 32
	lmMaxRecords     = (lmRegionSize - lmOffRecords) / lmRecordSize
)

func init() {
	helpers["lockmgr-count"] = lmCountHelper
	helpers["lockmgr-hold"] = lmHoldHelper
}

// startLockMgrC starts the C lockmgr helper with args as a testproc.Child.
func startLockMgrC(t *testing.T, args ...string) *testproc.Child {
	return startC(t, "lockmgr", args...)
}

type lmScratch struct{ r *shm.Region }

func (s lmScratch) word(off int) *atomic.Uint64 {
	w, err := s.r.Uint64(off)
	if err != nil {
		panic(err)
	}
	return w
}

func lmOpen(path string) (*shm.Segment, *lockmgr.Manager, lmScratch, error) {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		return nil, nil, lmScratch{}, err
	}
	r, err := seg.Data(lmRegion, lmRegionSize)
	if err == nil {
		var m *lockmgr.Manager
		if m, err = lockmgr.Open(seg, lockmgr.Options{}); err == nil {
			return seg, m, lmScratch{r}, nil
		}
	}
	_ = seg.Close()
	return nil, nil, lmScratch{}, err
}

// newLockMgrSegment creates a segment with a lock-manager table of entries
// entries and the scratch region; the test removes it.
func newLockMgrSegment(t *testing.T, entries int) (string, *shm.Segment, *lockmgr.Manager, lmScratch) {
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{LockMgrEntries: entries, DataBytes: 64 << 10}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	r, err := seg.Data(lmRegion, lmRegionSize)
	require.NoError(t, err)
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	return path, seg, m, lmScratch{r}
}

// lmCountHelper is the Go twin of "lockmgr count": Args PATH RECORD ROUNDS.
func lmCountHelper(args []string) int {
	seg, m, sc, err := lmOpen(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer seg.Close()
	rec, _ := strconv.Atoi(args[1])
	rounds, _ := strconv.Atoi(args[2])
	owner := "go-worker-" + args[1]
	tally, reclaims := sc.word(lmOffRecords+rec*lmRecordSize), sc.word(lmOffRecords+rec*lmRecordSize+8)
	counter, last, global, marker := sc.word(lmOffCounter), sc.word(lmOffLastVersion), sc.word(lmOffReclaims), sc.word(lmOffMarker)
	stop := sc.word(lmOffStop)
	me := uint64(os.Getpid())
	opts := lockmgr.AcquireOptions{Retries: lockmgr.RetryForever}
	var done, mine, lastMine uint64
	fmt.Println("ready")
	for (rounds > 0 && done < uint64(rounds)) || (rounds == 0 && stop.Load() == 0) {
		info, err := m.Acquire(context.Background(), "job", owner, lockmgr.Exclusive, opts)
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL acquire: %v\n", err)
			return 1
		}
		if !marker.CompareAndSwap(0, me) {
			if !info.Reclaimed {
				fmt.Fprintf(os.Stderr, "FAIL two holders: %d and me (%d)\n", marker.Load(), me)
				return 1
			}
			marker.Store(me)
		}
		if info.Version <= lastMine || info.Version <= last.Load() {
			fmt.Fprintf(os.Stderr, "FAIL version %d after %d (mine) and %d (anyone's)\n", info.Version, lastMine, last.Load())
			return 1
		}
		lastMine = info.Version
		last.Store(info.Version)
		if info.Reclaimed {
			reclaims.Store(reclaims.Load() + 1)
			global.Store(global.Load() + 1)
			mine++
			fmt.Println("reclaimed")
		}
		counter.Store(counter.Load() + 1)
		tally.Store(tally.Load() + 1)
		done++
		if done%4 == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		marker.Store(0)
		if err := m.Release("job", owner); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL release: %v\n", err)
			return 1
		}
	}
	fmt.Printf("done rounds=%d reclaims=%d\n", done, mine)
	return 0
}

// lmHoldHelper is the Go twin of "lockmgr hold": Args PATH RES OWNER MODE.
func lmHoldHelper(args []string) int {
	seg, m, _, err := lmOpen(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer seg.Close()
	mode, err := lockmgr.ParseMode(args[3])
	if err != nil {
		return 2
	}
	opts := lockmgr.AcquireOptions{Retries: lockmgr.RetryForever, Backoff: lockmgr.Backoff{Initial: time.Hour, Max: time.Hour}}
	fmt.Println("waiting")
	info, err := m.Acquire(context.Background(), args[1], args[2], mode, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL acquire: %v\n", err)
		return 1
	}
	fmt.Println("held " + grantWords(info))
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 1
	}
	if err := m.Release(args[1], args[2]); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL release: %v\n", err)
		return 1
	}
	fmt.Println("released")
	return 0
}

// requireClean: Go's Check finds nothing wrong in the table.
func requireClean(t *testing.T, m *lockmgr.Manager) {
	found, err := m.Check()
	require.NoError(t, err)
	require.Empty(t, found, "Go's Check after C and Go operations")
}

// lmEntry is the table entry of resource name, found by its name words.
func lmEntry(t *testing.T, seg *shm.Segment, name string) *layout.LockMgrEntry {
	mem, err := seg.Region(layout.KindLockMgr)
	require.NoError(t, err)
	for i := 1; i < seg.Len(layout.KindLockMgr); i++ {
		e, err := memview.At[layout.LockMgrEntry](mem, uint64(i)*layout.LockMgrEntrySize)
		require.NoError(t, err)
		if e.Ctl.Load()&3 != 1 {
			continue
		}
		var b []byte
		for j := range e.Name {
			w := e.Name[j].Load()
			for k := range 8 {
				b = append(b, byte(w>>(8*k)))
			}
		}
		if strings.TrimRight(string(b), "\x00") == name {
			return e
		}
	}
	t.Fatalf("no entry for %q", name)
	return nil
}

// tryC makes one acquisition in a C process and returns its report: the
// code and, for a grant, the version ("0 - version=V").
func tryC(t *testing.T, path, res, owner, mode string) string {
	c := startLockMgrC(t, "try", path, res, owner, mode)
	c.WaitOK(t)
	line, _, _ := strings.Cut(c.WaitLine(t, "rc="), " reclaimed=")
	return line
}

// TestLockMgrNamesAcrossLanguages: C finds the entries Go inserted and the
// other way round (the same hash, probing and name words), with names of
// every length and of more than ASCII; Go's Check agrees with C's hashes.
func TestLockMgrNamesAcrossLanguages(t *testing.T) {
	path, _, m, _ := newLockMgrSegment(t, 64)
	names := []string{"a", "orders", "exactly8", "ninechars", "résumé-ü", "0123456789012345678901234567890123456789", "日本語の名前"}
	ctx := context.Background()
	for i, name := range names {
		if i%2 == 0 { // Go inserts, C conflicts with it
			_, err := m.Acquire(ctx, name, "go", lockmgr.Exclusive, lockmgr.AcquireOptions{})
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(tryC(t, path, name, "c", "exclusive"), "-60 RESOURCE_LOCKED"), name)
			require.NoError(t, m.Release(name, "go"))
		} else { // C inserts (and releases), Go finds its version
			rc := tryC(t, path, name, "c", "exclusive")
			require.Equal(t, "0 - version=1", rc, name)
			require.NoError(t, m.CheckVersion(name, 2), name)
		}
	}
	for _, name := range names {
		require.Equal(t, "0 - version=3", tryC(t, path, name, "c2", "collaborative"), name)
	}
	require.Equal(t, len(names), m.Stats().Resources, "one entry per name: no duplicates")
	requireClean(t, m)
}

// TestLockMgrCounterMixed: Go and C processes take one resource
// exclusively and increment a plain counter under it: it ends at the sum
// of the increments, and the versions each saw only grew.
func TestLockMgrCounterMixed(t *testing.T) {
	path, _, m, sc := newLockMgrSegment(t, 16)
	rounds := 1500
	if testproc.Long() {
		rounds = 15000
	}
	var kids []*testproc.Child
	for i := range 4 {
		if i%2 == 0 {
			kids = append(kids, testproc.Start(t, "lockmgr-count", path, strconv.Itoa(i), strconv.Itoa(rounds)))
		} else {
			kids = append(kids, startLockMgrC(t, "count", path, strconv.Itoa(i), strconv.Itoa(rounds)))
		}
	}
	for _, c := range kids {
		c.WaitOK(t)
		require.NotContains(t, c.Out.String(), "FAIL")
	}
	require.EqualValues(t, 4*rounds, sc.word(lmOffCounter).Load())
	st := m.Stats()
	require.EqualValues(t, 4*rounds, st.TotalLocks)
	require.EqualValues(t, 4*rounds, st.Released)
	require.Zero(t, st.ActiveLocks)
	require.NoError(t, m.CheckVersion("job", uint64(8*rounds)), "a grant and a release per round")
	requireClean(t, m)
}

// TestLockMgrCollaborativeMixed: collaborative holds of both languages
// share a resource, past the two records of its entry (overflow entries
// linked by either), and exclude an exclusive acquisition of either.
func TestLockMgrCollaborativeMixed(t *testing.T) {
	path, seg, m, _ := newLockMgrSegment(t, 32)
	ctx := context.Background()
	var cs []*testproc.Child
	for i := range 5 {
		if i%2 == 0 {
			_, err := m.Acquire(ctx, "doc", fmt.Sprintf("go-%d", i), lockmgr.Collaborative, lockmgr.AcquireOptions{})
			require.NoError(t, err)
		}
		c := startCWithStdin(t, "lockmgr", "hold", path, "doc", fmt.Sprintf("c-%d", i), "collaborative")
		c.WaitLine(t, "held ")
		cs = append(cs, c)
	}
	ri, err := m.Inspect("doc")
	require.NoError(t, err)
	require.Len(t, ri.Holders, 8)
	pids := map[int]bool{}
	for _, h := range ri.Holders {
		pids[h.PID] = true
		require.True(t, h.Alive)
	}
	for _, c := range cs {
		require.True(t, pids[c.PID()], "Inspect shows C holder pid %d", c.PID())
	}
	_, err = m.Acquire(ctx, "doc", "writer", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrResourceLocked)
	require.True(t, strings.HasPrefix(tryC(t, path, "doc", "c-writer", "exclusive"), "-60 RESOURCE_LOCKED"))
	requireClean(t, m)
	before := lmEntry(t, seg, "doc").Version.Load()
	for i, c := range cs {
		c.Send(t, "release")
		c.WaitLine(t, "released")
		c.WaitOK(t)
		if i%2 == 0 {
			require.NoError(t, m.Release("doc", fmt.Sprintf("go-%d", i)))
		}
	}
	require.Equal(t, before+8, lmEntry(t, seg, "doc").Version.Load())
	require.Equal(t, "0 - version="+strconv.FormatUint(before+9, 10), tryC(t, path, "doc", "c-writer", "exclusive"))
	requireClean(t, m)
}

// waitSleeper waits until a waiter is registered asleep on e's gate.
func waitSleeper(t *testing.T, e *layout.LockMgrEntry) {
	testproc.WaitFor(t, func() bool { return e.Sleepers.Load()&(1<<24-1) > 0 }, "a sleeper on the gate")
}

// TestLockMgrWakeAcrossLanguages: a C waiter asleep on the gate is woken
// by a Go release and a Go waiter by a C release. The waiters' backoff is
// an hour: only the release gets them going.
func TestLockMgrWakeAcrossLanguages(t *testing.T) {
	path, seg, m, _ := newLockMgrSegment(t, 16)
	ctx := context.Background()
	_, err := m.Acquire(ctx, "gate", "go", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	e := lmEntry(t, seg, "gate")
	c := startCWithStdin(t, "lockmgr", "hold", path, "gate", "c", "exclusive")
	c.WaitLine(t, "waiting")
	waitSleeper(t, e)
	require.NoError(t, m.Release("gate", "go"))
	require.Equal(t, "version=3 reclaimed=0 inconsistent=0", c.WaitLine(t, "held "))

	// Now the C process holds it and a Go waiter sleeps.
	got := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, "gate", "go", lockmgr.Exclusive,
			lockmgr.AcquireOptions{Retries: lockmgr.RetryForever, Backoff: lockmgr.Backoff{Initial: time.Hour, Max: time.Hour}})
		got <- err
	}()
	waitSleeper(t, e)
	c.Send(t, "release")
	c.WaitOK(t)
	require.NoError(t, testproc.Receive(t, got, "the Go waiter's grant"))
	require.NoError(t, m.Release("gate", "go"))
	require.Zero(t, e.Sleepers.Load()&(1<<24-1), "no sleeper left registered")
	requireClean(t, m)
}

// TestLockMgrDeadHolderAcrossLanguages: a killed C holder is reclaimed by
// a Go waiter asleep on it, and a killed Go holder by a C waiter; each is
// told once, and the resource is inconsistent until marked.
func TestLockMgrDeadHolderAcrossLanguages(t *testing.T) {
	path, _, m, _ := newLockMgrSegment(t, 16)
	ctx := context.Background()
	c := startCWithStdin(t, "lockmgr", "hold", path, "res", "c", "exclusive")
	c.WaitLine(t, "held ")
	got := make(chan error, 1)
	var info lockmgr.LockInfo
	go func() {
		var err error
		info, err = m.Acquire(ctx, "res", "go", lockmgr.Exclusive,
			lockmgr.AcquireOptions{Retries: lockmgr.RetryForever, Backoff: lockmgr.Backoff{Initial: time.Hour, Max: time.Hour}})
		got <- err
	}()
	c.Kill(t)
	require.NoError(t, testproc.Receive(t, got, "the Go waiter's grant"))
	require.True(t, info.Reclaimed)
	require.True(t, info.Inconsistent)

	// The Go holder is a process of its own now: C waits, Go dies.
	require.NoError(t, m.Release("res", "go"))
	g := testproc.StartWithStdin(t, "lockmgr-hold", path, "res", "go-holder", "exclusive")
	require.Equal(t, "version=5 reclaimed=0 inconsistent=1", g.WaitLine(t, "held "))
	c = startCWithStdin(t, "lockmgr", "hold", path, "res", "c2", "exclusive")
	c.WaitLine(t, "waiting")
	g.Kill(t)
	require.Equal(t, "version=7 reclaimed=1 inconsistent=1", c.WaitLine(t, "held "))
	ri, err := m.Inspect("res")
	require.NoError(t, err)
	require.Len(t, ri.Holders, 1)
	require.Equal(t, c.PID(), ri.Holders[0].PID)
	c.Send(t, "release")
	c.WaitOK(t)
	st := m.Stats()
	require.EqualValues(t, 2, st.Reclaimed)
	requireClean(t, m)
	info, err = m.Acquire(ctx, "res", "go", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.Equal(t, uint64(9), info.Version)
	require.True(t, info.Inconsistent)
	require.NoError(t, m.MarkConsistent("res", "go"))
	require.NoError(t, m.Release("res", "go"))
	require.Equal(t, "0 - version=11", tryC(t, path, "res", "c", "exclusive"))
	ri, err = m.Inspect("res")
	require.NoError(t, err)
	require.False(t, ri.Inconsistent)
}

// TestLockMgrDeclaredOnly: C honours Go's declared-only mode.
func TestLockMgrDeclaredOnly(t *testing.T) {
	path, _, m, _ := newLockMgrSegment(t, 16)
	require.NoError(t, m.Declare("declared"))
	require.NoError(t, m.SetDeclaredOnly(true))
	require.True(t, strings.HasPrefix(tryC(t, path, "other", "c", "exclusive"), "-65 RESOURCE_NOT_FOUND"))
	require.Equal(t, "0 - version=1", tryC(t, path, "declared", "c", "exclusive"))
	requireClean(t, m)
}

// TestLockMgrKillMixed: Go and C workers take one resource in a loop while
// the test kills one at random moments, mostly the holder (testproc.Torture
// explains why the accounting is exact). Every reclaim is reported once,
// nothing wedges, and Go's Check finds the table whole.
func TestLockMgrKillMixed(t *testing.T) {
	const workers = 4
	wantKills, wantDue, maxKills := 8, 4, 80
	if testproc.Long() {
		wantKills, wantDue, maxKills = 150, 60, 200
	}
	require.Less(t, workers+maxKills, lmMaxRecords)
	path, _, m, sc := newLockMgrSegment(t, 16)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	started := 0
	sumTallies := func() uint64 {
		var s uint64
		for i := range started {
			s += sc.word(lmOffRecords + i*lmRecordSize).Load()
		}
		return s
	}
	res := testproc.Torture{
		Workers: workers, Kills: wantKills, HolderKills: wantDue, MaxKills: maxKills,
		Rng: rand.New(rand.NewPCG(seed, 0)),
		Start: func() *testproc.Child {
			var c *testproc.Child
			if started%2 == 0 {
				c = testproc.Start(t, "lockmgr-count", path, strconv.Itoa(started), "0")
			} else {
				c = startLockMgrC(t, "count", path, strconv.Itoa(started), "0")
			}
			started++
			c.WaitLine(t, "ready")
			return c
		},
		Holds: func(c *testproc.Child) bool {
			ri, err := m.Inspect("job")
			require.NoError(t, err)
			return len(ri.Holders) > 0 && ri.Holders[0].PID == c.PID()
		},
		Uncounted: func() uint64 { return sc.word(lmOffCounter).Load() - sumTallies() },
		Reclaims:  func() uint64 { return sc.word(lmOffReclaims).Load() },
	}.Run(t)
	sc.word(lmOffStop).Store(1)
	reported := 0
	for i, c := range res.All {
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
			require.Equal(t, rounds, sc.word(lmOffRecords+i*lmRecordSize).Load(), "worker pid %d", c.PID())
		}
	}
	var recorded uint64
	for i := range res.All {
		recorded += sc.word(lmOffRecords + i*lmRecordSize + 8).Load()
	}
	st := m.Stats()
	t.Logf("%d kills, %d of them holding; %d increments (%d untallied); %+v", res.Kills, res.HolderKills,
		sc.word(lmOffCounter).Load(), res.Untallied, st)
	require.EqualValues(t, res.HolderKills, sc.word(lmOffReclaims).Load(), "reclaims recorded")
	require.EqualValues(t, res.HolderKills, recorded, "reclaims recorded per worker")
	require.Equal(t, res.HolderKills, reported, "reclaims printed")
	require.EqualValues(t, res.HolderKills, st.Reclaimed, "reclaims counted by the table")
	require.Equal(t, sumTallies()+res.Untallied, sc.word(lmOffCounter).Load())
	require.Zero(t, st.ActiveLocks)
	info, err := m.Acquire(context.Background(), "job", "last", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.False(t, info.Reclaimed)
	requireClean(t, m)
}

// TestLockMgrDamagedReachC: with the header's insertion reach damaged
// short of a resource's entry (Go's Check reports it), C's acquisition of
// one more holder, which needs an overflow record, neither loops nor
// fails: its insert finds the entry and restores the reach, as Go's does
// (lockmgr.TestDamagedReach).
func TestLockMgrDamagedReachC(t *testing.T) {
	ctx := context.Background()
	beyond := regexp.MustCompile(`resource "([^"]+)" lies \d+ entries past its home, beyond the reach`)
	for try := 0; ; try++ {
		require.Less(t, try, 50, "no resource ever lay past its home")
		path, seg, m, _ := newLockMgrSegment(t, 8)
		names := []string{fmt.Sprintf("p%d", try), fmt.Sprintf("q%d", try), fmt.Sprintf("r%d", try), fmt.Sprintf("s%d", try)}
		for _, n := range names {
			for _, owner := range []string{"a", "b"} {
				_, err := m.Acquire(ctx, n, owner, lockmgr.Collaborative, lockmgr.AcquireOptions{})
				require.NoError(t, err)
			}
		}
		mem, err := seg.Region(layout.KindLockMgr)
		require.NoError(t, err)
		binary.LittleEndian.PutUint32(mem[20:24], 0) // the header entry's Next: the reach
		found, err := m.Check()
		require.NoError(t, err)
		var res string
		for _, f := range found {
			if g := beyond.FindStringSubmatch(f); g != nil {
				res = g[1]
				break
			}
		}
		if res == "" {
			continue // every name at its home: none lies past the reach
		}
		require.True(t, strings.HasPrefix(tryC(t, path, res, "c", "collaborative"), "0 - version="))
		found, err = m.Check()
		require.NoError(t, err)
		require.Empty(t, found, "the reach is whole again")
		return
	}
}

// TestLockMgrFuzzCorpusC replays the corpus of lockmgr's FuzzTable (with
// SHMLOCK_FUZZ_CORPUS=DIR also the fuzz cache's inputs, see fuzzCorpus)
// against C: each input is the lock table's bytes, entry locks cleared
// as FuzzTable does (and, as there, the insert lock
// left to a dead process where a byte past the table is odd), and C
// acquisitions of four resources on it (one attempt, and on a conflict a
// wait of 200 µs) must each end, never die of a signal, hang or print a
// sanitizer's report. Go makes the same acquisitions on a twin table
// holding the same bytes, and the two must agree: the same code for each
// attempt and wait, and the same version for each grant; then the same
// codes for late refreshes and releases by owners of the snapshot's holds
// (what the tombstones tell them). The table's size and its entries' lock
// words are the ones the input's control bytes choose (FuzzTable's
// tableSizes and lock modes); an input that makes a live process the
// holder of an entry lock is left out (C would wait for it).
func TestLockMgrFuzzCorpusC(t *testing.T) {
	ctx := context.Background()
	self := proc.Self()
	deadInsertLock := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack() // our pid, reused by us
	for _, f := range fuzzCorpus(t, "lockmgr", "FuzzTable") {
		args := fuzzArgs(t, f)
		require.Len(t, args, 2, f)
		data, ctl := fuzzBytes(t, f, args[0]), fuzzBytes(t, f, args[1])
		entries, words, ok := tableLockWords(data, ctl, deadInsertLock)
		if !ok {
			continue // a live holder of an entry lock
		}
		path, seg, _, _ := newLockMgrSegment(t, entries)
		_, twin, _, _ := newLockMgrSegment(t, entries)
		m, err := lockmgr.Open(twin, lockmgr.Options{Logger: slog.New(slog.DiscardHandler)}) // late releases are logged
		require.NoError(t, err)
		load := func() { // the snapshot into both segments, entry locks as the input says
			for _, s := range []*shm.Segment{seg, twin} {
				mem, err := s.Region(layout.KindLockMgr)
				require.NoError(t, err)
				clear(mem)
				copy(mem, data)
				for i, w := range words {
					binary.LittleEndian.PutUint64(mem[i*layout.LockMgrEntrySize:], w)
				}
			}
		}
		load()
		for _, res := range []string{"x", "c", "declared", "new"} {
			what := fmt.Sprintf("%s, resource %q", filepath.Base(f), res)
			c := startLockMgrC(t, "try", path, res, "fuzz", "collaborative")
			requireEnded(t, c, what)
			if c.Err() != nil {
				break // C stopped half-way (its message is in the output): the twins differ from here
			}
			// What C's try does, on the twin: an attempt, a wait on a
			// conflict; for a grant, MarkConsistent, the release and
			// CheckVersion of the grant's version and the next.
			info, err := m.Acquire(ctx, res, "fuzz", lockmgr.Collaborative, lockmgr.AcquireOptions{})
			want := []string{grantReport("", info, err)}
			if errors.Is(err, lockmgr.ErrResourceLocked) {
				info, err = m.Acquire(ctx, res, "fuzz", lockmgr.Collaborative, lockmgr.AcquireOptions{Wait: 200 * time.Microsecond})
				want = append(want, grantReport("waited ", info, err))
			}
			if err == nil {
				want = append(want, "consistent "+codeReport(m.MarkConsistent(res, "fuzz")))
				require.NoError(t, m.Release(res, "fuzz"), what)
				want = append(want, "check "+codeReport(m.CheckVersion(res, info.Version)), "check "+codeReport(m.CheckVersion(res, info.Version+1)))
			}
			require.Equal(t, want, cReports(c.Out.String()), "%s: Go on the twin (want), C (got)", what)
		}
		// Late calls by owners of the snapshot's holds (expired, reclaimed,
		// or held still), on the snapshot again (the acquisitions above
		// ended its expired holds): MarkConsistent, Refresh and Release;
		// what each is told comes from the holds, the tombstones and
		// LastExpired.
		load()
		for _, hold := range [][2]string{{"x", "a"}, {"c", "owner-1"}, {"tmp-0", "a"}} {
			what := fmt.Sprintf("%s, %q released by %q", filepath.Base(f), hold[0], hold[1])
			c := startLockMgrC(t, "late", path, hold[0], hold[1])
			requireEnded(t, c, what)
			if c.Err() != nil {
				break
			}
			want := []string{"consistent " + codeReport(m.MarkConsistent(hold[0], hold[1]))}
			_, err := m.Refresh(hold[0], hold[1], time.Minute)
			want = append(want, "refresh "+codeReport(err), codeReport(m.Release(hold[0], hold[1])))
			require.Equal(t, want, cReports(c.Out.String()), "%s: Go on the twin (want), C (got), mark consistent, refresh and release", what)
		}
		require.NoError(t, seg.Close())
		require.NoError(t, twin.Close())
	}
}

// FuzzTable's table sizes and the modes of an entry's lock word
// (lockmgr/fuzz_test.go), which its control bytes choose.
var replayTableSizes = []int{8, 1, 2, 3, 5, 17}

const (
	replayLockClear = iota
	replayLockDead
	replayLockSelf
	replayLockGarbage
	replayNumLockModes
)

// tableLockWords reads FuzzTable's control bytes ctl, for its table
// bytes table: the table's size and its entries' lock words, dead being
// the dead process's identity; false if one is a live process's.
func tableLockWords(table, ctl []byte, dead uint64) (entries int, words []uint64, ok bool) {
	entries = replayTableSizes[0]
	if len(ctl) > 1 {
		entries = replayTableSizes[int(ctl[1])%len(replayTableSizes)]
	}
	self := proc.Self().Pack()
	words = make([]uint64, entries)
	for i := range words {
		mode := replayLockClear
		if i+2 < len(ctl) {
			mode = int(ctl[i+2]) % replayNumLockModes
		}
		switch mode {
		case replayLockDead:
			words[i] = dead
		case replayLockSelf:
			words[i] = self
		case replayLockGarbage:
			if off := i * layout.LockMgrEntrySize; off+8 <= len(table) {
				words[i] = binary.LittleEndian.Uint64(table[off:])
			}
		}
	}
	if len(ctl) > 0 && ctl[0]&1 != 0 {
		words[0] = dead
	}
	for _, w := range words {
		if w == self || proc.AlivePacked(w) {
			return 0, nil, false
		}
	}
	return entries, words, true
}

// codeReport is err's code as the C helpers print it: "-" for none.
func codeReport(err error) string { return cmp.Or(lockmgr.Code(err), "-") }

// grantReport is an acquisition's outcome as the C helper's try prints
// it, without the return code: the code and, for a grant, what it says.
func grantReport(label string, info lockmgr.LockInfo, err error) string {
	if err != nil {
		return label + codeReport(err)
	}
	return label + "- " + grantWords(info)
}

// grantWords is what a grant says, as the C helpers print it:
// "version=V reclaimed=R inconsistent=I" (R and I 0 or 1).
func grantWords(info lockmgr.LockInfo) string {
	b2i := map[bool]int{true: 1}
	return fmt.Sprintf("version=%d reclaimed=%d inconsistent=%d", info.Version, b2i[info.Reclaimed], b2i[info.Inconsistent])
}

// cReports are a C helper's report lines without their return codes (the
// "rc=N " of each), which Go does not have.
func cReports(out string) []string {
	var reports []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if label, rest, ok := strings.Cut(line, "rc="); ok {
			if _, after, ok := strings.Cut(rest, " "); ok {
				reports = append(reports, label+after)
			}
		}
	}
	return reports
}
