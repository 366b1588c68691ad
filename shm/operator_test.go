package shm_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// An operator lock excludes every other taker of the same lock: another
// Segment of the file (in this process or another), and another goroutine
// of the same Segment, which shares its open file description and would
// otherwise share its lock. Other entries' locks are apart.
func TestOperatorLockExcludes(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Upgrades: 2}})
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)

	unlock, ok, err := seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok)
	for _, s := range []*shm.Segment{seg, other} {
		_, ok, err = s.TryLockOperator(layout.KindUpgrades, 0)
		require.NoError(t, err)
		require.False(t, ok, "a second taker of a held operator lock")
	}
	unlock1, ok, err := other.TryLockOperator(layout.KindUpgrades, 1)
	require.NoError(t, err)
	require.True(t, ok, "another mutex's operator lock")
	unlock1()
	unlock2, ok, err := other.TryLockOperator(layout.KindOwnerSlots, 0)
	require.NoError(t, err)
	require.True(t, ok, "another table's operator lock")
	unlock2()

	unlock()
	unlock, ok, err = other.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok, "the lock after its release")
	_, ok, err = seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.False(t, ok)
	unlock()
	unlock, ok, err = seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok, "the same Segment's lock after another's release")
	unlock()

	// Close drops the lock with the file; the unlock after it is harmless.
	unlock, ok, err = other.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, other.Close())
	unlock()
	unlock, ok, err = seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok, "the lock of a closed Segment")
	unlock()
}

// The operator lock lies past the end of the file and ignores the
// flock(2) that reboot recovery takes on the same file: neither waits for
// the other.
func TestOperatorLockIgnoresFlock(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Upgrades: 1}})
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	unlock, ok, err := seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok, "the operator lock under another description's flock")
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB), "a flock under the operator lock")
	unlock()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Less(t, fi.Size(), int64(1)<<40, "the lock does not grow the file")
}

// The kernel drops a dead holder's operator lock: no process can die
// holding it for good.
func TestOperatorLockGoesWithItsHolder(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Upgrades: 1}})
	c := testproc.Start(t, "operator-lock", path)
	c.WaitLine(t, "locked")
	_, ok, err := seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.False(t, ok, "the lock of a live holder")
	c.Kill(t)
	unlock, ok, err := seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok, "the lock of a dead holder")
	unlock()
}

// operatorLockHelper (PATH) takes upgrade mutex 0's operator lock, prints
// "locked" and sleeps until killed.
func operatorLockHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer seg.Close()
	if _, ok, err := seg.TryLockOperator(layout.KindUpgrades, 0); err != nil || !ok {
		fmt.Println("error", ok, err)
		return 1
	}
	fmt.Println("locked")
	time.Sleep(time.Hour)
	return 0
}

// A read-only segment cannot take the lock (the kernel grants it only on
// a file open for writing), nor a closed one, nor an index out of range.
func TestOperatorLockRefused(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Upgrades: 1}})
	ro, err := shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	_, _, err = ro.TryLockOperator(layout.KindUpgrades, 0)
	require.ErrorIs(t, err, shm.ErrReadOnly)
	require.NoError(t, ro.Close())
	for _, i := range []int{-1, 1} {
		_, _, err = seg.TryLockOperator(layout.KindUpgrades, i)
		require.ErrorIs(t, err, shm.ErrIndex, "index %d", i)
	}
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	require.NoError(t, other.Close())
	_, _, err = other.TryLockOperator(layout.KindUpgrades, 0)
	require.ErrorIs(t, err, shm.ErrClosed)
}

// The release an operator lock returns may run twice (a deferred one
// after an explicit one, as a caller that unwinds may do): the second
// does nothing. Closing the descriptor again would close whatever file
// the process had opened under that number since, another Segment's
// included. Not parallel: it watches the process's descriptor numbers.
func TestOperatorLockUnlockTwice(t *testing.T) {
	seg, _ := create(t, shm.Options{Options: layout.Options{Upgrades: 1}})
	unlock, ok, err := seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok)
	unlock()
	// The lowest free numbers, the one the release gave back among them.
	var fds []int
	for range 64 {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		fds = append(fds, fd)
	}
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	unlock()
	for _, fd := range fds {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		require.NoError(t, err, "descriptor %d, opened after the release, closed by the second", fd)
	}
	unlock, ok, err = seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok, "the lock after the releases")
	unlock()
}

// A Close that comes between TryLockOperator's checks and its take of the
// lock (another goroutine's, as a force racing a shutdown) makes it fail
// with ErrClosed, as every call after Close does, not with the reopen's
// "use of closed file". Not parallel: it sets a hook of the package.
func TestOperatorLockRacingClose(t *testing.T) {
	seg, _ := create(t, shm.Options{Options: layout.Options{Upgrades: 1}})
	defer shm.SetTestHookOperatorLock(func() { require.NoError(t, seg.Close()) })()
	_, _, err := seg.TryLockOperator(layout.KindUpgrades, 0)
	require.ErrorIs(t, err, shm.ErrClosed)
}
