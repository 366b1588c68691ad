package mono

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// calibrated waits, calling Now, until the fast clock is on; it skips the
// test where the kernel does not keep time by the counter.
func calibrated(tb testing.TB) anchor {
	tb.Helper()
	if due.Load() == neverDue {
		tb.Skip("the kernel does not keep time by the time-stamp counter here")
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		Now()
		if a := fast.load(); a.span != 0 {
			return a
		}
	}
	tb.Fatal("the fast clock did not come on within 10 s of calls")
	return anchor{}
}

// Every reading of the fast clock lies within MaxError of the vDSO clock
// read around it, across many anchors, and the fast path is taken.
func TestFastClockTracksVDSO(t *testing.T) {
	calibrated(t)
	fastReads := 0
	for end := vdsoNow() + int64(300*time.Millisecond); ; {
		before := vdsoNow()
		if a := fast.load(); rdtsc()-a.tsc < a.span {
			fastReads++
		}
		n := Now()
		after := vdsoNow()
		if n < before-MaxError || n > after+MaxError {
			t.Fatalf("Now() = %d, want within %d ns of [%d, %d]", n, MaxError, before, after)
		}
		if after > end {
			break
		}
		if fastReads%1000 == 999 {
			time.Sleep(100 * time.Microsecond) // let anchors go stale while nobody reads
		}
	}
	if fastReads == 0 {
		t.Fatal("no reading came from an anchor")
	}
}

// An anchor whose rate is off is caught by the next sample: the fast clock
// goes off, calibration starts over, and comes back on with a good rate.
func TestWrongAnchorDistrusted(t *testing.T) {
	a := calibrated(t)
	calib.Lock()
	bad := a
	bad.mult += bad.mult / 100       // 1% fast: 10 us off at the span's end
	bad.tsc -= bad.span - bad.span/8 // and nearly stale, so the next sample checks it
	fast.store(bad)
	for fast.load() == bad {
		calib.sample()
	}
	got := fast.load()
	calib.Unlock()
	if got.span != 0 {
		t.Fatalf("after a wrong anchor, the fast clock is on (%+v), want off until calibrated again", got)
	}
	if a := calibrated(t); a.mult == bad.mult {
		t.Fatalf("calibrated again with the wrong rate %d", a.mult)
	}
}

// Taking anchors allocates nothing: callers count their allocations.
func TestSampleAllocatesNothing(t *testing.T) {
	calibrated(t)
	calib.Lock()
	defer calib.Unlock()
	if n := testing.AllocsPerRun(100, func() { calib.sample() }); n != 0 {
		t.Fatalf("a sample allocates %v times, want 0", n)
	}
}

func TestRate(t *testing.T) {
	for _, tc := range []struct {
		ticks uint64
		ns    int64
		want  uint64
		ok    bool
	}{
		{3_000_000, 1_000_000, 1 << multShift / 3, true}, // 3 GHz
		{1_000_000, 1_000_000, 1 << multShift, true},     // 1 GHz
		{0, 1_000_000, 0, false},
		{1_000_000, 0, 0, false},
		{1_000_000, -5, 0, false},
		{1, math.MaxInt64, 0, false},         // ns per tick does not fit 32.32
		{math.MaxUint64, 1, 0, false},        // rounds to 0 ns per tick
		{1 << 50, 1, 0, false},               // rounds to 0 ns per tick
		{1_000, 1_000_000_000_000, 0, false}, // 1e9 ns per tick: an anchor would answer for 0 ticks
	} {
		mult, ok := rate(tc.ticks, tc.ns)
		if ok != tc.ok || ok && mult != tc.want {
			t.Errorf("rate(%d, %d) = %d, %v; want %d, %v", tc.ticks, tc.ns, mult, ok, tc.want, tc.ok)
		}
	}
}

func BenchmarkNow(b *testing.B) {
	b.Run("vdso", func(b *testing.B) {
		var sum int64
		for b.Loop() {
			sum += vdsoNow()
		}
		sink = sum
	})
	b.Run("fast", func(b *testing.B) {
		calibrated(b)
		var sum int64
		for b.Loop() {
			sum += Now()
		}
		sink = sum
	})
}

var sink int64

// With SHMLOCK_CLOCK=vdso the fast clock never comes on (checked in a
// process of its own: the switch is read at start).
func TestClockEnvKeepsFastClockOff(t *testing.T) {
	if os.Getenv(ClockEnv) == "vdso" {
		for range 20 { // twice calibrateOver: it would have come on
			Now()
			time.Sleep(time.Millisecond)
		}
		if a := fast.load(); a.span != 0 || due.Load() != neverDue {
			t.Fatalf("with %s=vdso: anchor %+v, next sample due %d; want none, never", ClockEnv, a, due.Load())
		}
		return
	}
	calibrated(t) // on here, so off below is the switch's doing
	cmd := exec.Command(os.Args[0], "-test.run=^TestClockEnvKeepsFastClockOff$", "-test.count=1")
	cmd.Env = append(os.Environ(), ClockEnv+"=vdso")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// A reader of a published anchor gets one that was stored whole, or none
// (span 0), never words of two: the sequence lock is what lets a new
// anchor be published every millisecond without allocating.
func TestPublishedNeverTorn(t *testing.T) {
	var p published
	consistent := func(i uint64) anchor { return anchor{tsc: i, mono: int64(3 * i), mult: 5 * i, span: 7*i + 1} }
	const stores = 200_000
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if a := p.load(); a.span != 0 && a != consistent(a.tsc) {
					t.Errorf("read a torn anchor %+v", a)
					return
				}
			}
		}()
	}
	for i := range uint64(stores) {
		p.store(consistent(i + 1))
	}
	close(done)
	wg.Wait()
	if a := p.load(); a != consistent(stores) {
		t.Fatalf("after the last store: got %+v, want %+v", a, consistent(stores))
	}
}

func TestCheckClockEnv(t *testing.T) {
	for _, c := range []struct {
		v  string
		ok bool
	}{
		{"", true}, {"tsc", true}, {"vdso", true},
		{"VDSO", false}, {"hpet", false}, {" vdso", false}, {"vdso\n", false},
	} {
		err := CheckClockEnv(c.v)
		if c.ok != (err == nil) || err != nil && !errors.Is(err, ErrClockEnv) {
			t.Errorf("CheckClockEnv(%q) = %v, want ok=%v", c.v, err, c.ok)
		}
	}
}
