package lockmgr

import (
	"testing"
	"time"
)

func TestKeepOff(t *testing.T) {
	for _, c := range []struct {
		name    string
		samples []time.Duration // failed attempts, each repeated until the average settles
		want    time.Duration
	}{
		{"none yet: the floor", nil, minKeepOff},
		{"cheap attempts: the floor", []time.Duration{50 * time.Nanosecond}, minKeepOff},
		{"eight times the attempts", []time.Duration{500 * time.Nanosecond}, 4 * time.Microsecond},
		{"dear attempts: the cap", []time.Duration{3 * time.Microsecond}, maxKeepOff},
		{"a preempted attempt counts as maxKeepOff", []time.Duration{time.Second}, maxKeepOff},
		{"a negative reading counts as 0", []time.Duration{-time.Second}, minKeepOff},
		{"the average follows the attempts", []time.Duration{3 * time.Microsecond, 250 * time.Nanosecond}, 2 * time.Microsecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			var k keepOff
			for _, s := range c.samples {
				for range 200 {
					k.failed(int64(s))
				}
			}
			// The average approaches a sample from one side and stops
			// within keepOffWeight ns of it (integer division).
			if got := k.duration(); got < c.want-keepOffAttempts*keepOffWeight || got > c.want+keepOffAttempts*keepOffWeight {
				t.Errorf("duration() = %v, want %v", got, c.want)
			}
		})
	}
}

func TestKeepOffOneSampleMovesAnEighth(t *testing.T) {
	var k keepOff
	k.failed(8000)
	if got := k.cost.Load(); got != 1000 {
		t.Fatalf("cost after one 8 us sample = %d ns, want 1000", got)
	}
	k.failed(0)
	if got := k.cost.Load(); got != 875 {
		t.Fatalf("cost after a 0 sample = %d ns, want 875", got)
	}
}

// An eager acquisition's waiter keeps off for nothing; the others for the
// Manager's keep-off.
func TestKeepOffFor(t *testing.T) {
	var m Manager
	m.keep.failed(int64(maxKeepOff))
	if got := m.keepOffFor(&AcquireOptions{}); got != m.keep.duration() || got <= 0 {
		t.Errorf("keepOffFor(default) = %v, want the Manager's %v", got, m.keep.duration())
	}
	if got := m.keepOffFor(&AcquireOptions{Eager: true}); got != 0 {
		t.Errorf("keepOffFor(Eager) = %v, want 0", got)
	}
}
