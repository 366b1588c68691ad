package etcdlock

import (
	"testing"
	"time"
)

// TestLostDeadlineMonotonic: a hold's Lost deadline keeps its monotonic
// reading. It was kept as wall-clock nanoseconds, so a step of the wall
// clock back (NTP, an operator) delayed Lost by as much, past etcd's
// expiry, which etcd counts on a monotonic clock. A step of the clock
// cannot be provoked here: the test checks what is kept.
func TestLostDeadlineMonotonic(t *testing.T) {
	t.Parallel()
	dl := expiresBy(time.Now(), time.Second)
	l := newLostSignal(dl)
	got := l.deadline.Load()
	// Round(0) strips the monotonic reading: == compares it too.
	if got == nil || *got != dl || *got == got.Round(0) {
		t.Fatalf("deadline %v kept as %v: the monotonic reading is lost", dl, got)
	}
	l.setDeadline(time.Time{})
	if l.deadline.Load() != nil {
		t.Fatal("a zero deadline is no deadline")
	}
}
