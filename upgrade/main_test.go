package upgrade_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

func TestMain(m *testing.M) { testproc.Main(m, helpers) }

// Bounds on the waits of these tests: generous, they only turn a hang into
// a failure on a slow shared machine.
const testTimeout = testproc.Timeout

var long = testproc.Long

// helpers run in child processes (testproc); each uses upgrade mutex 0 of
// the segment at args[0].
var helpers = map[string]func(args []string) int{
	"rw":             rwHelper,            // PATH ITERS SEED [WORKLOAD]: the mixed workload, prints "writes N torn T"
	"hold":           holdHelper,          // PATH MODE: take a hold in MODE, print "held", sleep until killed
	"claim-exit":     claimExitHelper,     // PATH NAME exit|wait: name a mutex, use it, exit (or wait to be killed) without Close
	"claim-hold":     claimHoldHelper,     // PATH NAME MODE: name a mutex, hold it in MODE, print "held INDEX", wait to be killed
	"tell":           tellHelper,          // PATH HOW MARK: take the unique lock, print "told reclaimed=B inconsistent=B", maybe mark, release
	"storm":          stormHelper,         // PATH ROLE: writer, upgrader or reader in a loop until killed, printing "ops N"
	"wait-cpu":       waitCPUHelper,       // PATH CASE: block as blockedWaits[CASE] says, print the CPU the wait took (sleep_test.go)
	"force-step":     forceStepHelper,     // PATH STOPS: ForceUnlock, saying how far it got and stopping where told (forcestep_test.go)
	"lock-once":      lockOnceHelper,      // PATH: Lock and Unlock, print "locked"
	"pending-cancel": pendingCancelHelper, // PATH: LockUpgrade, then UpgradeToUniqueContext until a line on stdin, print "result ERR"
}

// testOptions size a test segment: two upgrade mutexes with 8 reader
// records each, one lockmgr entry as scratch for the shared record.
var testOptions = shm.Options{Options: layout.Options{
	Slots: 1, Upgrades: 2, UpgradeReaders: 8, TxnRecords: -1, TxnArenaBytes: -1, LockMgrEntries: 1,
}}

func newSegment(tb testing.TB) (*shm.Segment, string) {
	tb.Helper()
	path := testproc.SegmentPath(tb)
	seg, err := shm.Create(path, testOptions)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = seg.Close() })
	return seg, path
}

// open returns a new handle on mutex 0, closed at the end of the test
// (errors ignored: a test may leave it holding).
func open(tb testing.TB, seg *shm.Segment) *upgrade.Mutex {
	tb.Helper()
	m, err := upgrade.Open(seg, 0)
	require.NoError(tb, err)
	return m
}

// waitFor polls cond until it holds, failing the test after testTimeout.
var waitFor = testproc.WaitFor

// status is the status of mutex 0.
func status(tb testing.TB, seg *shm.Segment) upgrade.Status {
	tb.Helper()
	st, err := upgrade.Inspect(seg, 0)
	require.NoError(tb, err)
	return st
}

// entry is mutex 0's entry in seg, for tests that read or set its words.
func entry(tb testing.TB, seg *shm.Segment) *layout.UpgradeEntry {
	tb.Helper()
	e, err := seg.Upgrade(0)
	require.NoError(tb, err)
	return e
}

// waitWriterAsleep waits until one writer sleeps in mutex 0's writers'
// queue, its hungry mark off (a sleeping writer asks for no handoff).
func waitWriterAsleep(tb testing.TB, seg *shm.Segment) {
	tb.Helper()
	e := entry(tb, seg)
	waitStatus(tb, seg, func(st upgrade.Status) bool {
		return st.WriterWaiters == 1 && e.Writer.Load()&upgrade.WriterHungry == 0
	}, "a writer to sleep in the queue, its mark off")
}

// waitStatus waits until the status of mutex 0 satisfies cond.
func waitStatus(tb testing.TB, seg *shm.Segment, cond func(upgrade.Status) bool, what string) {
	tb.Helper()
	waitFor(tb, func() bool { return cond(status(tb, seg)) }, "%s", what)
}
