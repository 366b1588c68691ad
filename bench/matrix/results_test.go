package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMedianSpread(t *testing.T) {
	t.Parallel()
	require.True(t, math.IsNaN(median(nil)))
	require.Equal(t, 3.0, median([]float64{5, 1, 3}))
	require.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	xs := []float64{9, 10, 12}
	require.InDelta(t, 0.3, spread(xs), 1e-12)
	require.Equal(t, []float64{9, 10, 12}, xs, "not reordered")
}

// Ratios pair each round with the reference's same round and skip rounds
// that either lacks.
func TestPairedRatio(t *testing.T) {
	t.Parallel()
	ref := []Sample{{Round: 1, OpsPerSec: 100}, {Round: 2, OpsPerSec: 200}, {Round: 3, OpsPerSec: 100}}
	x := []Sample{{Round: 1, OpsPerSec: 150}, {Round: 2, OpsPerSec: 200}, {Round: 4, OpsPerSec: 1000}}
	require.Equal(t, 1.25, pairedRatio(x, ref)) // rounds 1 and 2: 1.5 and 1.0
	require.Equal(t, 0.0, pairedRatio([]Sample{{Round: 5, OpsPerSec: 1}}, ref))
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	c := Cell{Workload: "counter", Procs: 2, Entries: []Entry{
		{Name: "x", Samples: []Sample{{Round: 1, OpsPerSec: 30}, {Round: 2, OpsPerSec: 10}, {Round: 3, OpsPerSec: 20}}},
		{Name: "pthread_mutex_robust", Failed: []Failure{{0, "calibration failed"}}},
		{Name: "pthread_rwlock", Samples: []Sample{{Round: 1, OpsPerSec: 10}, {Round: 2, OpsPerSec: 10}, {Round: 3, OpsPerSec: 10}}},
	}}
	c.summarize([]string{"pthread_mutex_robust", "pthread_rwlock"})
	require.Equal(t, "pthread_rwlock", c.Reference, "the first reference with samples")
	x := c.Entries[0]
	require.Equal(t, 20.0, x.Median)
	require.Equal(t, 1.0, x.Spread)
	require.Equal(t, 5e7, x.NsPerOp)
	require.Equal(t, 2.0, x.Ratio)
	require.Equal(t, 1.0, c.Entries[2].Ratio)
	require.Zero(t, c.Entries[1].Median)
}

func TestRoundSig2(t *testing.T) {
	t.Parallel()
	for x, want := range map[float64]uint64{0.2: 1, 7.4: 7, 123_456: 120_000, 9_960: 10_000, 55: 55} {
		require.Equal(t, want, roundSig2(x), "%v", x)
	}
}

func TestSI(t *testing.T) {
	t.Parallel()
	for x, want := range map[float64]string{1: "1.00", 999: "999", 1000: "1.00k", 27_560_000: "27.6M", 2.1e9: "2.10G", 999_999: "1.00M"} {
		require.Equal(t, want, si(x), "%v", x)
	}
	require.Equal(t, "9.70 ns", duration(9.7))
	require.Equal(t, "1.40 µs", duration(1400))
}

func TestParseCells(t *testing.T) {
	t.Parallel()
	cells, err := parseCells(defaultCells)
	require.NoError(t, err)
	require.Len(t, cells, 10)
	require.Equal(t, cell{"uncontended_shared", 1}, cells[1])
	require.Equal(t, cell{"rw90", 8}, cells[9])
	for _, bad := range []string{"counter", "counter:0", "counter:65", "sleep:2", "uncontended:2", "uncontended_shared:2", "pingpong:4", "pingpong_retry:1", "counter:2,"} {
		_, err := parseCells(bad)
		require.Error(t, err, bad)
	}
	_, err = lookupContenders("pthread_mutex,nolock")
	require.ErrorContains(t, err, `unknown contender "nolock"`)
	cs, err := lookupContenders("flock,shmlock_spin")
	require.NoError(t, err)
	require.Equal(t, []string{"flock", "shmlock_spin"}, contenderNames(cs))
}

// The markdown has one row per contender and one column per cell, the
// reference's ratio 1.00x, a dash where a lock has no such workload, and
// says which runs failed.
func TestMarkdown(t *testing.T) {
	t.Parallel()
	res := &Results{
		Date: "2026-01-02T03:04:05Z", Command: "go run ./bench/matrix", Commit: "abc",
		Machine:   Machine{CPU: "Some CPU", CPUs: 2, Virtual: true, Kernel: "Linux 6.1"},
		Versions:  Versions{Go: "go1.26", CC: "cc 12", Glibc: "2.36", Boost: "1.74"},
		Settings:  Settings{Rounds: 2, TargetSeconds: 0.5, Contenders: []string{"a", "pthread_mutex_robust", "pthread_rwlock"}},
		Placement: []Probe{{Before: "round 1", Ns: 451.2}, {Before: "round 2", Error: "no CPU 1"}, {Before: "end", Ns: 120}},
		Cells: []Cell{
			{Workload: "uncontended", Procs: 1, Unit: "lock+unlock pairs/s", Entries: []Entry{
				{Name: "a", Samples: []Sample{{Round: 1, OpsPerSec: 1e8}, {Round: 2, OpsPerSec: 1e8}}},
				{Name: "pthread_mutex_robust", Samples: []Sample{{Round: 1, OpsPerSec: 5e7}, {Round: 2, OpsPerSec: 5e7}}},
			}},
			{Workload: "rw90", Procs: 2, Unit: "ops/s", Entries: []Entry{
				{Name: "a", Samples: []Sample{{Round: 2, OpsPerSec: 3e6}}, Failed: []Failure{{1, "boom"}}},
				{Name: "pthread_rwlock", Samples: []Sample{{Round: 1, OpsPerSec: 2e6}, {Round: 2, OpsPerSec: 2e6}}},
			}, Unsupported: []string{"pthread_mutex_robust"}},
		},
	}
	for i := range res.Cells {
		res.Cells[i].summarize([]string{"pthread_mutex_robust", "pthread_rwlock"})
	}
	var buf bytes.Buffer
	require.NoError(t, res.writeMarkdown(&buf))
	md := buf.String()
	for _, want := range []string{
		"Measured 2026-01-02 03:04 UTC by `go run ./bench/matrix` (commit abc).",
		"2 CPUs (virtual machine)",
		"451, failed, 120 ns",
		"pthread_mutex_robust for uncontended:1; pthread_rwlock for rw90:2",
		"| lock | uncontended P=1 (time per lock+unlock) | rw90 P=2 (ops/s) |",
		"| a | 10.0 ns (2.00x) | 3.00M (1.50x), 1 of 2 failed |",
		"| pthread_mutex_robust | 20.0 ns (1.00x) | — |",
		"| pthread_rwlock | — | 2.00M (1.00x) |",
		"| a | 0% (n=2) | 0% (n=1) |",
	} {
		require.Contains(t, md, want)
	}
	require.Equal(t, 2, strings.Count(md, "|---|---:|---:|"), "two tables: no driver said its CPU time")
	require.NotContains(t, md, "CPUs busy")

	// Where a driver says, a third table: busy CPUs, median over the
	// rounds that say.
	res.Cells[1].Entries[1].Samples[0].CPUs = 1.1
	res.Cells[1].Entries[1].Samples[1].CPUs = 1.3
	res.Cells[1].Entries[0].Samples[0].CPUs = 1.95
	for i := range res.Cells {
		res.Cells[i].summarize([]string{"pthread_mutex_robust", "pthread_rwlock"})
	}
	buf.Reset()
	require.NoError(t, res.writeMarkdown(&buf))
	md = buf.String()
	require.Equal(t, 3, strings.Count(md, "|---|---:|---:|"), "three tables")
	require.Contains(t, md, "CPUs busy: the workers' CPU time over the run's time, median over the rounds (at most 2 here)")
	require.Contains(t, md, "| a | — | 1.95 |")
	require.Contains(t, md, "| pthread_rwlock | — | 1.20 |")
}

// A run's busy CPUs are its workers' CPU time over its time; a driver
// that does not say has none.
func TestBusyCPUs(t *testing.T) {
	t.Parallel()
	require.Equal(t, 1.5, driverLine{Seconds: 2, CPUSeconds: 3}.BusyCPUs())
	require.Zero(t, driverLine{Seconds: 2}.BusyCPUs())
	require.Zero(t, driverLine{CPUSeconds: 1}.BusyCPUs())
	e := Entry{Samples: []Sample{{Round: 1, OpsPerSec: 1, CPUs: 2}, {Round: 2, OpsPerSec: 1}, {Round: 3, OpsPerSec: 1, CPUs: 1}}}
	c := Cell{Entries: []Entry{e}}
	c.summarize(nil)
	require.Equal(t, 1.5, c.Entries[0].CPUs, "the median of the rounds that say")
}

func TestWaitsOf(t *testing.T) {
	t.Parallel()
	for detail, want := range map[string]string{
		"shmlock spinlock, ...; counter=4 want=4; waits: contended=3 over_10us=0 over_1ms=0 sleeps=1 wakeups=1": "contended=3 over_10us=0 over_1ms=0 sleeps=1 wakeups=1",
		"glibc pthread_mutex_t, PROCESS_SHARED; counter=4 want=4":                                               "",
		"": "",
	} {
		require.Equal(t, want, waitsOf(detail), detail)
	}
}
