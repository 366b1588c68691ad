package upgrade_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/upgrade"
)

// The waits of TestBlockedWaiterSleeps: what the test process holds, what
// the helper asks for (waitCPUHelper), and where it sleeps meanwhile.
var blockedWaits = []struct {
	name string // the helper's case
	// hold and release are the test process's hold that blocks the helper.
	hold, release func(m *upgrade.Mutex) error
	asleep        func(upgrade.Status) bool // the helper sleeps where this case waits
}{
	{"unique behind unique", (*upgrade.Mutex).Lock, (*upgrade.Mutex).Unlock,
		func(st upgrade.Status) bool { return st.WriterWaiters == 1 }}, // in the writers' queue
	{"shared behind unique", (*upgrade.Mutex).Lock, (*upgrade.Mutex).Unlock,
		func(st upgrade.Status) bool { return st.SharedWaiters == 1 }},
	{"upgrade behind unique", (*upgrade.Mutex).Lock, (*upgrade.Mutex).Unlock,
		func(st upgrade.Status) bool { return st.SharedWaiters == 1 }}, // upgrade seekers sleep on the shared gate
	{"unique draining readers", (*upgrade.Mutex).LockShared, (*upgrade.Mutex).UnlockShared,
		func(st upgrade.Status) bool { return st.UniqueWaiters == 1 }},
	{"upgrader draining readers", (*upgrade.Mutex).LockShared, (*upgrade.Mutex).UnlockShared,
		func(st upgrade.Status) bool { return st.UniqueWaiters == 1 }},
}

// A process blocked for a second, in each way a call can block, sleeps:
// it uses a small fraction of a core. This is not a speed test: a waiter
// that sleeps uses next to nothing however slow the machine, one that
// spins uses all the CPU it is given. Not parallel, so that it runs alone.
func TestBlockedWaiterSleeps(t *testing.T) {
	for i, tc := range blockedWaits {
		t.Run(tc.name, func(t *testing.T) {
			seg, path := newSegment(t)
			m := open(t, seg)
			defer func() { require.NoError(t, m.Close()) }()
			require.NoError(t, tc.hold(m))
			c := testproc.Start(t, "wait-cpu", path, fmt.Sprint(i))
			waitStatus(t, seg, tc.asleep, "the waiter to sleep")
			testproc.RequireSlept(t, c, tc.name, func() error { return tc.release(m) })
			st := status(t, seg)
			checkFree(t, st)
			require.Zero(t, st.SharedWaiters+st.UniqueWaiters+st.WriterWaiters, "sleepers registered at the end")
		})
	}
}

// waitCPUHelper waits as case CASE of blockedWaits (its index) says, for
// up to testTimeout, prints the CPU and wall time the wait took
// (testproc.Waiting), then releases and closes. Args: PATH CASE.
func waitCPUHelper(args []string) int {
	fail := func(format string, args ...any) int {
		fmt.Printf("error: "+format+"\n", args...)
		return 1
	}
	seg, m, _, err := openHelper(args[0])
	if err != nil {
		return fail("open: %v", err)
	}
	defer seg.Close()
	var i int
	if _, err := fmt.Sscan(args[1], &i); err != nil || i < 0 || i >= len(blockedWaits) {
		return fail("bad case %q", args[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	// wait is the blocking call, release what ends the hold it took.
	var wait, release func() error
	switch name := blockedWaits[i].name; name {
	case "unique behind unique", "unique draining readers":
		wait, release = func() error { return m.LockContext(ctx) }, m.Unlock
	case "shared behind unique":
		wait, release = func() error { return m.LockSharedContext(ctx) }, m.UnlockShared
	case "upgrade behind unique":
		wait, release = func() error { return m.LockUpgradeContext(ctx) }, m.UnlockUpgrade
	case "upgrader draining readers":
		// The upgrade lock goes along with the test's shared hold; the
		// upgrade to unique waits for it to drain.
		if err := m.LockUpgradeContext(ctx); err != nil {
			return fail("LockUpgrade: %v", err)
		}
		wait = func() error { return m.UpgradeToUniqueContext(ctx) }
		release = func() error {
			if err := m.UniqueToUpgrade(); err != nil {
				return err
			}
			return m.UnlockUpgrade()
		}
	default:
		return fail("no wait for case %q", name)
	}
	w, err := testproc.StartWaiting()
	if err != nil {
		return fail("%v", err)
	}
	if err := wait(); err != nil {
		return fail("wait: %v", err)
	}
	if err := w.Report(); err != nil {
		return fail("%v", err)
	}
	if err := release(); err != nil {
		return fail("release: %v", err)
	}
	if err := m.Close(); err != nil {
		return fail("close: %v", err)
	}
	return 0
}
