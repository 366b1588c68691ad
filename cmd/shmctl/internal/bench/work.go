package bench

import (
	"sync"
	"sync/atomic"

	"github.com/shmlock/shmlock/internal/futex"
	"github.com/shmlock/shmlock/internal/peerwork"
	"github.com/shmlock/shmlock/internal/proc"
)

// RWLocker adds shared locking; a lock needs it for the shared workloads
// (rw90, uncontended_shared).
type RWLocker = peerwork.RWLocker

// yield is what the spin-waits call after SpinBeforeYield loads: a
// sched_yield, as in the harness; tests that run workers as goroutines
// replace it with runtime.Gosched.
var yield = futex.Yield

// work runs worker me's loop of cfg.Workload and fills its stat slot. The
// loops are bench/c/harness.h's h_run, statement for statement.
func work(s *shared, cfg Config, me int, l sync.Locker) {
	st := s.stats[me]
	cpu0, cpuErr := proc.CPUTime()
	n := cfg.Iters
	ctr := s.counter
	turn := s.turn
	var reads, writes, torn, errors, retries uint64
	switch cfg.Workload {
	case "uncontended":
		for i := uint64(0); i < n; i++ {
			l.Lock()
			l.Unlock()
		}
	case "counter":
		for i := uint64(0); i < n; i++ {
			l.Lock()
			*ctr++ // plain, non-atomic read-modify-write
			l.Unlock()
		}
	case "pingpong":
		// Wait (outside the lock) until turn == me, then lock, verify,
		// pass the turn, unlock.
		for i := uint64(0); i < n; i++ {
			for spins := 0; atomic.LoadUint64(turn) != uint64(me); {
				if spins++; spins > SpinBeforeYield {
					yield()
				}
			}
			l.Lock()
			if *turn != uint64(me) {
				errors++
			}
			*ctr++
			*turn = uint64(1 - me)
			l.Unlock()
		}
	case "pingpong_retry":
		// Wait for the turn inside the lock: lock; not mine -> unlock, retry.
		for i := uint64(0); i < n; i++ {
			for {
				l.Lock()
				if *turn == uint64(me) {
					break
				}
				l.Unlock()
				retries++
			}
			*ctr++
			*turn = uint64(1 - me)
			l.Unlock()
		}
	case "rw90":
		reads, writes, torn = peerwork.RW90(l.(RWLocker), s.record, n, uint64(me)+1)
	case "uncontended_shared":
		rl := l.(RWLocker)
		for i := uint64(0); i < n; i++ {
			rl.RLock()
			rl.RUnlock()
		}
	}
	st.EndNs = nowNs()
	if cpu1, err := proc.CPUTime(); err == nil && cpuErr == nil {
		st.CPUNs = uint64(cpu1 - cpu0)
	}
	st.Reads, st.Writes, st.Torn, st.Errors, st.Retries = reads, writes, torn, errors, retries
	atomic.StoreUint64(&st.Done, 1)
}

// attach is the worker side of the start barrier; false means abort.
func attach(s *shared) bool {
	s.ready.Add(1)
	for spins := 0; ; spins++ {
		switch s.goFlag.Load() {
		case goStart:
			return true
		case goAbort:
			return false
		}
		if spins > SpinBeforeYield {
			yield()
		}
	}
}
