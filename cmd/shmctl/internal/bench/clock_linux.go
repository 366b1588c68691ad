package bench

import "golang.org/x/sys/unix"

// nowNs is CLOCK_MONOTONIC in nanoseconds, comparable across processes
// (time.Now's monotonic reading is relative to each process's start).
func nowNs() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}
