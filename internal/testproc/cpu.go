package testproc

import (
	"fmt"
	"testing"
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

// Waiting measures, in a helper, the CPU time and the wall time of a wait;
// Report prints them on the line that WaitedShare reads in the test.
type Waiting struct {
	cpu   time.Duration
	start time.Time
}

// StartWaiting starts measuring a wait of this process.
func StartWaiting() (Waiting, error) {
	cpu, err := CPUTime(unix.RUSAGE_SELF)
	return Waiting{cpu: cpu, start: time.Now()}, err
}

// Report prints the wait's CPU and wall time so far as a "waited" line.
func (w Waiting) Report() error {
	wall := time.Since(w.start)
	cpu, err := CPUTime(unix.RUSAGE_SELF)
	if err != nil {
		return err
	}
	fmt.Printf("waited cpu=%d wall=%d\n", cpu-w.cpu, wall)
	return nil
}

// How a sleep test keeps its helper waiting, and the share of a core (in
// percent) the helper may use meanwhile. This is not a speed test: a
// waiter that sleeps uses next to nothing however slow the machine, one
// that spins uses all the CPU it is given (about 100).
const (
	BlockedFor    = time.Second
	MaxWaitingCPU = 25
)

// RequireSlept keeps helper c, which is blocked on something the test
// holds and measures its wait (StartWaiting, Report), blocked for
// BlockedFor; then it calls release, waits for c to succeed, and fails the
// test if c used MaxWaitingCPU percent of a core or more while it waited:
// it spun instead of sleeping. what names the wait in messages.
func RequireSlept(tb testing.TB, c *Child, what string, release func() error) {
	tb.Helper()
	time.Sleep(BlockedFor)
	if err := release(); err != nil {
		tb.Fatalf("release after %s: %v", what, err)
	}
	c.WaitOK(tb)
	if pct := WaitedShare(tb, c, what, BlockedFor); pct >= MaxWaitingCPU {
		tb.Fatalf("%s used %.1f%% of a core, want < %d%%: it spins instead of sleeping", what, pct, MaxWaitingCPU)
	}
}

// WaitedShare reads the "waited" line of helper c (Waiting.Report) and
// returns the share of a core, in percent, that c used while it waited,
// logging it as what. It fails the test if c waited less than atLeast (the
// wait it was given did not happen).
func WaitedShare(tb testing.TB, c *Child, what string, atLeast time.Duration) float64 {
	tb.Helper()
	var cpu, wall time.Duration
	if _, err := fmt.Sscanf(c.WaitLine(tb, "waited "), "cpu=%d wall=%d", &cpu, &wall); err != nil {
		tb.Fatalf("helper %s: bad waited line: %v", c.Name, err)
	}
	if wall < atLeast {
		tb.Fatalf("helper %s: waited %v, want at least %v", c.Name, wall, atLeast)
	}
	pct := 100 * float64(cpu) / float64(wall)
	tb.Logf("%s used %v of CPU in %v: %.2f%% of a core", what, cpu, wall, pct)
	return pct
}
