package spin_test

import (
	"testing"
	"time"

	"github.com/shmlock/shmlock/internal/spin"
)

// KeepOff waits at least as long as asked (never less: it reads the clock);
// how much longer depends on the machine, so only the lower bound is tested.
func TestKeepOffWaitsAtLeastD(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, 250 * time.Nanosecond, time.Microsecond, 50 * time.Microsecond} {
		start := time.Now()
		spin.KeepOff(d)
		if got := time.Since(start); got < d {
			t.Errorf("KeepOff(%v) returned after %v", d, got)
		}
	}
}

// Pause returns for every count, none and negative ones included.
func TestPauseReturns(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, 0, 1, 8, 1000} {
		spin.Pause(n)
	}
}

func BenchmarkKeepOff250ns(b *testing.B) {
	for b.Loop() {
		spin.KeepOff(250 * time.Nanosecond)
	}
}
