package upgrade_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/upgrade"
)

// The sleeper words as a writer's Unlock finds and leaves them, with
// registered sleepers that are not in the kernel (killed waiters'
// registrations): Unlock wakes SharedGate and one writer on WriterGate.
func TestFutileWakeBits(t *testing.T) {
	t.Parallel()
	futile := func(n uint32) uint32 { return n << upgrade.FutileShift }
	for _, tc := range []struct {
		name                 string
		waiters, sleepers    uint32 // before Unlock
		wantWait, wantSleeps uint32 // after
	}{
		{"nobody registered: nothing counted", 0, 0, 0, 0},
		{"the first futile wake of each gate is counted, the counts kept",
			1, 1, 1 | futile(1), 1 | futile(1)},
		{"and the next", 2 | futile(1), 2 | futile(1), 2 | futile(2), 2 | futile(2)},
		{"the longest run drops the counts, each to its next epoch",
			3 | futile(upgrade.FutileMax-1), 3 | futile(upgrade.FutileMax-1), upgrade.WaitersEpochUnit, 1 << upgrade.EpochShift},
		{"a unique flag is neither counted nor dropped",
			upgrade.UniqueUpgrader | 1 | futile(upgrade.FutileMax-1), 0, upgrade.UniqueUpgrader | upgrade.WaitersEpochUnit, 0},
		{"a writer wake pending is another release's: no wake, nothing counted",
			0, 1 | futile(5) | upgrade.WriterWakePending, 0, 1 | futile(5) | upgrade.WriterWakePending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seg, _ := newSegment(t)
			e := entry(t, seg)
			w := open(t, seg)
			require.NoError(t, w.Lock())
			e.Waiters.Store(tc.waiters)
			e.WriterSleepers.Store(tc.sleepers)
			require.NoError(t, w.Unlock())
			assert.Equal(t, tc.wantWait, e.Waiters.Load(), "Waiters %#x after Unlock", tc.waiters)
			assert.Equal(t, tc.wantSleeps, e.WriterSleepers.Load(), "WriterSleepers %#x after Unlock", tc.sleepers)
		})
	}
}

// A live shared sleeper that runs resets the futile-wake count, and so
// does a writer that slept: a run of futile wakes is only as long as no
// sleeper runs. (The words are compared without their epochs: a sleeper is
// counted before it reaches the kernel, and if the release's wake came in
// between, that wake was the run's last futile one and dropped the count,
// moving the epoch.)
func TestSleepersResetFutileWakes(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	e := entry(t, seg)
	w := open(t, seg)
	require.NoError(t, w.Lock())

	r := open(t, seg)
	got := make(chan error, 1)
	go func() { got <- r.LockShared() }()
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.SharedWaiters == 1 }, "the reader to sleep")
	e.Waiters.Add((upgrade.FutileMax - 1) << upgrade.FutileShift) // one futile wake from the limit
	require.NoError(t, w.Unlock())
	require.NoError(t, <-got)
	assert.Zero(t, e.Waiters.Load()&^upgrade.WaitersEpoch, "the woken reader took its registration and the futile count off")
	require.NoError(t, r.UnlockShared())

	require.NoError(t, w.Lock())
	w2 := open(t, seg)
	go func() { got <- w2.Lock() }()
	waitWriterAsleep(t, seg)
	e.WriterSleepers.Add((upgrade.FutileMax - 1) << upgrade.FutileShift)
	require.NoError(t, w.Unlock())
	require.NoError(t, <-got)
	assert.Zero(t, e.WriterSleepers.Load()&^upgrade.SleepersEpoch, "the woken writer took its registration and the futile count off")
	require.NoError(t, w2.Unlock())
	checkFree(t, status(t, seg))
}

// A reader or a writer killed while it sleeps (in LockShared on the shared
// gate, in Lock on the writers' gate) leaves its registration, and every
// Unlock that finds a registered sleeper makes a futex system call. Those
// wakes find nobody; after a run of them (no live sleeper running in
// between) Unlock drops the stale count, so the mutex does not pay a
// system call at every Unlock for good.
func TestKilledSleeperRegistrationExpires(t *testing.T) {
	for _, tc := range []struct {
		mode  string // of the hold helper
		count func(upgrade.Status) uint32
		limit uint32
	}{
		{"queued-shared", func(st upgrade.Status) uint32 { return st.SharedWaiters }, upgrade.FutileMax},
		{"queued", func(st upgrade.Status) uint32 { return st.WriterWaiters }, upgrade.FutileMax},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			seg, path := newSegment(t)
			e := entry(t, seg)
			w := open(t, seg)
			count := func() uint32 { return tc.count(status(t, seg)) }
			for attempt := 0; ; attempt++ {
				require.NoError(t, w.Lock())
				c := testproc.Start(t, "hold", path, tc.mode)
				c.WaitLine(t, "held")
				waitFor(t, func() bool { return count() == 1 && e.Writer.Load()&upgrade.WriterHungry == 0 },
					"the waiter registers as a sleeper, its mark off")
				c.Kill(t)
				if count() == 1 {
					break // killed while registered
				}
				// Killed in the instant between two sleeps (every liveness
				// interval): nothing stale to test this time.
				require.Less(t, attempt, 3, "the waiter was never killed while registered")
				require.NoError(t, w.Unlock())
			}
			for i := 0; count() != 0; i++ {
				require.LessOrEqual(t, i, int(tc.limit), "the dead sleeper's registration outlived %d futile wakes", i)
				require.NoError(t, w.Unlock())
				require.NoError(t, w.Lock())
			}
			require.NoError(t, w.Unlock())
			assert.Zero(t, e.Waiters.Load()&^upgrade.WaitersEpoch, "Waiters after the repair (its epoch aside)")
			assert.Zero(t, e.WriterSleepers.Load()&^upgrade.SleepersEpoch, "WriterSleepers after the repair (its epoch aside)")
			checkFree(t, status(t, seg))
		})
	}
}

// A holder killed while it sleeps on the unique gate (a writer draining
// readers, an upgrade holder draining them for UpgradeToUnique) leaves its
// flag in Waiters; whoever takes its lock over clears it, so the flag does
// not outlive the dead process's hold.
func TestKilledUniqueSleeperFlagGoes(t *testing.T) {
	for _, tc := range []struct {
		mode     string // of the hold helper
		flag     uint32
		takeOver func(m *upgrade.Mutex) error
		release  func(m *upgrade.Mutex) error
	}{
		{"unique", upgrade.UniqueWriter, (*upgrade.Mutex).Lock, (*upgrade.Mutex).Unlock},
		{"pending", upgrade.UniqueUpgrader, (*upgrade.Mutex).LockUpgrade, (*upgrade.Mutex).UnlockUpgrade},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			seg, path := newSegment(t)
			e := entry(t, seg)
			r, m := open(t, seg), open(t, seg)
			for attempt := 0; ; attempt++ {
				require.NoError(t, r.LockShared()) // keeps the helper draining
				c := testproc.Start(t, "hold", path, tc.mode)
				waitStatus(t, seg, func(st upgrade.Status) bool { return st.UniqueWaiters == 1 }, "the helper to sleep on the unique gate")
				c.Kill(t)
				// Its flag stays set as long as it is registered: it
				// sleeps on, slice after slice, with no reader draining.
				flag := e.Waiters.Load() & (upgrade.UniqueWriter | upgrade.UniqueUpgrader)
				require.NoError(t, r.UnlockShared())
				require.NoError(t, tc.takeOver(m))
				require.True(t, m.Reclaimed(), "the dead holder's lock was taken over")
				assert.Zero(t, e.Waiters.Load(), "Waiters after the takeover")
				require.NoError(t, tc.release(m))
				if flag != 0 {
					require.Equal(t, tc.flag, flag, "the dead holder's flag")
					break
				}
				// Killed in the instant between two sleeps (every liveness
				// interval): nothing stale was tested this time.
				require.Less(t, attempt, 3, "the holder was never killed while registered")
			}
			checkFree(t, status(t, seg))
		})
	}
}
