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
