package lockmgr

import (
	"context"
	"time"

	"github.com/shmlock/shmlock/internal/mono"
)

// Clock is where a Manager reads the time (acquisition times, expiry) and
// how it waits between attempts. A Manager on SystemClock stores
// CLOCK_MONOTONIC readings in the segment, which every process of the boot
// shares and no wall-clock step moves; on any other Clock it stores
// Clock.Now's Unix nanoseconds, so a fake clock is for tests in one process.
type Clock interface {
	Now() time.Time
	// Sleep waits for d on this clock, or until ctx is done.
	Sleep(ctx context.Context, d time.Duration)
}

// SystemClock is the wall clock. A Manager on it waits between attempts on
// the resource's futex, so a release wakes it at once; on any other Clock
// it waits with Clock.Sleep, and only the schedule wakes it.
type SystemClock struct{}

func (SystemClock) Now() time.Time { return time.Now() }

func (SystemClock) Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// clock is a Manager's view of its Clock: times as stored in the segment.
type clock struct {
	c   Clock
	sys bool // c is SystemClock: segment times are CLOCK_MONOTONIC
}

func newClock(c Clock) clock {
	if c == nil {
		c = SystemClock{}
	}
	_, sys := c.(SystemClock)
	return clock{c: c, sys: sys}
}

// now is the current time in the segment's time base. On SystemClock this
// is mono.Now (the time-stamp counter, or one clock read), not time.Now's
// two clock reads: it is on the fast path of every acquisition and release.
func (c clock) now() int64 {
	if c.sys {
		return mono.Now()
	}
	return c.c.Now().UnixNano()
}

// time converts a segment time to a time.Time.
func (c clock) time(t int64) time.Time {
	if c.sys {
		return mono.Time(t)
	}
	return time.Unix(0, t)
}
