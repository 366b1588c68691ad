package spinlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

func TestMain(m *testing.M) { testproc.Main(m, helpers) }

// Bounds on every wait of these tests. They are generous on purpose: the
// machine is shared and slow, and they only turn a hang into a failure.
const (
	testTimeout = testproc.Timeout   // a helper's whole life, a wait for a condition
	pollEvery   = testproc.PollEvery // polling step of waitFor and the helpers
)

// long reports whether the long torture runs were asked for.
var long = testproc.Long

// helpers are the bodies of the helper processes the tests start with
// startChild (testproc re-runs this test binary). Each prints what the parent
// needs on stdout, one fact per line, and reports trouble as a line and a
// non-zero status. Every one uses owner slot 0 of the segment at args[0].
var helpers = map[string]func(args []string) int{
	"counter":        counterHelper,       // PATH MODE ITERS
	"handoff":        handoffHelper,       // PATH TOKEN_IN
	"kill-worker":    killWorkerHelper,    // PATH RECORD SEED
	"hold":           holdHelper,          // PATH DEPTH
	"wait-lock":      waitLockHelper,      // PATH [MARK]
	"wait-cpu":       waitCPUHelper,       // PATH
	"named":          namedHelper,         // PATH NAME
	"named-once":     namedOnceHelper,     // PATH NAME
	"claim-exit":     claimExitHelper,     // PATH NAME exit|wait
	"claim-lock":     claimLockHelper,     // PATH NAME USE MODE hold|release
	"bench-pingpong": benchPingPongHelper, // PATH
	"race-two-locks": raceTwoLocksHelper,  // PATH
	"force-step":     forceStepHelper,     // PATH STOPS: ForceUnlock, saying how far it got and stopping where told (forcestep_test.go)
	"registry-stop":  registryStopHelper,  // PATH: take the claim directory's lock and stop (claimuse_test.go)
}

// newSegment creates a segment for one test (removed when it ends) with room
// for the scratch words of scratch.go.
func newSegment(tb testing.TB) (*shm.Segment, string) {
	tb.Helper()
	path := testproc.SegmentPath(tb)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 8, LockMgrEntries: scratchEntries}})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = seg.Close() })
	return seg, path
}

// openLock is what every helper does first: open the segment and the lock
// over its slot 0.
func openLock(path string, mode spinlock.Mode) (*shm.Segment, *spinlock.Lock, scratch, error) {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		return nil, nil, scratch{}, err
	}
	l, err := spinlock.Open(seg, 0, mode)
	if err != nil {
		_ = seg.Close()
		return nil, nil, scratch{}, err
	}
	sc, err := scratchOf(seg)
	if err != nil {
		_ = seg.Close()
		return nil, nil, scratch{}, err
	}
	return seg, l, sc, nil
}

// waitFor polls cond until it holds, failing the test after testTimeout.
var waitFor = testproc.WaitFor

// fail prints a helper's failure in the form the parent shows, and returns
// its exit status.
func fail(format string, args ...any) int {
	fmt.Printf("FAIL "+format+"\n", args...)
	return 1
}

// waitWord polls an atomic scratch word (in a helper) until it is at least
// want, for at most testTimeout.
func waitWord(w interface{ Load() uint64 }, want uint64) error {
	for deadline := time.Now().Add(testTimeout); w.Load() < want; time.Sleep(pollEvery) {
		if time.Now().After(deadline) {
			return errors.New("timed out waiting for the parent")
		}
	}
	return nil
}

func parseMode(s string) spinlock.Mode {
	if s == spinlock.Token.String() {
		return spinlock.Token
	}
	return spinlock.PIDTID
}

// slotState is a copy of every word of an owner slot, for before/after
// comparisons.
type slotState struct {
	PID, TID, Token uint64
	Recursion, Pad  uint32
}

// stateOf reads the slot's words; Pad without its epoch, which counts the
// drops of stale sleeper registrations: with more runnable threads than
// CPUs (CI runs packages side by side) a live sleeper preempted before its
// futex call can be dropped at any time, moving the epoch on (see
// internal/sleepers), so no test may expect a given epoch unless it made
// the drop itself.
func stateOf(s *layout.OwnerSlot) slotState {
	return slotState{s.PID.Load(), s.TID.Load(), s.Token.Load(), s.RecursionCount.Load(), s.Pad.Load() &^ layout.PadEpoch}
}
