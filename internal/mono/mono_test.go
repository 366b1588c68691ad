package mono_test

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/mono"
)

// Now agrees with clock_gettime(CLOCK_MONOTONIC) read around it, to within
// the measurement's own error (a system call either side).
func TestNowMatchesKernel(t *testing.T) {
	t.Parallel()
	var a, b unix.Timespec
	for range 5 {
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &a); err != nil {
			t.Fatal(err)
		}
		n := mono.Now()
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &b); err != nil {
			t.Fatal(err)
		}
		// The offset is measured once to within one system call's
		// duration; allow a generous margin for a descheduled process.
		const slack = int64(50 * time.Millisecond)
		if n < a.Nano()-slack || n > b.Nano()+slack {
			t.Fatalf("got %d, want within [%d, %d]", n, a.Nano(), b.Nano())
		}
	}
}

func TestTimeRoundTrip(t *testing.T) {
	t.Parallel()
	n := mono.Now()
	got := mono.Time(n + int64(time.Hour)).Sub(mono.Time(n))
	if got != time.Hour {
		t.Fatalf("got %v, want 1h", got)
	}
	if d := time.Since(mono.Time(n)); d < 0 || d > time.Minute {
		t.Fatalf("Time(Now()) is %v from now, want about 0", d)
	}
}
