package coro_test

import (
	"bufio"
	"context"
	"errors"
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
	"github.com/shmlock/shmlock/upgrade"
)

func init() {
	helpers["rwcount"] = rwCountHelper
	helpers["rwhold"] = rwHoldHelper
}

const rwName = "coro-rw"

// upgradeMutex opens the segment, a handle on the test's upgrade mutex and
// the plain counter.
func upgradeMutex(path string) (*shm.Segment, *upgrade.Mutex, *uint64, error) {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := upgrade.Named(seg, rwName)
	if err == nil {
		var mem []byte
		if mem, err = seg.Region(layout.KindLockMgr); err == nil {
			var counter *uint64
			if counter, err = memview.At[uint64](mem, 0); err == nil {
				return seg, m, counter, nil
			}
		}
		_ = m.Close()
	}
	_ = seg.Close()
	return nil, nil, nil, err
}

// rwCountHelper: args path goroutines rounds. Each goroutine increments the
// plain counter rounds times under a ProcessMutex over the unique lock.
func rwCountHelper(args []string) int {
	seg, h, counter, err := upgradeMutex(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer seg.Close()
	defer h.Close()
	m := coro.NewProcessMutex(coro.UpgradeUnique(h))
	goroutines, _ := strconv.Atoi(args[1])
	rounds, _ := strconv.Atoi(args[2])
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

// rwHoldHelper: args path. Takes the unique lock, says "held", and
// releases when its stdin closes.
func rwHoldHelper(args []string) int {
	seg, h, _, err := upgradeMutex(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer seg.Close()
	defer h.Close()
	if err := h.Lock(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := h.Unlock(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func startRWHolder(t *testing.T, path string) *holder {
	t.Helper()
	cmd := testproc.Command("rwhold", path)
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

// Processes each with several goroutines increment one plain counter
// through a ProcessMutex over the upgrade mutex's unique lock.
func TestUpgradeProcessMutexCounter(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	const procs, goroutines, rounds = 3, 4, 2000
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			out, err := testproc.Command("rwcount", path, strconv.Itoa(goroutines), strconv.Itoa(rounds)).CombinedOutput()
			if err != nil {
				t.Errorf("helper: %v: %s", err, out)
			}
		})
	}
	wg.Wait()
	seg, h, counter, err := upgradeMutex(path)
	require.NoError(t, err)
	defer seg.Close()
	defer h.Close()
	require.EqualValues(t, procs*goroutines*rounds, *counter)
}

// A wait for a unique lock that another process holds gives up when its
// context is done and leaves the mutex as it was: the holder still holds
// it, and once it lets go the lock is free for us.
func TestUpgradeProcessMutexCancel(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	other := startRWHolder(t, path)
	seg, h, _, err := upgradeMutex(path)
	require.NoError(t, err)
	defer seg.Close()
	defer h.Close()
	m := coro.NewProcessMutex(coro.UpgradeUnique(h))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = m.Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = m.TryLock()
	require.ErrorIs(t, err, coro.ErrWouldBlock, "the other process still holds it")

	other.release()
	g, err := m.TryLock()
	require.NoError(t, err)
	require.False(t, g.Reclaimed())
	require.NoError(t, g.Unlock())
	require.ErrorIs(t, g.Unlock(), coro.ErrNotOwner)
}

// The writer process is killed while the ProcessMutex's goroutine waits:
// the waiter takes the lock over and learns that its holder died.
func TestUpgradeProcessMutexReclaim(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	other := startRWHolder(t, path)
	seg, h, _, err := upgradeMutex(path)
	require.NoError(t, err)
	defer seg.Close()
	defer h.Close()
	m := coro.NewProcessMutex(coro.UpgradeUnique(h))

	got := make(chan coro.ProcessGuard, 1)
	go func() {
		g, err := m.Lock(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	other.kill()
	var g coro.ProcessGuard
	select {
	case g = <-got:
	case <-time.After(procTimeout):
		t.Fatal("the lock of a dead writer was not taken over")
	}
	require.True(t, g.Held())
	require.True(t, g.Reclaimed())
	require.NoError(t, g.Unlock())
}

// The upgrade lock through a ProcessMutex sits beside readers of other
// handles, keeps this process's other goroutines queued, and its holder may
// upgrade and downgrade within the hold.
func TestUpgradeProcessMutexUpgradable(t *testing.T) {
	t.Parallel()
	path := newProcessSegment(t)
	seg, h, _, err := upgradeMutex(path)
	require.NoError(t, err)
	defer seg.Close()
	defer h.Close()
	reader, err := upgrade.Named(seg, rwName)
	require.NoError(t, err)
	defer reader.Close()
	m := coro.NewProcessMutex(coro.UpgradeUpgradable(h))

	g, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, reader.TryLockShared(), "a reader beside the upgrade lock")
	_, err = m.TryLock()
	require.ErrorIs(t, err, coro.ErrWouldBlock, "one goroutine of the process at a time")
	require.True(t, errors.Is(h.TryUpgradeToUnique(), upgrade.ErrWouldBlock), "not unique while a reader reads")
	require.NoError(t, reader.UnlockShared())
	require.NoError(t, h.UpgradeToUnique())
	require.ErrorIs(t, reader.TryLockShared(), upgrade.ErrWouldBlock)
	require.NoError(t, h.UniqueToUpgrade())
	require.NoError(t, g.Unlock())
	require.NoError(t, reader.TryLock(), "free once the guard is unlocked")
	require.NoError(t, reader.Unlock())
}
