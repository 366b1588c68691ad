package lockmgr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// waitHelper waits for RESOURCE as OWNER, asleep (an hour's backoff)
// until killed. Args: PATH RESOURCE OWNER.
func waitHelper(args []string) int {
	seg, m, _, err := openHelper(args[0])
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	fmt.Println("waiting")
	_, err = m.Acquire(context.Background(), args[1], args[2], lockmgr.Exclusive, untilWoken)
	return fail("acquired (%v), not killed", err)
}

// untilWoken are the options of an acquisition that retries until granted,
// asleep between attempts (an hour's backoff) until a hold's end wakes it.
var untilWoken = lockmgr.AcquireOptions{Retries: lockmgr.RetryForever,
	Backoff: lockmgr.Backoff{Initial: time.Hour, Max: time.Hour}}

// acquireAsleep starts owner's acquisition of "r" in mode (untilWoken) and
// returns, once asleep reports it asleep, the channel of its result.
func acquireAsleep(t *testing.T, ctx context.Context, m *lockmgr.Manager, owner string, mode lockmgr.Mode, asleep func() bool) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, "r", owner, mode, untilWoken)
		done <- err
	}()
	waitFor(t, asleep, "the waiter to sleep")
	return done
}

// heldWithSleeper makes a table with one resource, "r", that "a" holds
// exclusively, and an Acquire of it by "b" in mode that sleeps (woken
// only by a release); done gets that Acquire's error.
func heldWithSleeper(t *testing.T, mode lockmgr.Mode) (m *lockmgr.Manager, e *layout.LockMgrEntry, done <-chan error) {
	t.Helper()
	m, seg := newManager(t, 2, lockmgr.Options{})
	_, err := m.Acquire(t.Context(), "r", "a", X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	e = onlyEntry(t, seg)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	done = acquireAsleep(t, ctx, m, "b", mode, func() bool { return e.Sleepers.Load()&lockmgr.SleepCount == 1 })
	return m, e, done
}

// onlyEntry returns the one resource entry of a table of two entries.
func onlyEntry(t *testing.T, seg *shm.Segment) *layout.LockMgrEntry {
	t.Helper()
	mem, err := seg.Region(layout.KindLockMgr)
	require.NoError(t, err)
	require.Equal(t, 2*layout.LockMgrEntrySize, len(mem))
	e, err := memview.At[layout.LockMgrEntry](mem, layout.LockMgrEntrySize)
	require.NoError(t, err)
	return e
}

func futileWakes(s uint32) uint32 { return (s & lockmgr.SleepFutile) >> lockmgr.SleepFutileShift }

// The bits of Sleepers as a release finds and leaves them, with registered
// sleepers that are not in the kernel (a killed waiter's registration).
func TestFutileWakeBits(t *testing.T) {
	t.Parallel()
	futile := func(n uint32) uint32 { return n << lockmgr.SleepFutileShift }
	for _, tc := range []struct {
		name         string
		before, want uint32
	}{
		{"the first futile wake is counted, the count kept", 1, 1 | futile(1)},
		{"and the next", 2 | futile(1), 2 | futile(2)},
		{"the longest run drops the count, to the next epoch", 3 | futile(lockmgr.SleepFutileMax-1), 1 << lockmgr.SleepEpochShift},
		{"a pending wake is another release's: no wake, nothing counted", 1 | futile(5) | lockmgr.SleepWakePending, 1 | futile(5) | lockmgr.SleepWakePending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, seg := newManager(t, 2, lockmgr.Options{})
			ctx := context.Background()
			_, err := m.Acquire(ctx, "r", "a", X, lockmgr.AcquireOptions{})
			require.NoError(t, err)
			e := onlyEntry(t, seg)
			e.Sleepers.Store(tc.before)
			require.NoError(t, m.Release("r", "a"))
			assert.Equal(t, tc.want, e.Sleepers.Load(), "Sleepers %#x after a release", tc.before)
		})
	}
}

// A live sleeper that returns from the kernel resets the futile-wake
// count: a run of futile wakes is only as long as no sleeper runs.
func TestSleeperResetsFutileWakes(t *testing.T) {
	t.Parallel()
	m, e, done := heldWithSleeper(t, X)
	e.Sleepers.Add((lockmgr.SleepFutileMax - 1) << lockmgr.SleepFutileShift) // one futile wake from the limit
	require.NoError(t, m.Release("r", "a"))
	require.NoError(t, <-done)
	assert.Zero(t, futileWakes(e.Sleepers.Load()), "the woken sleeper reset the count")
	require.NoError(t, m.Release("r", "b"))
	// The epoch aside: the sleeper is counted before it reaches the
	// kernel, and if the release's wake came in between, that wake was
	// the run's last futile one and dropped the count, moving the epoch.
	assert.Zero(t, e.Sleepers.Load()&^lockmgr.SleepEpoch, "Sleepers at the end")
}

// A waiter killed while it sleeps leaves its registration in Sleepers, and
// every end of a hold that finds a registered sleeper makes a futex system
// call. Those wakes find nobody; after a run of them (no live sleeper
// running in between) the release drops the stale count, so the resource
// does not pay a system call at every release for good.
func TestKilledSleeperRegistrationExpires(t *testing.T) {
	t.Parallel()
	m, seg, path := newManagerAt(t, 2, lockmgr.Options{})
	ctx := context.Background()
	e := onlyEntry(t, seg)
	sleepers := func() uint32 { return e.Sleepers.Load() & lockmgr.SleepCount }
	for attempt := 0; ; attempt++ {
		_, err := m.Acquire(ctx, "r", "a", X, lockmgr.AcquireOptions{})
		require.NoError(t, err)
		c := testproc.Start(t, "wait", path, "r", "w")
		c.WaitLine(t, "waiting")
		waitFor(t, func() bool { return sleepers() == 1 }, "the waiter registers as a sleeper")
		c.Kill(t)
		if sleepers() == 1 {
			break // killed while registered
		}
		// Killed in the instant between two sleep slices: nothing stale
		// to test this time.
		require.Less(t, attempt, 3, "the waiter was never killed while registered")
		require.NoError(t, m.Release("r", "a"))
	}
	for i := 0; sleepers() != 0; i++ {
		require.LessOrEqual(t, i, int(lockmgr.SleepFutileMax), "the dead sleeper's registration outlived %d futile wakes", i)
		require.NoError(t, m.Release("r", "a"))
		_, err := m.Acquire(ctx, "r", "a", X, lockmgr.AcquireOptions{})
		require.NoError(t, err)
	}
	require.NoError(t, m.Release("r", "a"))
	assert.Equal(t, uint32(1)<<lockmgr.SleepEpochShift, e.Sleepers.Load(), "Sleepers after the repair: no sleeper, no futile wake, the next epoch")
}

// A collaborative grant after a sleep wakes every other sleeper
// (wakeAll); when that finds nobody in the kernel, it counts as a futile
// wake too, or a stale registration would cost every such grant a system
// call for good.
func TestWakeAllCountsFutileWake(t *testing.T) {
	t.Parallel()
	m, e, done := heldWithSleeper(t, C)
	e.Sleepers.Add(1) // a killed waiter's registration beside it
	require.NoError(t, m.Release("r", "a"))
	require.NoError(t, <-done)
	assert.Equal(t, uint32(1|1<<lockmgr.SleepFutileShift), e.Sleepers.Load(),
		"the stale registration kept, the grant's wake of the others counted futile")
	require.NoError(t, m.Release("r", "b"))
}
