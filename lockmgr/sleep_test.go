package lockmgr_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
)

// A process whose acquisition conflicts with another process's hold for a
// second sleeps: it uses a small fraction of a core. The waiter retries
// on design 004's default backoff (woken early by the release), as a real
// caller with AcquireOptions.Wait does, so the attempts between sleeps are
// part of what is measured. This is not a speed test: a waiter that sleeps
// uses next to nothing however slow the machine, one that spins uses all
// the CPU it is given. Not parallel, so that it runs alone.
func TestBlockedWaiterSleeps(t *testing.T) {
	for _, tc := range []struct {
		holder, waiter lockmgr.Mode
	}{
		{X, X},
		{X, C}, // a collaborative waiter blocks behind an exclusive hold
		{C, X}, // and an exclusive one behind a collaborative hold
	} {
		t.Run(tc.waiter.String()+" behind "+tc.holder.String(), func(t *testing.T) {
			m, seg, path := newManagerAt(t, 2, lockmgr.Options{})
			_, err := m.Acquire(context.Background(), "r", "holder", tc.holder, lockmgr.AcquireOptions{})
			require.NoError(t, err)
			e := onlyEntry(t, seg)
			sleepers := func() uint32 { return e.Sleepers.Load() & lockmgr.SleepCount }
			c := testproc.Start(t, "wait-cpu", path, tc.waiter.String())
			waitFor(t, func() bool { return sleepers() == 1 }, "the waiter to sleep")
			testproc.RequireSlept(t, c, tc.waiter.String()+" waiter behind "+tc.holder.String()+" hold",
				func() error { return m.Release("r", "holder") })
			info, err := m.Inspect("r")
			require.NoError(t, err)
			require.Empty(t, info.Holders, "holders after the waiter's release")
			require.Zero(t, sleepers(), "sleepers registered at the end")
		})
	}
}

// waitCPUHelper acquires resource "r" in MODE as owner "waiter", retrying
// on the default backoff for up to testTimeout, prints the CPU and wall
// time the acquisition took (testproc.Waiting) and releases. Args: PATH
// MODE.
func waitCPUHelper(args []string) int {
	seg, m, _, err := openHelper(args[0])
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	mode, err := lockmgr.ParseMode(args[1])
	if err != nil {
		return fail("%v", err)
	}
	w, err := testproc.StartWaiting()
	if err != nil {
		return fail("%v", err)
	}
	if _, err := m.Acquire(context.Background(), "r", "waiter", mode, lockmgr.AcquireOptions{Wait: testTimeout}); err != nil {
		return fail("acquire: %v", err)
	}
	if err := w.Report(); err != nil {
		return fail("%v", err)
	}
	if err := m.Release("r", "waiter"); err != nil {
		return fail("release: %v", err)
	}
	return 0
}
