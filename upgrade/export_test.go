package upgrade

import "github.com/shmlock/shmlock/internal/sleepers"

// HolderID is the handle's holder id, as recorded in WriterTID/UpgraderTID.
func (m *Mutex) HolderID() uint64 { return m.tid }

// SharedHolds is the handle's shared hold count.
func (m *Mutex) SharedHolds() uint32 { return m.sharedHolds() }

// SetSharedHolds sets the handle's count (claiming its record), for the
// overflow test.
func (m *Mutex) SetSharedHolds(n uint32) error {
	r, err := m.record()
	if err != nil {
		return err
	}
	r.Count.Store(n)
	return nil
}

const (
	StateWrite   = stateWrite
	StateUpgrade = stateUpgrade
	StatePending = statePending
)

const (
	WriterHungry      = writerHungry
	WriterUnique      = writerUnique
	StateInconsistent = stateInconsistent
	// StaleHandoff is a handoff stamped at the clock's zero: long stale.
	StaleHandoff = writerHungry
)

// FreshHandoff is the Writer word of a release handed to the hungry now.
func FreshHandoff() uint64 { return handoffWord() }

// The sleeper words, Waiters and WriterSleepers (state.go).
const (
	UniqueWriter      = uniqueWriter
	UniqueUpgrader    = uniqueUpgrader
	FutileShift       = sleepers.FutileShift
	EpochShift        = sleepers.EpochShift
	WaitersEpoch      = waitersEpoch
	WaitersEpochUnit  = waitersEpoch &^ (waitersEpoch << 1) // its lowest bit
	SleepersEpoch     = sleepers.EpochMask                  // of WriterSleepers
	FutileMax         = sleepers.FutileMax
	WriterWakePending = sleepers.WakePending
)

// HoldsUpgrade reports whether the handle holds the upgrade lock.
func (m *Mutex) HoldsUpgrade() bool { return m.holdsUpgrader() }

// SetForceHooks replaces ForceUnlock's test hooks (force.go): busy when a
// force finds another's lock held, loaded when it has read the writer's
// word and holder id, took when it has taken the word. For a helper
// process, or a test that runs alone (not parallel).
func SetForceHooks(busy, loaded, took func()) (restore func()) {
	old := [3]func(){testHookForceBusy, testHookForceLoaded, testHookForceTook}
	testHookForceBusy, testHookForceLoaded, testHookForceTook = busy, loaded, took
	return func() { testHookForceBusy, testHookForceLoaded, testHookForceTook = old[0], old[1], old[2] }
}
