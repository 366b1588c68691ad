package upgrade_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// pendingCancelHelper takes the upgrade lock and upgrades, giving up when
// a line comes on stdin; it prints the upgrade's result.
func pendingCancelHelper(args []string) int {
	seg, m, ok := openMutex0(args[0])
	if !ok {
		return 1
	}
	defer seg.Close()
	if err := m.LockUpgrade(); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		cancel()
	}()
	fmt.Println("result", m.UpgradeToUniqueContext(ctx))
	return 0
}

// An upgrade that ForceUnlock freed while it was pending, and that gives
// up (its context) after another holder's upgrade became pending, leaves
// that upgrade's statePending alone: it cleared it, letting readers in
// beside an upgrade that waits for them to drain, whose UpgradeToUnique
// then said ErrNotHeld while its handle held the upgrade lock. The forced
// upgrade is a stopped process, so that it is still waiting when the
// other upgrade begins.
func TestForcedPendingUpgradeGivesUp(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	reader, u2, other := open(t, seg), open(t, seg), open(t, seg)
	require.NoError(t, reader.LockShared())
	c, f := forcedPendingUpgrade(t, seg, path, "the child's upgrade")
	require.Equal(t, c.Identity(t), f.Upgrader)

	require.NoError(t, reader.LockShared())
	require.NoError(t, u2.LockUpgrade())
	done := make(chan error, 1)
	go func() { done <- u2.UpgradeToUnique() }()
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.UpgradePending }, "the second upgrade to be pending")

	c.Send(t, "give up")
	require.NoError(t, syscall.Kill(c.PID(), syscall.SIGCONT))
	require.Contains(t, c.WaitOK(t), "result "+context.Canceled.Error()+"\n")
	require.True(t, status(t, seg).UpgradePending, "the second upgrade is still pending")
	require.ErrorIs(t, other.TryLockShared(), upgrade.ErrWouldBlock, "no reader gets in beside a pending upgrade")

	require.NoError(t, reader.UnlockShared())
	require.NoError(t, testproc.Receive(t, done, "the second upgrade"))
	require.NoError(t, u2.UniqueToUpgrade())
	require.NoError(t, u2.UnlockUpgrade())
}

// The same forced upgrade, waking after the next upgrade holder's pending
// upgrade went to sleep on UniqueGate, leaves that sleeper's registration
// alone: it cleared the upgrade holder's sleeper bit, so the last reader's
// release woke nobody and the upgrade waited out a liveness interval. The
// second upgrade is a stopped process too, so that nothing registers it
// again while the test looks.
func TestForcedPendingUpgradeLeavesTheNextOnesSleep(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	reader := open(t, seg)
	require.NoError(t, reader.LockShared())
	forced, _ := forcedPendingUpgrade(t, seg, path, "the first upgrade")

	require.NoError(t, reader.LockShared())
	next := stoppedPendingUpgrade(t, seg, path, "the second upgrade")

	forced.Send(t, "give up")
	require.NoError(t, syscall.Kill(forced.PID(), syscall.SIGCONT))
	require.Contains(t, forced.WaitOK(t), "result "+context.Canceled.Error()+"\n")
	require.Equal(t, uint32(1), status(t, seg).UniqueWaiters, "the second upgrade still sleeps registered")

	require.NoError(t, syscall.Kill(next.PID(), syscall.SIGCONT))
	require.NoError(t, reader.UnlockShared())
	require.Contains(t, next.WaitOK(t), "result <nil>\n")
}

// stoppedPendingUpgrade starts a pending-cancel child on the segment at
// path, waits until its upgrade sleeps pending (what names it) and stops it,
// so that it stays asleep while the test looks.
func stoppedPendingUpgrade(t *testing.T, seg *shm.Segment, path, what string) *testproc.Child {
	t.Helper()
	c := testproc.StartWithStdin(t, "pending-cancel", path)
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.UpgradePending && st.UniqueWaiters == 1 }, what+" to wait")
	c.Stop(t)
	return c
}

// forcedPendingUpgrade is a stoppedPendingUpgrade whose upgrade lock
// ForceUnlock then frees: the child, and what the force found.
func forcedPendingUpgrade(t *testing.T, seg *shm.Segment, path, what string) (*testproc.Child, upgrade.Forced) {
	t.Helper()
	c := stoppedPendingUpgrade(t, seg, path, what)
	f, err := upgrade.ForceUnlock(seg, 0)
	require.NoError(t, err)
	return c, f
}
