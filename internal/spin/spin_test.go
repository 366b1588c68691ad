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
	for name, keepOff := range map[string]func(time.Duration) int64{"KeepOff": spin.KeepOff, "KeepOffLong": spin.KeepOffLong} {
		for _, d := range []time.Duration{0, 250 * time.Nanosecond, time.Microsecond, 50 * time.Microsecond} {
			start := time.Now()
			keepOff(d)
			if got := time.Since(start); got < d {
				t.Errorf("%s(%v) returned after %v", name, d, got)
			}
		}
	}
}

func BenchmarkKeepOff250ns(b *testing.B) {
	for b.Loop() {
		spin.KeepOff(250 * time.Nanosecond)
	}
}
