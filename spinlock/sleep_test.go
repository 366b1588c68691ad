package spinlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/spinlock"
)

// A waiter spins only briefly and then sleeps; these bound what it may cost.
const (
	blockedFor   = time.Second // how long the waiter is kept blocked
	maxWaiterCPU = 25          // percent of the blocked time; a spinning waiter uses ~100
)

// A process blocked on a held lock for a second sleeps: it uses a small
// fraction of a core. This is not a speed test: a waiter that sleeps uses
// next to nothing however slow the machine, one that spins uses all the
// CPU it is given. Not parallel, so that it runs alone.
func TestBlockedWaiterSleeps(t *testing.T) {
	seg, path := newSegment(t)
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	c := testproc.Start(t, "wait-cpu", path)
	waitFor(t, func() bool { return l.Slot().Pad.Load() == 1 }, "the waiter to sleep")
	time.Sleep(blockedFor)
	require.NoError(t, g.Release())
	c.WaitOK(t)

	var cpu, wall time.Duration
	_, err = fmt.Sscanf(c.WaitLine(t, "waited "), "cpu=%d wall=%d", &cpu, &wall)
	require.NoError(t, err)
	require.GreaterOrEqual(t, wall, blockedFor)
	pct := 100 * float64(cpu) / float64(wall)
	t.Logf("blocked waiter used %v of CPU in %v: %.2f%% of a core", cpu, wall, pct)
	if pct >= maxWaiterCPU {
		t.Fatalf("blocked waiter used %.1f%% of a core, want < %d%%: it spins instead of sleeping", pct, maxWaiterCPU)
	}
}

func waitCPUHelper(args []string) int {
	seg, l, _, err := openLock(args[0], spinlock.PIDTID)
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	before, err := testproc.CPUTime(unix.RUSAGE_SELF)
	if err != nil {
		return fail("%v", err)
	}
	start := time.Now()
	var g spinlock.Guard
	if err := g.TryLockFor(l, spinlock.NewHolder(), testTimeout); err != nil {
		return fail("lock: %v", err)
	}
	wall := time.Since(start)
	after, err := testproc.CPUTime(unix.RUSAGE_SELF)
	if err != nil {
		return fail("%v", err)
	}
	if err := g.Release(); err != nil {
		return fail("release: %v", err)
	}
	fmt.Printf("waited cpu=%d wall=%d\n", after-before, wall)
	return 0
}
