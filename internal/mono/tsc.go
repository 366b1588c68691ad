package mono

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
)

// The fast clock. Now reads the time-stamp counter and extrapolates from
// the newest anchor, a pair of readings (counter, vdsoNow) taken together,
// by the counter's rate against vdsoNow measured over a baseline of earlier
// anchors. An anchor answers for anchorSpan after it; the first Now past
// that takes a new one, so whoever calls reads the vDSO clock once a
// millisecond.
//
// Invariants and error bound:
//   - The fast clock is on only where the kernel keeps time by the counter
//     (clocksource tsc) and the counter ticks at a constant rate through
//     sleep states (constant_tsc, nonstop_tsc): the kernel has then checked
//     that all CPUs' counters agree, so a goroutine may move between CPUs.
//   - The first rate is measured over at least calibrateOver, later ones
//     over at least recalibrateAt, from samples whose two counter reads lie
//     at most maxPairTicks apart (a sample taken across a preemption is
//     dropped); the baseline moves up after rebaseAfter, so the rate
//     follows NTP's slewing of the kernel's clock.
//   - Between anchors Now is off by at most the rate's error times
//     anchorSpan: a sample's pairing error of 1000 ticks at each end of
//     10 ms is 2e-4 at 1 GHz, and NTP slews by at most 5e-4, so under 1 us
//     (MaxError).
//   - Each new anchor checks the one before it: if its extrapolation misses
//     the vDSO reading by more than MaxError, or a new rate differs from
//     the last by more than 1/2^maxRateShift of it, the counter is not
//     keeping time with the kernel (a migrated or resumed guest, a changed
//     clocksource): Now goes back to the vDSO clock, the clocksource is
//     read again, and calibration starts over.
const (
	MaxError            = 1000          // ns between Now and vdsoNow, at most
	anchorSpan          = 1_000_000     // ns an anchor answers for
	calibrateOver       = 10_000_000    // ns of baseline for the first rate
	recalibrateAt       = 100_000_000   // ns of baseline for each later one
	rebaseAfter         = 1_000_000_000 // ns of baseline after which it moves up
	maxPairTicks        = 2000          // counter ticks around one vDSO read, at most
	maxRateShift        = 12            // a new rate may differ from the last by 1/4096 of it
	multShift           = 32            // mult is nanoseconds per tick in 32.32 fixed point
	clocksource         = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
	cpuinfo             = "/proc/cpuinfo"
	neverDue      int64 = math.MaxInt64
)

// anchor is a counter reading and the clock at it, with the rate to
// extrapolate by.
type anchor struct {
	tsc  uint64 // the counter at mono
	mono int64  // vdsoNow at tsc
	mult uint64 // nanoseconds per tick, 32.32 fixed point
	span uint64 // ticks after tsc that this anchor answers for; 0: none
}

// at is the clock at counter reading t, extrapolated from a; t-a.tsc must
// be under a few spans, or the product overflows.
func (a anchor) at(t uint64) int64 { return a.mono + int64((t-a.tsc)*a.mult>>multShift) }

// published is the anchor Now extrapolates from, behind a sequence lock
// (seq is odd while sample rewrites the words): a new anchor every
// millisecond must not allocate, and callers count their allocations.
type published struct {
	seq  atomic.Uint32
	tsc  atomic.Uint64
	mono atomic.Int64
	mult atomic.Uint64
	span atomic.Uint64
}

var (
	fast  published
	due   atomic.Int64 // vdsoNow from which slowNow takes a sample
	calib calibration
)

// load returns the published anchor; its span is 0 if there is none or it
// was being rewritten.
func (p *published) load() anchor {
	seq := p.seq.Load()
	a := anchor{tsc: p.tsc.Load(), mono: p.mono.Load(), mult: p.mult.Load(), span: p.span.Load()}
	if seq&1 != 0 || p.seq.Load() != seq {
		a.span = 0
	}
	return a
}

// store publishes a, under calib's lock.
func (p *published) store(a anchor) {
	p.seq.Add(1)
	p.tsc.Store(a.tsc)
	p.mono.Store(a.mono)
	p.mult.Store(a.mult)
	p.span.Store(a.span)
	p.seq.Add(1)
}

// ClockEnv names the environment variable that, set to "vdso", keeps the
// fast clock off: every Now reads the vDSO clock. Unset or "tsc", the
// checks below decide.
const ClockEnv = "SHMLOCK_CLOCK"

// The values of ClockEnv.
const (
	clockVDSO = "vdso" // the fast clock stays off
	clockTSC  = "tsc"  // the default, as if unset
)

// ErrClockEnv is CheckClockEnv's error: ClockEnv names no clock.
var ErrClockEnv = errors.New("mono: unknown clock")

// CheckClockEnv reports whether v, a value of ClockEnv, names a clock. The
// variable is read at package initialisation, where no caller can be told
// of a mistake: a value it does not know is ignored (the default clock is
// used), and a program with somewhere to say so (shmctl) asks here.
func CheckClockEnv(v string) error {
	switch v {
	case "", clockTSC, clockVDSO:
		return nil
	}
	return fmt.Errorf("%w: %s=%q (want vdso or tsc); the default clock is in use", ErrClockEnv, ClockEnv, v)
}

func init() {
	if !haveTSC || os.Getenv(ClockEnv) == clockVDSO || !tscInvariant() || !clocksourceIsTSC() {
		due.Store(neverDue)
	}
}

// calibration is the fast clock's state behind its lock; only one
// goroutine samples at a time, the others read the vDSO clock meanwhile.
type calibration struct {
	sync.Mutex
	baseTSC  uint64 // the rate's baseline: a sample, 0 if none
	baseMono int64
	mult     uint64 // the rate, 0 until measured
}

// slowNow reads the vDSO clock, and samples the counter against it when an
// anchor or a calibration step is due.
func slowNow() int64 {
	m := vdsoNow()
	if m >= due.Load() && calib.TryLock() {
		m = calib.sample()
		calib.Unlock()
	}
	return m
}

// sample reads the counter around the vDSO clock, checks the anchor in use
// against it, updates the rate and publishes a new anchor. It returns the
// clock's reading.
func (c *calibration) sample() int64 {
	t0 := rdtsc()
	m := vdsoNow()
	t1 := rdtsc()
	if t1-t0 > maxPairTicks { // preempted, or the counter went back: try at the next call
		return m
	}
	t := t0 + (t1-t0)/2
	if a := fast.load(); a.span != 0 && t-a.tsc < 4*a.span {
		if miss := a.at(t) - m; miss > MaxError || miss < -MaxError {
			c.distrust()
			return m
		}
	}
	switch {
	case c.baseTSC == 0:
		c.baseTSC, c.baseMono = t, m
	case t <= c.baseTSC || m <= c.baseMono:
		c.distrust()
		return m
	case c.mult == 0 && m-c.baseMono >= calibrateOver || m-c.baseMono >= recalibrateAt:
		mult, ok := rate(t-c.baseTSC, m-c.baseMono)
		if change := c.mult >> maxRateShift; !ok || c.mult != 0 && (mult > c.mult+change || mult+change < c.mult) {
			c.distrust()
			return m
		}
		c.mult = mult
		if m-c.baseMono >= rebaseAfter {
			c.baseTSC, c.baseMono = t, m
		}
	}
	if c.mult == 0 {
		due.Store(c.baseMono + calibrateOver)
		return m
	}
	fast.store(anchor{tsc: t, mono: m, mult: c.mult, span: anchorSpan << multShift / c.mult})
	due.Store(m + anchorSpan)
	return m
}

// distrust turns the fast clock off and starts calibration over, if the
// kernel still keeps time by the counter (the CPU's flags, checked at
// start, do not change).
func (c *calibration) distrust() {
	fast.store(anchor{})
	c.baseTSC, c.baseMono, c.mult = 0, 0, 0
	if clocksourceIsTSC() {
		due.Store(0)
	} else {
		due.Store(neverDue)
	}
}

// rate is ns/ticks in 32.32 fixed point; not ok if it does not fit or
// would make an anchor's span (anchorSpan in ticks) overflow or vanish.
func rate(ticks uint64, ns int64) (mult uint64, ok bool) {
	if ticks == 0 || ns <= 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(ns), 1<<multShift)
	if hi >= ticks {
		return 0, false
	}
	mult, _ = bits.Div64(hi, lo, ticks)
	return mult, mult != 0 && anchorSpan<<multShift/mult != 0
}

// clocksourceIsTSC reports whether the kernel keeps time by the
// time-stamp counter now.
func clocksourceIsTSC() bool {
	src, err := os.ReadFile(clocksource)
	return err == nil && string(bytes.TrimSpace(src)) == "tsc"
}

// tscInvariant reports whether the CPU says its time-stamp counter ticks
// at one constant rate, also through sleep states.
func tscInvariant() bool {
	info, err := os.ReadFile(cpuinfo)
	if err != nil {
		return false
	}
	for line := range bytes.Lines(info) {
		if name, flags, ok := bytes.Cut(line, []byte(":")); ok && string(bytes.TrimSpace(name)) == "flags" {
			var constant, nonstop bool
			for _, f := range bytes.Fields(flags) {
				constant = constant || string(f) == "constant_tsc"
				nonstop = nonstop || string(f) == "nonstop_tsc"
			}
			return constant && nonstop
		}
	}
	return false
}
