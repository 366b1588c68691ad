// Package mono reads CLOCK_MONOTONIC, the clock every process of one boot
// shares. The Go runtime's monotonic clock is that same clock, but time.Now
// reads the wall clock too (twice the cost on a KVM guest) and exposes the
// monotonic reading only relative to this process's start. vdsoNow adds,
// to time.Since of a fixed instant, the offset between the two, measured
// once with clock_gettime(2); Now extrapolates vdsoNow by the CPU's
// time-stamp counter where the kernel keeps time by it (tsc.go), at less
// than half the cost of a vDSO read.
package mono

import (
	"time"

	"golang.org/x/sys/unix"
)

var (
	base   = time.Now()
	offset = measure()
)

// measure returns CLOCK_MONOTONIC at base, to within one system call.
func measure() int64 {
	var ts unix.Timespec
	before := time.Since(base)
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("mono: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	after := time.Since(base)
	return ts.Nano() - int64(before+(after-before)/2)
}

// Now is CLOCK_MONOTONIC in nanoseconds, to within MaxError of vdsoNow
// (and so of the kernel's clock). Readings of one process may step back by
// as much where a new anchor is taken.
func Now() int64 {
	if a := fast.load(); a.span != 0 {
		if t := rdtsc(); t-a.tsc < a.span { // also false if the counter read before a.tsc
			return a.at(t)
		}
	}
	return slowNow()
}

// vdsoNow is CLOCK_MONOTONIC in nanoseconds, read through the runtime's
// clock (one vDSO call).
func vdsoNow() int64 { return offset + int64(time.Since(base)) }

// Time converts a CLOCK_MONOTONIC reading, of this process or another one
// of the same boot, to a time.Time (wall clock as this process saw it at
// start, plus the monotonic difference). It reads no clock.
func Time(t int64) time.Time { return base.Add(time.Duration(t - offset)) }
