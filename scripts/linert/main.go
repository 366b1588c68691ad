// Command linert measures the round trip of one cache line between CPU 0
// and CPU 1: two threads, each pinned to one CPU, hand a word back and
// forth. On a VM the host may move the two virtual CPUs between runs, and
// this number tells which placement a benchmark ran in (the spinlock's
// counter results at 2 processes depend on it; see spinlock/slow.go).
//
//	go run ./scripts/linert [-n rounds]
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

func pin(cpu int) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}

func main() {
	n := flag.Int("n", 2_000_000, "round trips")
	flag.Parse()
	if *n < 1 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: linert [-n rounds], rounds at least 1")
		os.Exit(2)
	}
	// The two goroutines spin at once, each on its CPU: with one P (a
	// GOMAXPROCS=1 inherited from the environment, as in a go test run
	// with it) they would take turns, and the hand-off would wait for
	// preemption, 10 ms a turn, or, here, never end.
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	var word atomic.Uint32
	errs := make(chan error, 1)
	go func() {
		if err := pin(1); err != nil {
			errs <- err
			return
		}
		errs <- nil
		for range *n {
			for word.Load() != 1 {
			}
			word.Store(0)
		}
	}()
	if err := pin(0); err != nil {
		fmt.Fprintln(os.Stderr, "linert:", err)
		os.Exit(1)
	}
	if err := <-errs; err != nil {
		fmt.Fprintln(os.Stderr, "linert:", err)
		os.Exit(1)
	}
	start := time.Now()
	for range *n {
		word.Store(1)
		for word.Load() != 0 {
		}
	}
	fmt.Printf("%.1f ns per cache-line round trip between CPU 0 and CPU 1\n", float64(time.Since(start).Nanoseconds())/float64(*n))
}
