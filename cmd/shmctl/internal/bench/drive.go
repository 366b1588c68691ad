package bench

import (
	"fmt"
	"os/exec"
	"slices"
	"sync/atomic"
	"time"

	"github.com/shmlock/shmlock/internal/peerwork"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// Config is what the command line says.
type Config struct {
	Workload string
	Procs    int
	Iters    uint64 // per worker
	Path     string // the shared file; the lock's segment is Path+".shm"
	Lock     string // LockSpin or LockSpinToken
}

// Result is the one JSON line a driver prints.
type Result = peerwork.Line

// Exit statuses of the contract.
const (
	ExitOK          = peerwork.ExitOK
	ExitFailed      = peerwork.ExitFailed
	ExitBadArgs     = peerwork.ExitBadArgs
	ExitUnsupported = peerwork.ExitUnsupported
)

// Unsupported is the detail of a workload the lock does not support.
const Unsupported = "unsupported workload"

// exclusiveWorkloads run on any lock; sharedWorkloads need shared locking.
var (
	exclusiveWorkloads = []string{"uncontended", "counter", "pingpong", "pingpong_retry"}
	sharedWorkloads    = []string{"rw90", "uncontended_shared"}
)

// Workloads are the contract's workloads, in its order.
func Workloads() []string { return slices.Concat(exclusiveWorkloads, sharedWorkloads) }

// Shared reports whether workload w needs a lock with shared holds.
func Shared(w string) bool { return slices.Contains(sharedWorkloads, w) }

// onePerProcess reports whether workload w is one process's lock+unlock
// pairs (exclusive or shared), which run with procs=1 only.
func onePerProcess(w string) bool { return w == "uncontended" || w == "uncontended_shared" }

// pingpong reports whether workload w passes a turn between two processes.
func pingpong(w string) bool { return w == "pingpong" || w == "pingpong_retry" }

func (k lockKind) supports(w string) bool {
	return slices.Contains(exclusiveWorkloads, w) || Shared(w) && k.shared
}

// barrierPoll is how often the driver looks at the ready count.
const barrierPoll = 50 * time.Microsecond

// Drive runs the driver side of one benchmark, as bench/c/harness.h's main: it
// creates the shared file and the lock's segment, starts cfg.Procs workers
// with spawn (which returns a command, not yet started, that runs Work for
// worker me in a new process), opens the start barrier, waits for every
// worker, validates, and returns the result with its exit status. The
// caller has checked cfg's flags (procs in [1, MaxProcs], iters >= 1).
func Drive(cfg Config, spawn func(me int) (*exec.Cmd, error)) (Result, int) {
	res := Result{Workload: cfg.Workload, Procs: cfg.Procs, Iters: cfg.Iters}
	fail := func(code int, why string) (Result, int) {
		res.Detail = why
		return res, code
	}
	kind, ok := lockKinds[cfg.Lock]
	if !ok {
		return fail(ExitBadArgs, fmt.Sprintf("unknown lock %q", cfg.Lock))
	}
	res.Peer = kind.peer
	if !kind.supports(cfg.Workload) {
		return fail(ExitUnsupported, Unsupported)
	}
	pp := pingpong(cfg.Workload)
	if onePerProcess(cfg.Workload) && cfg.Procs != 1 {
		return fail(ExitBadArgs, "uncontended requires procs=1")
	}
	if pp && cfg.Procs != 2 {
		return fail(ExitBadArgs, "pingpong requires procs=2")
	}
	var files ownFiles
	defer files.removeOnSignal()() // after the removal below: a signal before it still removes them
	defer files.remove()
	var s *shared
	err := files.create(func() (path string, err error) {
		s, err = mapFile(cfg.Path, true)
		return cfg.Path, err
	})
	if err != nil {
		return fail(ExitFailed, "map: "+err.Error())
	}
	defer s.unmap()
	var seg *shm.Segment
	err = files.create(func() (path string, err error) {
		if seg, err = createLock(cfg.Path); err != nil {
			return "", err
		}
		return seg.Path(), nil
	})
	if err != nil {
		return fail(ExitFailed, "setup: "+err.Error())
	}
	defer seg.Close()

	// Start the workers.
	// exited gets each worker's index and exit error.
	type exit struct {
		worker int
		err    error
	}
	exited := make(chan exit, cfg.Procs)
	for i := 0; i < cfg.Procs; i++ {
		cmd, err := spawn(i)
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			s.goFlag.Store(goAbort)
			for ; i > 0; i-- { // the ones started see the abort and exit
				<-exited
			}
			return fail(ExitFailed, "start worker: "+err.Error())
		}
		go func() { exited <- exit{i, cmd.Wait()} }()
	}

	// Barrier: wait until every worker has attached, then start the clock.
	nexited := 0
	for s.ready.Load() < uint32(cfg.Procs) {
		select {
		case <-exited:
			s.goFlag.Store(goAbort)
			for nexited++; nexited < cfg.Procs; nexited++ {
				<-exited
			}
			return fail(ExitFailed, "worker exited before start")
		default:
			time.Sleep(barrierPoll)
		}
	}
	t0 := nowNs()
	s.goFlag.Store(goStart)
	exitFailed := make([]bool, cfg.Procs)
	for ; nexited < cfg.Procs; nexited++ {
		e := <-exited
		exitFailed[e.worker] = e.err != nil
	}
	res, code := s.validate(cfg, kind, t0, exitFailed)
	res.Detail += "; " + waitCounters(seg, kind.stats)
	return res, code
}

// waitCounters sums the contention counters (layout.LockStats) of the
// lock's entries of kind k after the run, for the detail: how its waiters
// waited, which throughput alone does not tell (a handoff cell's rate can
// halve because its waiters fell asleep: see spinlock/slow.go). contended
// counts the acquisitions that did not get the lock at once, over_10us and
// over_1ms those of them that waited longer (the wait histogram's buckets).
func waitCounters(seg *shm.Segment, k layout.Kind) string {
	var contended, sleeps, wakeups uint64
	var over10us, over1ms uint32
	for i := 0; ; i++ {
		st := seg.LockStats(k, i)
		if st == nil {
			break
		}
		contended += st.Contended.Load()
		sleeps += st.Sleeps.Load()
		wakeups += st.Wakeups.Load()
		for b := 1; b < len(st.WaitHist); b++ { // bucket b holds waits above StatsBuckets[b-1]
			n := st.WaitHist[b].Load()
			if layout.StatsBuckets[b-1] >= 10*time.Microsecond {
				over10us += n
			}
			if layout.StatsBuckets[b-1] >= time.Millisecond {
				over1ms += n
			}
		}
	}
	return fmt.Sprintf("waits: contended=%d over_10us=%d over_1ms=%d sleeps=%d wakeups=%d", contended, over10us, over1ms, sleeps, wakeups)
}

// validate sums the stat slots and checks the workload's invariant. A
// worker failed if it exited with an error or did not finish (one count
// for a worker that did both, as a killed one does).
func (s *shared) validate(cfg Config, kind lockKind, t0 uint64, exitFailed []bool) (Result, int) {
	failed := 0
	res := Result{Peer: kind.peer, Workload: cfg.Workload, Procs: cfg.Procs, Iters: cfg.Iters}
	pp := pingpong(cfg.Workload)
	tend := t0
	var reads, writes, torn, errors, retries, cpuNs uint64
	cpuKnown := true
	for i := 0; i < cfg.Procs; i++ {
		st := s.stats[i]
		if exitFailed[i] || atomic.LoadUint64(&st.Done) != 1 {
			failed++
		}
		tend = max(tend, st.EndNs)
		reads += st.Reads
		writes += st.Writes
		torn += st.Torn
		errors += st.Errors
		retries += st.Retries
		cpuNs += st.CPUNs
		cpuKnown = cpuKnown && st.CPUNs != 0
	}
	res.Seconds = float64(tend-t0) / 1e9
	if cpuKnown {
		res.CPUSeconds = float64(cpuNs) / 1e9
	}
	ok := failed == 0 && errors == 0
	ops := float64(cfg.Iters) * float64(cfg.Procs)
	ctr := *s.counter
	var detail string
	switch {
	case cfg.Workload == "uncontended":
		detail = "ns per lock+unlock pair"
	case cfg.Workload == "uncontended_shared":
		detail = "ns per shared lock+unlock pair"
	case cfg.Workload == "counter":
		want := cfg.Iters * uint64(cfg.Procs)
		ok = ok && ctr == want
		detail = fmt.Sprintf("counter=%d want=%d", ctr, want)
	case pp:
		ok = ok && ctr == 2*cfg.Iters
		ops = float64(cfg.Iters)
		detail = fmt.Sprintf("ops are round trips; turns=%d want=%d retries/turn=%.2f",
			ctr, 2*cfg.Iters, float64(retries)/float64(2*cfg.Iters))
	case cfg.Workload == "rw90":
		rec := s.record
		same := true
		for k := 1; k < 8; k++ {
			same = same && rec[k] == rec[0]
		}
		ok = ok && torn == 0 && same && rec[0] == writes
		detail = fmt.Sprintf("reads=%d writes=%d torn=%d record=%d", reads, writes, torn, rec[0])
	}
	if failed > 0 || errors > 0 {
		detail += fmt.Sprintf("; failed_workers=%d lock_errors=%d", failed, errors)
	}
	res.Detail = kind.detail() + "; " + detail
	if res.Seconds > 0 {
		res.OpsPerSec = ops / res.Seconds
		res.NsPerOp = res.Seconds * 1e9 / ops
	}
	res.OK = ok
	if !ok {
		return res, ExitFailed
	}
	return res, ExitOK
}

// Work runs worker me (in its own process): it maps the shared file, opens
// the lock, waits at the start barrier and runs the workload. An error
// means the worker failed, and the driver reports ok:false: the caller
// must then exit with a non-zero status.
func Work(cfg Config, me int) (err error) {
	kind, ok := lockKinds[cfg.Lock]
	if !ok {
		return fmt.Errorf("bench worker %d: unknown lock %q", me, cfg.Lock)
	}
	if me < 0 || me >= cfg.Procs || me >= MaxProcs {
		return fmt.Errorf("bench worker %d: index out of range [0, %d)", me, cfg.Procs)
	}
	s, err := mapFile(cfg.Path, false)
	if err != nil {
		return fmt.Errorf("bench worker %d: map: %w", me, err)
	}
	l, closeLock, err := openLock(cfg, kind)
	if err != nil {
		return fmt.Errorf("bench worker %d: open lock: %w", me, err)
	}
	defer func() {
		if cerr := closeLock(); cerr != nil && err == nil {
			err = fmt.Errorf("bench worker %d: close lock: %w", me, cerr)
		}
	}()
	if !attach(s) {
		return fmt.Errorf("bench worker %d: the driver aborted the start", me)
	}
	defer func() {
		// Locker panics on a lock error, where the harness's drivers call
		// Fatal: the worker fails, and its stat slot stays not done.
		if r := recover(); r != nil {
			err = fmt.Errorf("bench worker %d: lock error: %v", me, r)
		}
	}()
	work(s, cfg, me, l)
	return nil
}
