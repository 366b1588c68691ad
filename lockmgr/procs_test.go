package lockmgr_test

import (
	"context"
	"fmt"
	"os"
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

// Scratch words of the multi-process tests live in the segment's txn arena,
// which no package uses here, each on a cache line of its own. The counter
// and lastVersion are PLAIN words, changed only under the exclusive lock:
// two exclusive holders at once would lose increments or see a version go
// back, which is what the tests must be able to see.
const (
	offCounter     = 0   // plain: incremented by every exclusive holder
	offLastVersion = 64  // plain: the version of the last exclusive grant
	offMarker      = 128 // atomic: pid of the exclusive holder inside, 0 if none
	offCollab      = 192 // atomic: collaborative holders inside
	offReady       = 256 // atomic: helpers ready to start
	offGo          = 320 // atomic: set to 1 to start them all at once
	offInside      = 384 // atomic: collaborate helpers that arrived
	offBench       = 1024
)

type scratch struct{ mem []byte }

func scratchOf(seg *shm.Segment) (scratch, error) {
	mem, err := seg.Region(layout.KindTxnArena)
	if err != nil {
		return scratch{}, err
	}
	if len(mem) < scratchBytes {
		return scratch{}, fmt.Errorf("txn arena of %d bytes is too small for the scratch words", len(mem))
	}
	return scratch{mem}, nil
}

func (s scratch) plain(off uint64) *uint64 {
	p, err := memview.At[uint64](s.mem, off)
	if err != nil {
		panic(err)
	}
	return p
}

func (s scratch) atomic(off uint64) *atomic.Uint64 {
	p, err := memview.Uint64(s.mem, off)
	if err != nil {
		panic(err)
	}
	return p
}

// openHelper is what every helper does first.
func openHelper(path string) (*shm.Segment, *lockmgr.Manager, scratch, error) {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		return nil, nil, scratch{}, err
	}
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	if err == nil {
		var sc scratch
		if sc, err = scratchOf(seg); err == nil {
			return seg, m, sc, nil
		}
	}
	_ = seg.Close()
	return nil, nil, scratch{}, err
}

func fail(format string, args ...any) int {
	fmt.Printf("FAIL "+format+"\n", args...)
	return 1
}

// waitGo announces the helper ready and waits for the start signal.
func waitGo(sc scratch) {
	sc.atomic(offReady).Add(1)
	for sc.atomic(offGo).Load() == 0 {
		time.Sleep(pollEvery)
	}
}

// retryOpts wait for the lock as long as it takes, woken by releases.
var retryOpts = lockmgr.AcquireOptions{Retries: lockmgr.RetryForever,
	Backoff: lockmgr.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}}

// counterHelper takes RESOURCE ITERS times in MODE and checks, under each
// hold, that no hold it conflicts with is inside: an exclusive holder must
// find no other exclusive holder (the marker) and no collaborative one; a
// collaborative holder no exclusive one. Exclusive holders also add one to
// the plain counter and check that versions only grow. It prints how many
// grants reported a reclaim. A MODE ending in "+eager" waits eagerly
// (AcquireOptions.Eager).
// Args: PATH RESOURCE OWNER MODE ITERS.
func counterHelper(args []string) int {
	seg, m, sc, err := openHelper(args[0])
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	res, owner := args[1], args[2]
	modeName, eager := strings.CutSuffix(args[3], "+eager")
	mode, err := lockmgr.ParseMode(modeName)
	if err != nil {
		return fail("%v", err)
	}
	opts := retryOpts
	opts.Eager = eager
	iters, _ := strconv.Atoi(args[4])
	me := uint64(os.Getpid())
	marker, collab, counter, last := sc.atomic(offMarker), sc.atomic(offCollab), sc.plain(offCounter), sc.plain(offLastVersion)
	reclaims := 0
	waitGo(sc)
	ctx := context.Background()
	for i := range iters {
		info, err := m.Acquire(ctx, res, owner, mode, opts)
		if err != nil {
			return fail("acquire %d: %v", i, err)
		}
		if info.Reclaimed {
			reclaims++
		}
		if mode == lockmgr.Exclusive {
			if !marker.CompareAndSwap(0, me) {
				return fail("two exclusive holders: %d and me (%d)", marker.Load(), me)
			}
			if n := collab.Load(); n != 0 {
				return fail("exclusive hold beside %d collaborative ones", n)
			}
			if info.Version <= *last {
				return fail("version went back: %d after %d", info.Version, *last)
			}
			*last = info.Version
			*counter++
			marker.Store(0)
		} else {
			collab.Add(1)
			if w := marker.Load(); w != 0 {
				return fail("collaborative hold beside exclusive holder %d", w)
			}
			collab.Add(^uint64(0))
		}
		if err := m.Release(res, owner); err != nil {
			return fail("release %d: %v", i, err)
		}
	}
	fmt.Printf("reclaimed %d\n", reclaims)
	return 0
}

// collaborateHelper joins RESOURCE collaboratively and stays until N
// helpers are inside at once: it hangs (and the test times out) if
// collaborative holders cannot coexist. Args: PATH RESOURCE OWNER N.
func collaborateHelper(args []string) int {
	seg, m, sc, err := openHelper(args[0])
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	n, _ := strconv.ParseUint(args[3], 10, 64)
	info, err := m.Acquire(context.Background(), args[1], args[2], lockmgr.Collaborative, lockmgr.AcquireOptions{})
	if err != nil {
		return fail("acquire: %v", err)
	}
	inside := sc.atomic(offInside)
	inside.Add(1)
	for deadline := time.Now().Add(testTimeout); inside.Load() < n; time.Sleep(pollEvery) {
		if time.Now().After(deadline) {
			return fail("only %d of %d collaborators inside", inside.Load(), n)
		}
	}
	fmt.Printf("version %d\n", info.Version)
	if err := m.Release(args[1], args[2]); err != nil {
		return fail("release: %v", err)
	}
	return 0
}

// holdHelper takes RESOURCE, adds one to the counter, reports the hold,
// and waits to be killed. Args: PATH RESOURCE OWNER MODE.
func holdHelper(args []string) int {
	seg, m, sc, err := openHelper(args[0])
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	mode, err := lockmgr.ParseMode(args[3])
	if err != nil {
		return fail("%v", err)
	}
	info, err := m.Acquire(context.Background(), args[1], args[2], mode, lockmgr.AcquireOptions{})
	if err != nil {
		return fail("acquire: %v", err)
	}
	*sc.plain(offCounter)++
	fmt.Printf("held %d\n", info.Version)
	time.Sleep(2 * testTimeout)
	return fail("not killed")
}

func startAll(t *testing.T, sc scratch, children []*testproc.Child) {
	t.Helper()
	waitFor(t, func() bool { return sc.atomic(offReady).Load() == uint64(len(children)) }, "helpers to be ready")
	sc.atomic(offGo).Store(1)
}

// Exclusive and collaborative holders in several processes: never two
// exclusive holders, never an exclusive holder beside a collaborative one,
// the plain counter equals the exclusive grants, versions only grow, and
// the statistics count every grant and release.
func TestContentionAcrossProcesses(t *testing.T) {
	t.Parallel()
	iters := 300
	if long() {
		iters = 20000
	}
	m, seg, path := newManagerAt(t, 8, lockmgr.Options{})
	sc, err := scratchOf(seg)
	require.NoError(t, err)
	// Eager waiters beside the others: the same invariants hold.
	modes := []string{"exclusive", "exclusive+eager", "exclusive", "collaborative", "collaborative+eager"}
	var children []*testproc.Child
	for i, mode := range modes {
		children = append(children, testproc.Start(t, "counter", path, "job", "worker-"+strconv.Itoa(i), mode, strconv.Itoa(iters)))
	}
	startAll(t, sc, children)
	for _, c := range children {
		require.Contains(t, c.WaitOK(t), "reclaimed 0")
	}
	require.EqualValues(t, 3*iters, *sc.plain(offCounter))
	st := m.Stats()
	require.EqualValues(t, len(modes)*iters, st.TotalLocks)
	require.EqualValues(t, len(modes)*iters, st.Released)
	require.Zero(t, st.ActiveLocks)
	require.Zero(t, st.Reclaimed)
	ri, err := m.Inspect("job")
	require.NoError(t, err)
	// Every grant and every release bumped the version once.
	require.EqualValues(t, 2*len(modes)*iters, ri.Version)
}

// Collaborative holders in different processes hold at the same time; each
// arrival gets a version of its own.
func TestCollaborativeAcrossProcesses(t *testing.T) {
	t.Parallel()
	const n = 4
	m, _, path := newManagerAt(t, 8, lockmgr.Options{})
	var children []*testproc.Child
	for i := range n {
		children = append(children, testproc.Start(t, "collaborate", path, "doc", "editor-"+strconv.Itoa(i), strconv.Itoa(n)))
	}
	versions := map[string]bool{}
	for _, c := range children {
		versions[c.WaitLine(t, "version ")] = true
	}
	for _, c := range children {
		c.WaitOK(t)
	}
	require.Len(t, versions, n, "each grant got its own version")
	st := m.Stats()
	require.EqualValues(t, n, st.TotalLocks)
	require.EqualValues(t, n, st.Released)
}

// kill -9 of a holder: the waiter in another process reclaims the hold,
// reports it exactly once, and nothing else is lost; an eager waiter too.
func TestKillHolder(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exclusive", "exclusive+eager"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			killHolder(t, mode)
		})
	}
}

// killHolder is TestKillHolder with a waiter acquiring in mode (see
// counterHelper).
func killHolder(t *testing.T, mode string) {
	m, seg, path := newManagerAt(t, 8, lockmgr.Options{})
	sc, err := scratchOf(seg)
	require.NoError(t, err)
	holder := testproc.Start(t, "hold", path, "job", "doomed", "exclusive")
	v, err := strconv.ParseUint(holder.WaitLine(t, "held "), 10, 64)
	require.NoError(t, err)
	*sc.plain(offLastVersion) = v
	waiter := testproc.Start(t, "counter", path, "job", "survivor", mode, "5")
	startAll(t, sc, []*testproc.Child{waiter})
	waitFor(t, func() bool { return m.Stats().ConflictsDetected == 1 }, "the waiter to meet the conflict")
	ri, err := m.Inspect("job")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Acquired, ri.State)
	require.Equal(t, holder.PID(), ri.Holders[0].PID)
	require.True(t, ri.Holders[0].Alive)
	id, stale := proc.Unpack(ri.Holders[0].Process)
	require.EqualValues(t, holder.PID(), id.PID, "the packed identity names the holder")
	require.False(t, stale)
	require.Zero(t, ri.Holders[0].CompanionProcess, "no companion")

	require.NoError(t, holder.Cmd.Process.Kill())
	holder.WaitKilled(t)
	require.Contains(t, waiter.WaitOK(t), "reclaimed 1")
	require.EqualValues(t, 6, *sc.plain(offCounter), "one increment by the dead holder, five by the waiter")
	st := m.Stats()
	require.EqualValues(t, 1, st.Reclaimed)
	require.EqualValues(t, 6, st.TotalLocks)
	require.EqualValues(t, 5, st.Released)
	require.Zero(t, st.ActiveLocks)

	// The dead owner's own release (say, by a restarted agent of the same
	// name) learns that its hold was ended for it.
	require.ErrorIs(t, m.Release("job", "doomed"), lockmgr.ErrLockTimeout)
}

// A dead holder is reclaimed by an acquisition that conflicts with it,
// here in the same call, without waiting: Reclaimed says so.
func TestReclaimOnConflict(t *testing.T) {
	t.Parallel()
	m, _, path := newManagerAt(t, 8, lockmgr.Options{})
	holder := testproc.Start(t, "hold", path, "job", "doomed", "collaborative")
	holder.WaitLine(t, "held ")
	_, err := m.Acquire(context.Background(), "job", "other", lockmgr.Collaborative, lockmgr.AcquireOptions{})
	require.NoError(t, err, "collaborative holders coexist, dead or alive")
	require.NoError(t, holder.Cmd.Process.Kill())
	holder.WaitKilled(t)
	ri, err := m.Inspect("job")
	require.NoError(t, err)
	require.Len(t, ri.Holders, 2)
	for _, h := range ri.Holders {
		require.Equal(t, h.Owner == "other", h.Alive, "%+v", h)
	}
	require.NoError(t, m.Release("job", "other"))
	info, err := m.Acquire(context.Background(), "job", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.True(t, info.Reclaimed)
	require.Equal(t, 1, info.Attempts)
	require.NoError(t, m.Release("job", "next"))
	info, err = m.Acquire(context.Background(), "job", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.False(t, info.Reclaimed, "a reclaim is reported once")
}

// A process that died while changing an entry (holding the entry's lock
// word) does not wedge the resource: its lock word is taken over.
func TestDeadEntryLock(t *testing.T) {
	t.Parallel()
	m, seg, path := newManagerAt(t, 2, lockmgr.Options{}) // one resource entry: index 1
	ctx := context.Background()
	_, err := m.Acquire(ctx, "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	c := testproc.Start(t, "hold", path, "other", "x", "exclusive")
	c.WaitLine(t, "FAIL") // the table is full: it exits at once
	_ = c.Wait(t)
	id, err := proc.Lookup(uint32(os.Getpid()))
	require.NoError(t, err)
	dead := id
	dead.PID = uint32(c.PID())
	mem, err := seg.Region(layout.KindLockMgr)
	require.NoError(t, err)
	e, err := memview.At[layout.LockMgrEntry](mem, layout.LockMgrEntrySize)
	require.NoError(t, err)
	require.True(t, e.Lock.CompareAndSwap(0, dead.Pack()))
	require.NoError(t, m.Release("r", "a"))
	require.Zero(t, e.Lock.Load())
	_, err = m.Acquire(ctx, "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
}

// A hold with a companion process stands while either process lives.
func TestCompanionKeepsHold(t *testing.T) {
	t.Parallel()
	m, _, path := newManagerAt(t, 8, lockmgr.Options{})
	holder := testproc.Start(t, "hold", path, "job", "doomed", "exclusive")
	holder.WaitLine(t, "held ")
	companion := testproc.Start(t, "hold", path, "other", "companion", "exclusive")
	companion.WaitLine(t, "held ")
	require.NoError(t, m.SetCompanion("job", "doomed", companion.PID()))
	require.ErrorIs(t, m.SetCompanion("job", "stranger", companion.PID()), lockmgr.ErrLockNotHeld)

	require.NoError(t, holder.Cmd.Process.Kill())
	holder.WaitKilled(t)
	ctx := context.Background()
	_, err := m.Acquire(ctx, "job", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrResourceLocked, "the companion lives: the hold stands")
	ri, err := m.Inspect("job")
	require.NoError(t, err)
	require.Equal(t, companion.PID(), ri.Holders[0].Companion)
	require.True(t, ri.Holders[0].Alive)
	id, _ := proc.Unpack(ri.Holders[0].CompanionProcess)
	require.EqualValues(t, companion.PID(), id.PID, "the companion's packed identity")

	require.NoError(t, companion.Cmd.Process.Kill())
	companion.WaitKilled(t)
	info, err := m.Acquire(ctx, "job", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: testTimeout})
	require.NoError(t, err)
	require.True(t, info.Reclaimed)
}
