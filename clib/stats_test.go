package clib_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

// A C waiter counts its waits in the slot's contention counters as a Go
// one does: N timed-out waits behind a Go holder are N contended waits and
// N timeouts, and the Go holder's release of a C sleeper counts a wake-up.
func TestSpinStatsCWaiter(t *testing.T) {
	t.Parallel()
	const n, name = 4, "clib.spin.stats"
	seg, path, _ := newSpinSegment(t)
	l, err := spinlock.Named(seg, name, spinlock.PIDTID)
	require.NoError(t, err)
	st := seg.LockStats(layout.KindOwnerSlots, l.Index())
	require.NotNil(t, st)

	me := spinlock.NewHolder()
	g, err := l.Lock(me)
	require.NoError(t, err)
	cChild(t, "timeouts", path, name, "pidtid", "4").WaitOK(t)
	require.Equal(t, uint64(n), st.Contended.Load(), "Contended")
	require.Equal(t, uint32(n), st.Timeouts.Load(), "Timeouts")
	require.GreaterOrEqual(t, st.WaitNanos.Load(), uint64(n*10*time.Millisecond), "WaitNanos")
	var hist uint32
	for i := range st.WaitHist {
		hist += st.WaitHist[i].Load()
	}
	require.Equal(t, uint32(n), hist, "waits in the histogram")

	// A C sleeper woken by the Go release: one more contended wait, granted.
	waiter := cChild(t, asleepUntilWoken, "wait", path, name, "pidtid")
	waiter.WaitLine(t, "waiting")
	testproc.WaitFor(t, func() bool {
		return st.Sleeps.Load() > 0 && l.Slot().Sleepers() > 0 && asleepInKernel(waiter.PID())
	}, "the C waiter asleep")
	require.NoError(t, g.Release())
	waiter.WaitOK(t)
	require.Equal(t, uint64(n+1), st.Contended.Load(), "Contended")
	require.Equal(t, uint32(n), st.Timeouts.Load(), "Timeouts")
	require.Equal(t, uint64(1), st.Wakeups.Load(), "Wakeups: the release woke the C sleeper")
}

func init() { helpers["upg-hold"] = upgHoldHelper }

// upgHoldHelper is the Go holder of the upgrade stats test: Args SEG NAME
// MODE (unique or shared). It takes the mutex, prints "held" and keeps it
// until killed (or its standard input ends).
func upgHoldHelper(args []string) int {
	if len(args) != 3 {
		return 2
	}
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m, err := upgrade.Named(seg, args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	switch args[2] {
	case "unique":
		err = m.Lock()
	case "shared":
		err = m.LockShared()
	default:
		return 2
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL take: %v\n", err)
		return 1
	}
	fmt.Println("held")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// asleepUntilWoken is the C helpers' option (tests/helpers/helper.h) for a
// waiter whose wake-up by the release a test counts: it looks for a dead
// holder an hour apart instead of every 50 ms, so it sleeps in the kernel
// from when the test sees it there until the release wakes it. With the
// 50 ms, its sleep could time out between the two, and the release, finding
// nobody asleep, count no wake-up.
const asleepUntilWoken = "-liveness=3600"

// asleepInKernel reports whether process pid (a single-threaded C helper)
// is blocked in the kernel, in a futex wait where the kernel says so: a
// wake-up is counted only by a release that finds its sleeper there.
func asleepInKernel(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) || b[i+2] != 'S' {
		return false
	}
	if w, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid)); err == nil {
		if s := strings.TrimSpace(string(w)); s != "" && s != "0" {
			return strings.Contains(s, "futex")
		}
	}
	return true
}

// requireWaits checks the wait counters of st: contended waits in all,
// timeouts of them given up, every one in the histogram, and the wake-ups
// and reclaims counted.
func requireWaits(t *testing.T, st *layout.LockStats, contended, timeouts, wakeups, reclaims int) {
	t.Helper()
	require.Equal(t, uint64(contended), st.Contended.Load(), "Contended")
	require.Equal(t, uint32(timeouts), st.Timeouts.Load(), "Timeouts")
	var hist uint32
	for i := range st.WaitHist {
		hist += st.WaitHist[i].Load()
	}
	require.Equal(t, uint32(contended), hist, "waits in the histogram")
	require.Equal(t, uint64(wakeups), st.Wakeups.Load(), "Wakeups")
	require.Equal(t, uint32(reclaims), st.Reclaims.Load(), "Reclaims")
}

// A C waiter counts its waits on an upgrade mutex as a Go one does: timed
// out behind a Go unique holder (unique, shared and upgrade takes) and an
// upgrade to unique timed out behind a Go reader; granted when the Go
// holder's release wakes it, which the release counts; and a Go writer or
// reader killed mid-hold is one reclaim of the C waiter that takes over.
func TestUpgradeStatsCWaiter(t *testing.T) {
	t.Parallel()
	const name, n, ms = "clib.upg.stats", 3, "5"
	segPath, _, seg := upgSegment(t)
	m, err := upgrade.Named(seg, name)
	require.NoError(t, err)
	defer m.Close()
	st := seg.LockStats(layout.KindUpgrades, m.Index())
	require.NotNil(t, st)
	status := func() upgrade.Status {
		s, err := upgrade.Inspect(seg, m.Index())
		require.NoError(t, err)
		return s
	}

	require.NoError(t, m.Lock())
	waits := 0
	for _, mode := range []string{"unique", "shared", "upgrade"} {
		startUpgradeC(t, "timeouts", segPath, name, mode, strconv.Itoa(n), ms).waitOK(t)
		waits += n
		requireWaits(t, st, waits, waits, 0, 0)
	}
	require.NoError(t, m.Unlock())
	require.NoError(t, m.LockShared())
	startUpgradeC(t, "timeouts", segPath, name, "to-unique", strconv.Itoa(n), ms).waitOK(t)
	waits += n
	requireWaits(t, st, waits, waits, 0, 0)
	require.NoError(t, m.UnlockShared())
	timeouts := waits

	// C sleepers woken by the Go holder's Unlock: a writer on WriterGate
	// (wakeWriter), a reader on SharedGate (wake).
	for i, c := range []struct {
		mode   string
		asleep func(upgrade.Status) bool
	}{
		{"unique", func(s upgrade.Status) bool { return s.WriterWaiters == 1 }},
		{"shared", func(s upgrade.Status) bool { return s.SharedWaiters == 1 }},
	} {
		require.NoError(t, m.Lock())
		sleeps := st.Sleeps.Load()
		w := startUpgradeC(t, asleepUntilWoken, "wait", segPath, name, c.mode)
		w.waitLine(t, "waiting")
		testproc.WaitFor(t, func() bool {
			return c.asleep(status()) && st.Sleeps.Load() > sleeps && asleepInKernel(w.cmd.Process.Pid)
		}, "the C %s waiter asleep", c.mode)
		require.NoError(t, m.Unlock())
		require.Equal(t, "0", w.waitLine(t, "got "))
		w.waitOK(t)
		waits++
		requireWaits(t, st, waits, timeouts, i+1, 0)
	}

	// A Go writer killed: the C writer takes its Writer word over.
	g := testproc.StartWithStdin(t, "upg-hold", segPath, name, "unique")
	g.WaitLine(t, "held")
	w := startUpgradeC(t, "wait", segPath, name, "unique")
	w.waitLine(t, "waiting")
	testproc.WaitFor(t, func() bool { return status().WriterWaiters == 1 }, "the C writer asleep")
	g.Kill(t)
	require.Equal(t, strconv.Itoa(int(shmlockOwnerDead)), w.waitLine(t, "got "))
	w.waitOK(t)
	waits++
	requireWaits(t, st, waits, timeouts, 2, 1)
	require.NoError(t, m.Lock()) // uncontended: counts nothing
	require.True(t, m.Reclaimed())
	require.NoError(t, m.MarkConsistent())
	require.NoError(t, m.Unlock())

	// A Go reader killed: the C writer draining it clears its record.
	g = testproc.StartWithStdin(t, "upg-hold", segPath, name, "shared")
	g.WaitLine(t, "held")
	w = startUpgradeC(t, "wait", segPath, name, "unique")
	w.waitLine(t, "waiting")
	testproc.WaitFor(t, func() bool { return status().UniqueWaiters == 1 }, "the C writer draining")
	g.Kill(t)
	require.Equal(t, "0", w.waitLine(t, "got "))
	w.waitOK(t)
	waits++
	requireWaits(t, st, waits, timeouts, 2, 2)
}

// shmlockOwnerDead is SHMLOCK_OWNERDEAD (include/shmlock.h).
const shmlockOwnerDead = 1

// A C waiter counts its waits on a lock-manager entry as a Go one does:
// timed out behind a Go holder, granted when the Go holder's release wakes
// it (counted by the release), and one reclaim when the holder it waits
// behind, a Go process, is killed.
func TestLockMgrStatsCWaiter(t *testing.T) {
	t.Parallel()
	const res, n = "clib.lm.stats", 3
	path, seg, m, _ := newLockMgrSegment(t, 16)
	ctx := context.Background()
	_, err := m.Acquire(ctx, res, "go", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	ri, err := m.Inspect(res)
	require.NoError(t, err)
	st := seg.LockStats(layout.KindLockMgr, ri.Entry)
	require.NotNil(t, st)
	e := lmEntry(t, seg, res)

	startLockMgrC(t, "timeouts", path, res, "c", strconv.Itoa(n), "5").WaitOK(t)
	requireWaits(t, st, n, n, 0, 0)

	// A C sleeper woken by the Go release.
	sleeps := st.Sleeps.Load()
	c := startCWithStdin(t, "lockmgr", asleepUntilWoken, "hold", path, res, "c", "exclusive")
	c.WaitLine(t, "waiting")
	testproc.WaitFor(t, func() bool {
		return e.Sleepers.Load()&(1<<24-1) > 0 && st.Sleeps.Load() > sleeps && asleepInKernel(c.PID())
	}, "the C waiter asleep")
	require.NoError(t, m.Release(res, "go"))
	c.WaitLine(t, "held ")
	requireWaits(t, st, n+1, n, 1, 0)
	c.Send(t, "release")
	c.WaitOK(t)

	// A Go holder killed: the C waiter ends its hold.
	g := testproc.StartWithStdin(t, "lockmgr-hold", path, res, "go-holder", "exclusive")
	g.WaitLine(t, "held ")
	c = startCWithStdin(t, "lockmgr", "hold", path, res, "c2", "exclusive")
	c.WaitLine(t, "waiting")
	waitSleeper(t, e)
	g.Kill(t)
	require.Contains(t, c.WaitLine(t, "held "), "reclaimed=1")
	requireWaits(t, st, n+2, n, 1, 1)
	c.Send(t, "release")
	c.WaitOK(t)
	requireClean(t, m)
}
