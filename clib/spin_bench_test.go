package clib_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/stretchr/testify/require"
)

// BenchmarkSpinCounterMixed: processes increment one plain counter under
// one named spinlock (pid/tid mode), all Go, all C, or half of each, in one
// run. The mixed cell reports its rate over the slower of the two
// languages alone (x-slower: at least 1 means mixing costs nothing).
// Process start-up is not timed: the clock starts when all are ready.
//
//	go test ./clib -run '^$' -bench SpinCounterMixed
func BenchmarkSpinCounterMixed(b *testing.B) {
	for _, procs := range []int{2, 4} {
		rates := map[string]float64{}
		for _, lang := range []string{"go", "c", "mixed"} {
			b.Run(fmt.Sprintf("%s/P=%d", lang, procs), func(b *testing.B) {
				rate := spinCounterRun(b, lang, procs)
				rates[lang] = rate
				b.ReportMetric(rate, "ops/s")
				if lang == "mixed" && rates["go"] > 0 && rates["c"] > 0 {
					b.ReportMetric(rate/min(rates["go"], rates["c"]), "x-slower")
				}
			})
		}
	}
}

// spinCounterRun times procs processes of lang counting b.N increments
// in all, and returns increments per second.
func spinCounterRun(b *testing.B, lang string, procs int) float64 {
	path := testproc.SegmentPath(b)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 8, DataBytes: 64 << 10}})
	require.NoError(b, err)
	defer func() { _ = seg.Close(); _ = shm.Remove(path) }()
	r, err := spinRegionOf(seg)
	require.NoError(b, err)

	per := max(b.N/procs, 1)
	var cs []*testproc.Child
	for i := range procs {
		args := []string{path, "clib.spin.bench", "pidtid", strconv.Itoa(per)}
		if lang == "c" || lang == "mixed" && i%2 == 1 {
			cs = append(cs, cChild(b, append([]string{"count"}, args...)...))
		} else {
			cs = append(cs, testproc.Start(b, "spin-count", args...))
		}
	}
	for _, c := range cs {
		c.WaitLine(b, "ready")
	}
	b.ResetTimer()
	start := time.Now()
	r.word(spinGo).Store(1)
	for _, c := range cs {
		c.WaitLine(b, "done")
	}
	elapsed := time.Since(start)
	b.StopTimer()
	for _, c := range cs {
		c.WaitOK(b)
	}
	require.Equal(b, uint64(per*procs), *r.plain(spinCounter), "counter: lost updates")
	return float64(per*procs) / elapsed.Seconds()
}
