package coro_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

var helpers = map[string]func(args []string) int{
	"count": countHelper,
	"hold":  holdHelper,
}

const (
	lockName    = "coro"
	procTimeout = time.Minute // bounds a wait that only a bug makes long
)

// newProcessSegment makes a segment whose lock-manager table (unused here)
// holds the tests' plain counter.
func newProcessSegment(t *testing.T) string {
	t.Helper()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 4, LockMgrEntries: 1}})
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	return path
}

// processMutex opens the segment and the named lock in mode.
func processMutex(path string, mode spinlock.Mode) (*shm.Segment, *spinlock.Lock, *coro.ProcessMutex, *uint64, error) {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	l, err := spinlock.Named(seg, lockName, mode)
	if err == nil {
		var counter *uint64
		if counter, err = counterOf(seg); err == nil {
			return seg, l, coro.NewProcessMutex(coro.SpinLock(l)), counter, nil
		}
	}
	_ = seg.Close()
	return nil, nil, nil, nil, err
}

// openSpin is processMutex for a test: it fails the test on error and
// closes the segment at its end.
func openSpin(t *testing.T, path string, mode spinlock.Mode) (*spinlock.Lock, *coro.ProcessMutex, *uint64) {
	t.Helper()
	seg, l, m, counter, err := processMutex(path, mode)
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	return l, m, counter
}

// runCount runs procs count helpers over the lock kind names (see
// openKind), each with goroutines goroutines incrementing the plain
// counter rounds times, and waits for them.
func runCount(t *testing.T, path, kind string, procs, goroutines, rounds int) {
	t.Helper()
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			out, err := testproc.Command("count", path, kind, strconv.Itoa(goroutines), strconv.Itoa(rounds)).CombinedOutput()
			if err != nil {
				t.Errorf("count helper: %v: %s", err, out)
			}
		})
	}
	wg.Wait()
}

// counterOf is the tests' plain counter: the first word of the segment's
// lock-manager table.
func counterOf(seg *shm.Segment) (*uint64, error) {
	mem, err := seg.Region(layout.KindLockMgr)
	if err != nil {
		return nil, err
	}
	return memview.At[uint64](mem, 0)
}

func modeArg(s string) spinlock.Mode {
	if s == spinlock.Token.String() {
		return spinlock.Token
	}
	return spinlock.PIDTID
}

// lockKindUpgrade and lockKindUpgradable name the upgrade mutex's unique
// and upgrade locks in the helpers' lock argument; the spinlock modes go
// by their names.
const (
	lockKindUpgrade    = "upgrade"
	lockKindUpgradable = "upgradable"
)

// openKind opens the segment and a ProcessMutex over the lock kind names
// (a spinlock mode, lockKindUpgrade or lockKindUpgradable), the plain
// counter, and what closes them.
func openKind(path, kind string) (*coro.ProcessMutex, *uint64, func(), error) {
	if kind == lockKindUpgrade || kind == lockKindUpgradable {
		seg, h, counter, err := upgradeMutex(path)
		if err != nil {
			return nil, nil, nil, err
		}
		adapt := coro.UpgradeUnique
		if kind == lockKindUpgradable {
			adapt = coro.UpgradeUpgradable
		}
		return coro.NewProcessMutex(adapt(h)), counter, func() { _ = h.Close(); _ = seg.Close() }, nil
	}
	seg, _, m, counter, err := processMutex(path, modeArg(kind))
	if err != nil {
		return nil, nil, nil, err
	}
	return m, counter, func() { _ = seg.Close() }, nil
}

// countHelper: args path kind goroutines rounds. Each goroutine increments
// the plain counter rounds times under the ProcessMutex.
func countHelper(args []string) int {
	m, counter, closeAll, err := openKind(args[0], args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer closeAll()
	goroutines, _ := strconv.Atoi(args[2])
	rounds, _ := strconv.Atoi(args[3])
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				g, err := m.Lock(context.Background())
				if err != nil {
					errs <- err
					return
				}
				*counter++
				if err := g.Unlock(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// holdHelper: args path kind. Locks, says "held", and releases when its
// stdin closes.
func holdHelper(args []string) int {
	m, _, closeAll, err := openKind(args[0], args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer closeAll()
	g, err := m.Lock(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := g.Unlock(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// holder is a helper process that holds the lock until released.
type holder struct {
	t     *testing.T
	stdin io.Closer
	done  chan error
	pid   int
}

// startHolder starts a hold helper on the lock kind names (see openKind).
func startHolder(t *testing.T, path, kind string) *holder {
	t.Helper()
	cmd := testproc.Command("hold", path, kind)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	h := &holder{t: t, stdin: stdin, done: make(chan error, 1), pid: cmd.Process.Pid}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "holder: %s", stderr.String())
	require.Equal(t, "held\n", line)
	go func() {
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, stderr.String())
		}
		h.done <- err
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = stdin.Close()
	})
	return h
}

func (h *holder) release() {
	h.t.Helper()
	require.NoError(h.t, h.stdin.Close())
	select {
	case err := <-h.done:
		require.NoError(h.t, err)
	case <-time.After(procTimeout):
		h.t.Fatal("holder did not exit")
	}
}

func (h *holder) kill() {
	h.t.Helper()
	p, err := os.FindProcess(h.pid)
	require.NoError(h.t, err)
	require.NoError(h.t, p.Kill())
	select {
	case <-h.done:
	case <-time.After(procTimeout):
		h.t.Fatal("holder did not die")
	}
}

// Processes each with several goroutines increment one plain counter
// through their ProcessMutex: no increment is lost, in both modes.
func TestProcessMutexCounterAcrossProcesses(t *testing.T) {
	t.Parallel()
	for _, mode := range []spinlock.Mode{spinlock.PIDTID, spinlock.Token} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			path := newProcessSegment(t)
			const processes, goroutines, rounds = 3, 4, 500
			runCount(t, path, mode.String(), processes, goroutines, rounds)
			l, _, counter := openSpin(t, path, mode)
			require.Equal(t, uint64(processes*goroutines*rounds), *counter)
			_, held := l.Owner()
			require.False(t, held)
			require.Zero(t, l.Slot().Pad.Load(), "no sleeper left registered")
		})
	}
}

// Waiters for a lock another process holds give up when their contexts
// end, the first in the cross-process wait and the others queued behind it
// here; they leave the lock as it was and no goroutine behind (TestMain
// checks), and the lock is theirs once the other process lets go.
func TestProcessMutexCancelWhileAnotherProcessHolds(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	h := startHolder(t, path, spinlock.PIDTID.String())
	l, m, _ := openSpin(t, path, spinlock.PIDTID)
	owner, held := l.Owner()
	require.True(t, held)

	_, err := m.TryLock()
	require.ErrorIs(t, err, coro.ErrWouldBlock)

	ctx, cancel := context.WithCancel(context.Background())
	const waiters = 4
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := m.Lock(ctx)
			errs <- err
		}()
	}
	testproc.WaitFor(t, func() bool { return l.Slot().Sleepers() == 1 }, "the front waiter to sleep on the cross-process lock")
	cancel()
	for range waiters {
		require.ErrorIs(t, <-errs, context.Canceled)
	}
	now, _ := l.Owner()
	require.Equal(t, owner, now, "the other process still holds it")
	testproc.WaitFor(t, func() bool { return l.Slot().Pad.Load() == 0 }, "the sleeper to unregister")

	expired, stop := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer stop()
	_, err = m.Lock(expired)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	h.release()
	g, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.False(t, g.Reclaimed())
	require.NoError(t, g.Unlock())
	require.ErrorIs(t, g.Unlock(), coro.ErrNotOwner, "a second Unlock")
	require.ErrorIs(t, coro.ProcessGuard{}.Unlock(), coro.ErrNotOwner)
}

// A process killed while holding the lock: the waiter here takes it over
// and learns it.
func TestProcessMutexReclaim(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	h := startHolder(t, path, spinlock.PIDTID.String())
	l, m, _ := openSpin(t, path, spinlock.PIDTID)
	before := l.Generation()

	g := lockAcrossKill(t, m, h, func() bool { return l.Slot().Sleepers() == 1 })
	require.Greater(t, l.Generation(), before)
	require.NoError(t, g.Unlock())
	require.False(t, g.Held())
}

// processLockAsync starts m.Lock on a new goroutine, which sends the
// guard (failing the test on an error).
func processLockAsync(t *testing.T, m *coro.ProcessMutex) <-chan coro.ProcessGuard {
	got := make(chan coro.ProcessGuard, 1)
	go func() {
		g, err := m.Lock(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	return got
}

// lockAcrossKill locks m on another goroutine, kills h (which holds the
// lock) once waiting reports that the locker waits (nil: at once), and
// returns the guard, which must hold the lock and report the reclaim.
func lockAcrossKill(t *testing.T, m *coro.ProcessMutex, h *holder, waiting func() bool) coro.ProcessGuard {
	t.Helper()
	return lockAcrossKillThen(t, m, h, waiting, func() {})
}

// lockAcrossKillThen is lockAcrossKill, calling killed once h is dead and
// before the guard is awaited.
func lockAcrossKillThen(t *testing.T, m *coro.ProcessMutex, h *holder, waiting func() bool, killed func()) coro.ProcessGuard {
	t.Helper()
	got := processLockAsync(t, m)
	if waiting != nil {
		testproc.WaitFor(t, waiting, "the waiter to sleep")
	}
	h.kill()
	killed()
	var g coro.ProcessGuard
	select {
	case g = <-got:
	case <-time.After(procTimeout):
		t.Fatal("the lock of a dead holder was not taken over")
	}
	require.True(t, g.Held())
	require.True(t, g.Reclaimed())
	return g
}

// LockOn resumes on the waiter's loop after a wait for another process,
// and a cancelled LockOn reports the error there, passing the lock on.
func TestProcessMutexLockOn(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	h := startHolder(t, path, spinlock.PIDTID.String())
	l, m, _ := openSpin(t, path, spinlock.PIDTID)

	loop := coro.NewLoop()
	defer func() {
		loop.Close()
		<-loop.Done()
	}()
	loopID := make(chan uint64, 1)
	require.NoError(t, loop.Post(func() { loopID <- goid() }))
	onLoop := <-loopID

	type result struct {
		g   coro.ProcessGuard
		err error
		id  uint64
	}
	results := make(chan result, 2)
	cont := func(g coro.ProcessGuard, err error) { results <- result{g, err, goid()} }

	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, m.LockOn(ctx, loop, cont))
	testproc.WaitFor(t, func() bool { return l.Slot().Sleepers() == 1 }, "the LockOn waiter to sleep")
	cancel()
	r := <-results
	require.ErrorIs(t, r.err, context.Canceled)
	require.Equal(t, onLoop, r.id, "the error is delivered on the loop")

	require.NoError(t, m.LockOn(context.Background(), loop, cont))
	testproc.WaitFor(t, func() bool { return l.Slot().Sleepers() == 1 }, "the LockOn waiter to sleep")
	h.release()
	r = <-results
	require.NoError(t, r.err)
	require.Equal(t, onLoop, r.id, "the continuation runs on the loop")
	require.True(t, r.g.Held())

	// Free in this process and in the others: LockOn takes the fast path.
	require.NoError(t, r.g.Unlock())
	require.NoError(t, m.LockOn(context.Background(), loop, cont))
	r = <-results
	require.NoError(t, r.err)
	require.Equal(t, onLoop, r.id)
	require.NoError(t, r.g.Unlock())

	closed := coro.NewLoop()
	closed.Close()
	require.ErrorIs(t, m.LockOn(context.Background(), closed, cont), coro.ErrLoopClosed)
	require.ErrorIs(t, m.LockOn(context.Background(), nil, cont), coro.ErrNoLoop)
	require.ErrorIs(t, m.LockOn(context.Background(), loop, nil), coro.ErrNoCont)
	_, held := l.Owner()
	require.False(t, held, "a refused LockOn changes nothing")
}
