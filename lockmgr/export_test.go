package lockmgr

// The Sleepers word of an entry (table.go).
const (
	SleepCount       = sleepCount
	SleepFutileShift = sleepFutileShift
	SleepFutile      = sleepFutile
	SleepFutileMax   = sleepFutileMax
	SleepWakePending = sleepWakePending
)
