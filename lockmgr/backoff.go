package lockmgr

import (
	"math"
	"math/rand/v2"
	"time"
)

// The default retry schedule: 100, 200, 400, 800, 1000, 1000, ... ms.
const (
	DefaultInitialDelay = 100 * time.Millisecond
	DefaultMaxDelay     = time.Second
	DefaultFactor       = 2.0
	DefaultJitter       = 0.2
)

// Backoff is the schedule of waits between attempts of an acquisition that
// met a conflict. A waiter is also woken by any end of a hold on the
// resource (a futex on the entry), so the schedule bounds how long it may
// sleep, not how long a free resource stays unnoticed. The zero value is
// the default schedule with DefaultJitter.
type Backoff struct {
	Initial time.Duration // first wait; 0 or less: DefaultInitialDelay
	Max     time.Duration // cap on every wait; 0 or less: DefaultMaxDelay
	Factor  float64       // growth per attempt, at least 1; 0: DefaultFactor
	// Jitter shortens each wait by a random fraction of up to Jitter, so
	// waiters that met the same conflict do not retry in step. 0 means
	// DefaultJitter; a negative value means none; at most 1.
	Jitter float64
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultInitialDelay
	}
	if b.Max <= 0 {
		b.Max = DefaultMaxDelay
	}
	if b.Factor == 0 {
		b.Factor = DefaultFactor
	}
	switch {
	case b.Jitter == 0:
		b.Jitter = DefaultJitter
	case b.Jitter < 0:
		b.Jitter = 0
	}
	return b
}

// valid reports whether b, with defaults, is a usable schedule.
func (b Backoff) valid() bool {
	b = b.withDefaults()
	return b.Factor >= 1 && b.Jitter <= 1 && b.Initial <= b.Max
}

// Delay is the wait after the n'th failed attempt (n from 0), before jitter.
func (b Backoff) Delay(n int) time.Duration {
	b = b.withDefaults()
	d := float64(b.Initial)
	// Multiplied out for the first steps (exact for the usual factors);
	// past them a power, since a factor of 1, or close to it, never
	// reaches Max, and n multiplications were n steps of CPU per wait
	// (Delay(math.MaxInt) did not return).
	for i := range n {
		if i == exactSteps {
			d *= math.Pow(b.Factor, float64(n-exactSteps))
			break
		}
		d *= b.Factor
		if d >= float64(b.Max) {
			return b.Max
		}
	}
	if d >= float64(b.Max) || math.IsNaN(d) {
		return b.Max
	}
	return time.Duration(d)
}

// exactSteps is how many of Delay's steps are multiplied out: 2^64 times
// the shortest delay (1 ns) is past every Max.
const exactSteps = 64

// jittered is Delay(n) shortened by the jitter.
func (b Backoff) jittered(n int) time.Duration {
	d := b.Delay(n)
	if j := b.withDefaults().Jitter; j > 0 {
		d -= time.Duration(j * rand.Float64() * float64(d))
	}
	return d
}
