package upgrade_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/upgrade"
)

// checkFree checks that nobody holds or waits for mutex 0.
func checkFree(tb testing.TB, st upgrade.Status) {
	tb.Helper()
	require.Zero(tb, st.State&^upgrade.StateInconsistent, "state word (but for the inconsistent mark, which is about the data)")
	require.Zero(tb, st.Writer, "writer")
	require.False(tb, st.Handoff, "a handoff nobody took")
	require.Zero(tb, st.Upgrader, "upgrader")
	for _, r := range st.Readers {
		require.Zero(tb, r.Count, "reader record %d of %#x", r.Record, r.Owner)
	}
}

// Processes running the mixed workload (shared reads, writes, upgrades in
// both exits) on one record: no read is torn, and the record counts every
// write exactly. In the second case there are no readers: half the
// operations are Lock writes (their one-CAS fast path) and half upgrades,
// so that the two sides of Dekker's pair between them (state.go) meet as
// often as they can; an upgrade holder that read beside a writer would
// see the record torn.
func TestMultiProcessMixed(t *testing.T) {
	t.Parallel()
	for _, workload := range []string{"read-mostly", "writers-and-upgraders"} {
		t.Run(workload, func(t *testing.T) {
			t.Parallel()
			multiProcessMixed(t, workload)
		})
	}
}

func multiProcessMixed(t *testing.T, workload string) {
	seg, path := newSegment(t)
	procs, iters := 4, 20000
	if long() {
		procs, iters = 8, 200000
	}
	children := make([]*testproc.Child, procs)
	for i := range children {
		children[i] = testproc.Start(t, "rw", path, strconv.Itoa(iters), strconv.Itoa(i+1), workload)
	}
	var writes uint64
	for _, c := range children {
		c.WaitOK(t)
		var w, torn, stale uint64
		_, err := fmt.Sscanf(c.WaitLine(t, "writes "), "%d torn %d stale %d", &w, &torn, &stale)
		require.NoError(t, err)
		require.Zero(t, torn, "torn reads in %s", c.Out.String())
		require.Zero(t, stale, "fencing tokens that did not grow, in %s", c.Out.String())
		writes += w
	}
	rec, err := recordOf(seg)
	require.NoError(t, err)
	v, same := rec.read()
	require.True(t, same, "record words disagree")
	require.Equal(t, writes, v, "record counts every write")
	require.Positive(t, writes)
	t.Logf("%d processes, %d writes", procs, writes)
	st := status(t, seg)
	checkFree(t, st)
	require.Empty(t, st.Readers, "every helper closed its handle")
}

// Goroutines with a handle each run the mixed workload (for -race).
func TestGoroutinesMixed(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	rec, err := recordOf(seg)
	require.NoError(t, err)
	fence, err := fenceOf(seg)
	require.NoError(t, err)
	workers, iters := 4, 20000
	if long() {
		workers, iters = 8, 100000
	}
	var writes, torn, stale atomic.Uint64
	var wg sync.WaitGroup
	for i := range workers {
		m := open(t, seg)
		wg.Go(func() {
			w, tr, st, err := mixedOps(m, rec, fence, iters, uint64(i+100), readMostly)
			if err != nil {
				t.Error(err)
			}
			writes.Add(w)
			torn.Add(tr)
			stale.Add(st)
		})
	}
	wg.Wait()
	require.Zero(t, torn.Load())
	require.Zero(t, stale.Load(), "fencing tokens that did not grow")
	v, same := rec.read()
	require.True(t, same)
	require.Equal(t, writes.Load(), v)
}

// With readers arriving all the time, their holds overlapping so that the
// reader count never drops to zero by itself, a pending upgrade and a
// writer both get through.
func TestNoStarvation(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	var stop atomic.Bool
	var reads atomic.Uint64
	var wg sync.WaitGroup
	for range 4 {
		m := open(t, seg)
		wg.Go(func() {
			for !stop.Load() {
				if err := m.LockShared(); err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
				time.Sleep(100 * time.Microsecond) // overlap with the others
				if err := m.UnlockShared(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	waitFor(t, func() bool { return reads.Load() > 100 }, "readers to get going")
	up, w := open(t, seg), open(t, seg)
	done := make(chan error, 2)
	go func() {
		if err := up.LockUpgrade(); err != nil {
			done <- err
			return
		}
		err := up.WithUnique(context.Background(), func() error { return nil })
		if err == nil {
			err = up.UnlockUpgrade()
		}
		done <- err
	}()
	go func() {
		err := w.Lock()
		if err == nil {
			err = w.Unlock()
		}
		done <- err
	}()
	for range 2 {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(testTimeout):
			stop.Store(true)
			t.Fatal("the upgrade or the writer starved")
		}
	}
	stop.Store(true)
	wg.Wait()
}

// A cancelled Lock leaves the state as it was, whether it waited for the
// writers' mutex, for the upgrade lock or for readers.
func TestLockCancelled(t *testing.T) {
	t.Parallel()
	for _, blocker := range []string{"reader", "upgrader", "writer"} {
		t.Run(blocker, func(t *testing.T) {
			t.Parallel()
			seg, _ := newSegment(t)
			b, m := open(t, seg), open(t, seg)
			switch blocker {
			case "reader":
				require.NoError(t, b.LockShared())
			case "upgrader":
				require.NoError(t, b.LockUpgrade())
			case "writer":
				require.NoError(t, b.Lock())
			}
			before := status(t, seg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			require.ErrorIs(t, m.LockContext(ctx), context.DeadlineExceeded)
			after := status(t, seg)
			before.Generation, after.Generation = 0, 0
			require.Equal(t, before, after)
			// And the blocker is still served: a reader can read, and
			// after the blocker leaves a writer gets in.
			if blocker != "writer" {
				r := open(t, seg)
				require.NoError(t, r.LockShared())
				require.NoError(t, r.UnlockShared())
			}
			_ = b.UnlockShared()
			_ = b.UnlockUpgrade()
			_ = b.Unlock()
			require.NoError(t, m.Lock())
			require.NoError(t, m.Unlock())
		})
	}
}

// A cancelled upgrade keeps the upgrade lock and withdraws the pending
// bit, so readers get in again.
func TestUpgradeCancelled(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	r, u := open(t, seg), open(t, seg)
	require.NoError(t, r.LockShared())
	require.NoError(t, u.LockUpgrade())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- u.UpgradeToUniqueContext(ctx) }()
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.UpgradePending }, "pending")
	// New readers are held off while the upgrade is pending.
	r2 := open(t, seg)
	require.ErrorIs(t, r2.TryLockShared(), upgrade.ErrWouldBlock)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	st := status(t, seg)
	require.True(t, st.UpgradeLocked)
	require.False(t, st.UpgradePending)
	require.False(t, st.WriteLocked)
	require.NoError(t, r2.TryLockShared())
	require.NoError(t, r2.UnlockShared())
	require.NoError(t, r.UnlockShared())
	require.NoError(t, u.UpgradeToUnique())
	require.NoError(t, u.UniqueToUpgrade())
	require.NoError(t, u.UnlockUpgrade())
}

// A reader waiting for a writer sleeps and is woken by Unlock; a writer
// waiting for readers is woken by the last UnlockShared.
func TestWakeUps(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	w, r := open(t, seg), open(t, seg)
	require.NoError(t, w.Lock())
	got := make(chan error, 1)
	go func() { got <- r.LockShared() }()
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.SharedWaiters == 1 }, "the reader to sleep")
	require.NoError(t, w.Unlock())
	require.NoError(t, <-got)
	go func() { got <- w.Lock() }()
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.UniqueWaiters == 1 }, "the writer to sleep")
	require.NoError(t, r.UnlockShared())
	require.NoError(t, <-got)
	require.NoError(t, w.UniqueToShared())
	require.NoError(t, w.UnlockShared())
	st := status(t, seg)
	checkFree(t, st)
}

// Writers queued behind a writer sleep on the writers' gate; every release
// wakes one, and each takes its turn.
func TestWriterQueue(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	rec, err := recordOf(seg)
	require.NoError(t, err)
	first := open(t, seg)
	require.NoError(t, first.Lock())
	const writers = 4
	got := make(chan error, writers)
	for range writers {
		m := open(t, seg)
		go func() {
			if err := m.Lock(); err != nil {
				got <- err
				return
			}
			rec.write(rec[0].Load()+1, len(rec))
			got <- m.Unlock()
		}()
	}
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.WriterWaiters == writers }, "the writers to sleep")
	require.NoError(t, first.Unlock())
	for range writers {
		require.NoError(t, <-got)
	}
	v, same := rec.read()
	require.True(t, same)
	require.Equal(t, uint64(writers), v)
	st := status(t, seg)
	checkFree(t, st)
	require.Zero(t, st.WriterWaiters)
}

// A release handed to waiting writers that nobody takes (the hungry
// writer died, gave up or closed its segment) does not wedge anyone: while
// fresh, TryLock says it would block and a waiting writer takes it; once
// stale (a hungry writer takes one within microseconds) TryLock takes it
// as a free word, an upgrade seeker frees it, and Reclaim frees it.
func TestStaleHandoff(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	e := entry(t, seg)
	w := open(t, seg)

	e.Writer.Store(upgrade.FreshHandoff())
	if err := w.TryLock(); err == nil {
		t.Log("the handoff went stale before TryLock: a slow machine")
		require.NoError(t, w.Unlock())
	} else {
		require.ErrorIs(t, err, upgrade.ErrWouldBlock, "a fresh handoff is for the hungry")
		st := status(t, seg)
		require.Zero(t, st.Writer, "a handoff names no writer")
		require.True(t, st.Handoff)
		require.NoError(t, w.Lock())
		require.False(t, w.Reclaimed(), "a handoff is no dead holder")
		require.NoError(t, w.Unlock())
	}

	e.Writer.Store(upgrade.StaleHandoff)
	require.NoError(t, w.TryLock(), "a stale handoff is a free word")
	require.NoError(t, w.Unlock())

	e.Writer.Store(upgrade.StaleHandoff)
	u := open(t, seg)
	require.NoError(t, u.TryLockUpgrade(), "an upgrade seeker frees a stale handoff")
	require.Zero(t, e.Writer.Load())
	require.NoError(t, u.UnlockUpgrade())

	e.Writer.Store(upgrade.StaleHandoff)
	rep, err := upgrade.Reclaim(seg, 0, true)
	require.NoError(t, err)
	require.True(t, rep.Handoff, "the dry run reports a stale handoff")
	require.NotZero(t, e.Writer.Load(), "and changes nothing")
	rep, err = upgrade.Reclaim(seg, 0, false)
	require.NoError(t, err)
	require.True(t, rep.Handoff)
	st := status(t, seg)
	checkFree(t, st)
}

// A writer on a CPU that has waited a round marks the holder's word
// hungry (here the test marks it for the writer asleep in the queue); the
// holder still knows itself, and its release goes to the waiting writer.
func TestHungryHandoff(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	e := entry(t, seg)
	w1, w2 := open(t, seg), open(t, seg)
	require.NoError(t, w1.Lock())
	got := make(chan error, 1)
	go func() { got <- w2.Lock() }()
	// A sleeping writer asks for no handoff: it takes its mark off first.
	waitWriterAsleep(t, seg)
	o := e.Writer.Load()
	require.True(t, e.Writer.CompareAndSwap(o, o|upgrade.WriterHungry))
	st := status(t, seg)
	require.Equal(t, proc.Self().Pack(), st.Writer, "Inspect shows the holder without the mark")
	require.ErrorIs(t, w1.Lock(), upgrade.ErrHeld, "the holder still knows it holds")
	require.NoError(t, w1.Unlock())
	require.NoError(t, <-got)
	require.ErrorIs(t, w1.TryLock(), upgrade.ErrWouldBlock)
	require.NoError(t, w2.Unlock())
	st = status(t, seg)
	checkFree(t, st)
}

// A writer whose wait is cancelled leaves no trace: it had marked the
// holder's word hungry (asking for the release to be handed to waiting
// writers), and a mark left behind handed the release to nobody, so that
// TryLock failed on a free mutex until some waiter's liveness check.
func TestCancelledWriterLeavesNoHandoff(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	holder, waiter := open(t, seg), open(t, seg)
	defer holder.Close()
	defer waiter.Close()
	for range 3 {
		require.NoError(t, holder.Lock())
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		require.ErrorIs(t, waiter.LockContext(ctx), context.DeadlineExceeded)
		cancel()
		require.NoError(t, holder.Unlock())
		require.NoError(t, waiter.TryLock(), "the mutex is free once its holder unlocked")
		require.NoError(t, waiter.Unlock())
		require.NoError(t, holder.TryLockUpgrade())
		require.NoError(t, holder.UnlockUpgrade())
	}
}
