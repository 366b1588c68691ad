package shm_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
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
	defer other.Close()

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
}

// A Segment's goroutines exclude each other: at most one holds the lock
// at any time, however their takes and releases interleave, and so do
// they with another Segment's.
func TestOperatorLockExcludesGoroutines(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Upgrades: 1}})
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer other.Close()
	var holders, takes atomic.Int32
	var wg sync.WaitGroup
	for _, s := range []*shm.Segment{seg, seg, seg, other} {
		wg.Go(func() {
			for range 500 {
				unlock, ok, err := s.TryLockOperator(layout.KindUpgrades, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					runtime.Gosched()
					continue
				}
				takes.Add(1)
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d holders of one operator lock", n)
				}
				runtime.Gosched()
				holders.Add(-1)
				unlock()
			}
		})
	}
	wg.Wait()
	require.Positive(t, takes.Load())
}

// A Close while operator locks are held leaves them held, and the file
// open to release them through, until the last release: a force in
// flight at Close keeps its exclusion to the end. The releases after it
// then work as before it, and so does a second call.
func TestOperatorLockOutlivesClose(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Upgrades: 2}})
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	var unlocks []func()
	for i := range 2 {
		unlock, ok, err := other.TryLockOperator(layout.KindUpgrades, i)
		require.NoError(t, err)
		require.True(t, ok)
		unlocks = append(unlocks, unlock)
	}
	require.NoError(t, other.Close())
	_, _, err = other.TryLockOperator(layout.KindUpgrades, 0)
	require.ErrorIs(t, err, shm.ErrClosed)
	require.ErrorIs(t, other.Close(), shm.ErrClosed)
	for i, unlock := range unlocks {
		_, ok, err := seg.TryLockOperator(layout.KindUpgrades, i)
		require.NoError(t, err)
		require.False(t, ok, "the lock of mutex %d of a closed Segment, not yet released", i)
		require.False(t, shm.FileClosed(other), "the file of a closed Segment with a lock not yet released")
		unlock()
		again, ok, err := seg.TryLockOperator(layout.KindUpgrades, i)
		require.NoError(t, err)
		require.True(t, ok, "the lock of mutex %d of a closed Segment, released", i)
		again()
		unlock()
	}
	require.True(t, shm.FileClosed(other), "the file of a closed Segment once its last lock is released")
}

// The operator lock does not cost the process its classic record locks
// (F_SETLK, lockf) on the segment file, which the close of any descriptor
// of the file drops: neither a take, granted or not, nor a release closes
// one. Another process sees the lock still held.
func TestOperatorLockKeepsClassicLocks(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Upgrades: 1}})
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer other.Close()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	classic := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: 1}
	require.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_SETLK, &classic))
	want := "held " + strconv.Itoa(os.Getpid())
	require.Equal(t, want, testproc.RunLine(t, "", "classic-lock", path), "the classic lock before any operator lock")

	unlock, ok, err := seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = other.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.False(t, ok)
	unlock()
	// Bounded: a release that left the lock held would keep it waiting.
	ctx, cancel := context.WithTimeout(t.Context(), testproc.Timeout)
	defer cancel()
	unlock, err = other.LockOperator(ctx, layout.KindUpgrades, 0, nil)
	require.NoError(t, err)
	unlock()
	require.Equal(t, want, testproc.RunLine(t, "", "classic-lock", path), "the classic lock after operator locks")
}

// classicLockHelper (PATH) prints "held PID" if a process holds a classic
// record lock that covers byte 0 of the file, "free" if none does.
func classicLockHelper(args []string) int {
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer f.Close()
	probe := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &probe); err != nil {
		fmt.Println("error", err)
		return 1
	}
	if probe.Type == unix.F_UNLCK {
		fmt.Println("free")
	} else {
		fmt.Println("held", probe.Pid)
	}
	return 0
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
// does nothing. Releasing again would release the lock another goroutine
// of the same Segment had taken since, with the same description.
func TestOperatorLockUnlockTwice(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Upgrades: 1}})
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer other.Close()
	unlock, ok, err := seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok)
	unlock()
	since, ok, err := seg.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok, "the lock after its release")
	unlock()
	for _, s := range []*shm.Segment{seg, other} {
		_, ok, err = s.TryLockOperator(layout.KindUpgrades, 0)
		require.NoError(t, err)
		require.False(t, ok, "the lock taken since, after the first release's second call")
	}
	since()
	unlock, ok, err = other.TryLockOperator(layout.KindUpgrades, 0)
	require.NoError(t, err)
	require.True(t, ok, "the lock after the releases")
	unlock()
}

// A Close that comes between TryLockOperator's checks and its take of the
// lock (another goroutine's, as a force racing a shutdown) makes it fail
// with ErrClosed, as every call after Close does, not with the fcntl's
// "use of closed file", and leaves the file closed. Not parallel: it sets
// a hook of the package.
func TestOperatorLockRacingClose(t *testing.T) {
	seg, _ := create(t, shm.Options{Options: layout.Options{Upgrades: 1}})
	defer shm.SetTestHookOperatorLock(func() { require.NoError(t, seg.Close()) })()
	_, _, err := seg.TryLockOperator(layout.KindUpgrades, 0)
	require.ErrorIs(t, err, shm.ErrClosed)
	require.True(t, shm.FileClosed(seg))
}
