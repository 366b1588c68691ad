package testproc

import (
	"time"

	"golang.org/x/sys/unix"
)

// CPUTime is the user+system CPU time of this process (unix.RUSAGE_SELF)
// or of the calling thread (unix.RUSAGE_THREAD). The tests that a waiter
// sleeps compare it with the time it waited: a sleeper uses next to
// nothing however slow the machine, a spinner all the CPU it is given.
func CPUTime(who int) (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(who, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
