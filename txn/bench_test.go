package txn_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

// paddedWord keeps the peer's counter alone on its cache line.
type paddedWord struct {
	_ [64]byte
	w atomic.Int64
	_ [56]byte
}

// benchTxn makes a segment with one open transaction and one object.
func benchTxn(b *testing.B) (*shm.Segment, string, *txn.Space, *txn.Txn, txn.Ref) {
	b.Helper()
	seg, path := newSegment(b, layout.Options{})
	sp := newSpace(b, seg)
	tx, err := sp.Begin(txn.BeginOptions{})
	require.NoError(b, err)
	r, err := tx.Alloc([]byte("bench"))
	require.NoError(b, err)
	b.Cleanup(func() { _ = tx.RequestCloseAndWait(context.Background()) })
	return seg, path, sp, tx, r
}

// inGoroutines runs op b.N times split over n goroutines.
func inGoroutines(b *testing.B, n int, op func()) {
	inGoroutinesEach(b, n, func(int) func() { return op })
}

// inGoroutinesEach runs b.N operations split over n goroutines, goroutine
// g calling opFor(g) (called before the goroutines start).
func inGoroutinesEach(b *testing.B, n int, opFor func(g int) func()) {
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range n {
		iters, op := share(b.N, n, g), opFor(g)
		wg.Go(func() {
			for range iters {
				op()
			}
		})
	}
	wg.Wait()
}

// share is worker g's part of total operations split over n workers.
func share(total, n, g int) int {
	if g < total%n {
		return total/n + 1
	}
	return total / n
}

// pinRelease is the operation the txn peers time. It reports an error
// once: the goroutines that call it are not the benchmark's own.
func pinRelease(b *testing.B, sp *txn.Space, r txn.Ref) {
	p, err := sp.TryPin(r)
	if err != nil {
		if !b.Failed() {
			b.Error(err)
		}
		return
	}
	p.Release()
}

// BenchmarkPin compares TryPin+Release with its peers, in one run:
// sync.RWMutex RLock+RUnlock (what a reader would do in one process) and a
// bare atomic add and sub of one word (the least any pin can cost). Each
// runs uncontended and from 2, 4 and 8 goroutines. The uncontended case
// also reports pin/atomic: the ratio of the two, the number the issue asks
// to keep within 2.
func BenchmarkPin(b *testing.B) {
	for _, n := range []int{1, 2, 4, 8} {
		var atomicNs float64
		b.Run(fmt.Sprintf("goroutines=%d/atomic", n), func(b *testing.B) {
			var w paddedWord
			start := time.Now()
			inGoroutines(b, n, func() { w.w.Add(1); w.w.Add(-1) })
			atomicNs = float64(time.Since(start).Nanoseconds()) / float64(b.N)
		})
		b.Run(fmt.Sprintf("goroutines=%d/rwmutex", n), func(b *testing.B) {
			var mu sync.RWMutex
			inGoroutines(b, n, func() { mu.RLock(); mu.RUnlock() })
		})
		b.Run(fmt.Sprintf("goroutines=%d/txn", n), func(b *testing.B) {
			_, _, sp, _, r := benchTxn(b)
			b.ReportAllocs()
			start := time.Now()
			inGoroutines(b, n, func() { pinRelease(b, sp, r) })
			ns := float64(time.Since(start).Nanoseconds()) / float64(b.N)
			if atomicNs > 0 {
				b.ReportMetric(ns/atomicNs, "pin/atomic") // time of a pin+release over an atomic add+sub, same goroutine count
			}
		})
		if n == 1 {
			continue
		}
		// Goroutines that share a Space count their pins in one row, and
		// so contend for its cache line like the atomic peer; with a
		// Space each, as processes have, they do not.
		b.Run(fmt.Sprintf("goroutines=%d/txn-space-each", n), func(b *testing.B) {
			seg, _, _, _, r := benchTxn(b)
			spaces := make([]*txn.Space, n)
			for g := range spaces {
				spaces[g] = newSpace(b, seg)
			}
			start := time.Now()
			inGoroutinesEach(b, n, func(g int) func() {
				sp := spaces[g]
				return func() { pinRelease(b, sp, r) }
			})
			ns := float64(time.Since(start).Nanoseconds()) / float64(b.N)
			if atomicNs > 0 {
				b.ReportMetric(ns/atomicNs, "pin/atomic") // as above
			}
		})
	}
}

// BenchmarkPinProcesses runs TryPin+Release from 2, 4 and 8 processes on
// one transaction, beside a bare atomic add and sub of one shared word
// (an owner slot's Token word) from as many processes. ns/op is wall time
// per operation of all processes together, their exits included;

// BenchmarkBorrow is Borrow+Release of one object, uncontended: a pin and
// its release plus the Ref's validation. Borrow returns the SRef by value,
// so it allocates nothing.
func BenchmarkBorrow(b *testing.B) {
	_, _, sp, _, r := benchTxn(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sr, err := sp.Borrow(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		sr.Release()
	}
}

// loop-ns/op leaves the exits out, and pin/atomic is the ratio of those.
func BenchmarkPinProcesses(b *testing.B) {
	for _, n := range []int{2, 4, 8} {
		var atomicNs float64
		for _, kind := range []string{"atomic", "txn"} {
			b.Run(fmt.Sprintf("processes=%d/%s", n, kind), func(b *testing.B) {
				_, path, _, _, r := benchTxn(b)
				arg := r.String()
				if kind == "atomic" {
					arg = "atomic"
				}
				var kids []*testproc.Child
				for g := range n {
					kids = append(kids, testproc.StartWithStdin(b, "bench-pin", path, arg, strconv.Itoa(share(b.N, n, g))))
				}
				for _, c := range kids {
					c.WaitLine(b, "ready")
				}
				b.ResetTimer()
				for _, c := range kids {
					c.Send(b, "go")
				}
				var slowest int64
				for _, c := range kids {
					c.WaitOK(b)
					ns, err := strconv.ParseInt(c.WaitLine(b, "ns "), 10, 64)
					require.NoError(b, err)
					slowest = max(slowest, ns)
				}
				// The loops alone, without the processes' exits: the
				// slowest process's loop time over all operations.
				loop := float64(slowest) / float64(b.N)
				b.ReportMetric(loop, "loop-ns/op") // wall time of the slowest process's loop per operation of all
				if kind == "atomic" {
					atomicNs = loop
				} else if atomicNs > 0 {
					b.ReportMetric(loop/atomicNs, "pin/atomic") // loop-ns/op of TryPin+Release over that of an atomic add+sub, same process count
				}
			})
		}
	}
}

// BenchmarkCloseLatency measures how long a close takes to return once the
// last pin is released (the closer asleep on its futex), beside the same
// hand-off through sync.RWMutex (a writer blocked in Lock while a reader
// holds RLock).
func BenchmarkCloseLatency(b *testing.B) {
	b.Run("txn", func(b *testing.B) {
		seg, _ := newSegment(b, layout.Options{})
		sp := newSpace(b, seg)
		var total time.Duration
		for b.Loop() {
			tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
			require.NoError(b, err)
			r, err := tx.Alloc([]byte("x"))
			require.NoError(b, err)
			p, err := sp.TryPin(r)
			require.NoError(b, err)
			done := make(chan time.Time, 1)
			go func() {
				if err := tx.RequestCloseAndWait(context.Background()); err != nil {
					b.Error(err)
				}
				done <- time.Now()
			}()
			for sp.ClosersAsleep(tx.Index()) == 0 {
				time.Sleep(10 * time.Microsecond)
			}
			start := time.Now()
			p.Release()
			total += (<-done).Sub(start)
		}
		b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/release-to-closed") // last release until the close returned
	})
	b.Run("rwmutex", func(b *testing.B) {
		var total time.Duration
		for b.Loop() {
			var mu sync.RWMutex
			var waiting atomic.Bool
			mu.RLock()
			done := make(chan time.Time, 1)
			go func() {
				waiting.Store(true)
				mu.Lock()
				done <- time.Now()
				mu.Unlock()
			}()
			for !waiting.Load() {
				time.Sleep(10 * time.Microsecond)
			}
			time.Sleep(50 * time.Microsecond) // let it block in Lock
			start := time.Now()
			mu.RUnlock()
			total += (<-done).Sub(start)
		}
		b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/release-to-closed") // RUnlock until Lock returned
	})
}
