package lockmgr

import "github.com/shmlock/shmlock/internal/sleepers"

// The Sleepers word of an entry (table.go).
const (
	SleepCount       = sleepers.CountMask
	SleepFutileShift = sleepers.FutileShift
	SleepEpochShift  = sleepers.EpochShift
	SleepEpoch       = sleepers.EpochMask
	SleepFutile      = sleepers.FutileMask
	SleepFutileMax   = sleepers.FutileMax
	SleepWakePending = sleepers.WakePending
)

// AttemptCost is the average cost of m's failed attempts, in ns, from which
// its waiters' keep-off is reckoned (keepoff.go).
func (m *Manager) AttemptCost() int64 { return m.keep.cost.Load() }

// HomeEntry is the index of the entry where resource's probe sequence
// starts.
func (m *Manager) HomeEntry(resource string) int {
	var k resKey
	if err := k.setResource(resource); err != nil {
		panic(err)
	}
	return m.t.probe(k.hash, 0)
}

// SetStepHook sets the function called at the named steps of the changes
// made under an entry lock (testHookStep); nil: none.
func SetStepHook(f func(step string)) { testHookStep = f }
