package bench

import (
	"os"
	"runtime"
	"sync"

	"github.com/edsrzf/mmap-go"

	"github.com/shmlock/shmlock/internal/peerwork"
)

// Splitmix64 is the rw90 PRNG.
var Splitmix64 = peerwork.SplitMix64

func init() {
	// Workers that are goroutines must yield to the Go scheduler.
	yield = runtime.Gosched
}

// RunInProcess runs cfg.Procs workers of cfg.Workload as goroutines of
// this process, all with l, on a zeroed heap copy of the shared file, and
// validates as Drive does, with shared locking allowed.
func RunInProcess(cfg Config, l sync.Locker) (Result, int) {
	s, err := view(mmap.MMap(make([]byte, ShmSize)))
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	for me := range cfg.Procs {
		wg.Go(func() {
			if attach(s) {
				work(s, cfg, me, l)
			}
		})
	}
	for s.ready.Load() < uint32(cfg.Procs) {
		runtime.Gosched()
	}
	t0 := nowNs()
	s.goFlag.Store(goStart)
	wg.Wait()
	return s.validate(cfg, lockKind{peer: "inprocess", shared: true}, t0, make([]bool, cfg.Procs))
}

// AttachThenFail is a worker that passes the start barrier and fails.
func AttachThenFail(path string) error {
	s, err := mapFile(path, false)
	if err != nil {
		return err
	}
	attach(s)
	return errFailed
}

type failed struct{}

func (failed) Error() string { return "failed on purpose" }

var errFailed error = failed{}

// CreateSharedFile creates and maps the shared file as Drive does, writes
// each of its pages, and unmaps it.
func CreateSharedFile(path string) error {
	s, err := mapFile(path, true)
	if err != nil {
		return err
	}
	for i := 0; i < len(s.mem); i += os.Getpagesize() {
		s.mem[i] = 0
	}
	return s.unmap()
}
