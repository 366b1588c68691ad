package lockmgr_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
)

// Benchmarks of acquire+release, counted as lock managers usually count
// them: each acquire and each release is one op, so ops/s = 2 * pairs/s.
//
// Peers, run as sibling sub-benchmarks in the same run:
//   - mutexmap: an in-process manager, a map behind a sync.Mutex (a lower
//     bound for any cross-process manager);
//   - flock: flock(2) on a file per resource name, the descriptor kept open
//     (gofrs/flock, the usual Go choice, also reopens the file on every
//     Lock, which costs it more);
//   - ofd: fcntl(2) open-file-description locks on a file per name.
// The lockmgr sub-benchmark that runs after them reports its ratios:
// x-flock and x-ofd (its ops/s over the peer's in the same cell), and
// x-mutexmap for one process.

// peerOps holds the ops/s of the peers measured in this run, by
// sub-benchmark name ("flock/1proc", ...).
var peerOps sync.Map

func reportOps(b *testing.B, pairs int, d time.Duration, peer string) float64 {
	ops := float64(2*pairs) / d.Seconds()
	b.ReportMetric(ops, "ops/s") // acquires + releases per second, all processes together
	if peer != "" {
		peerOps.Store(peer, ops)
	}
	return ops
}

// reportRatios reports lockmgr's ops/s against the peers of the same cell.
func reportRatios(b *testing.B, ops float64, cell string) {
	for _, p := range []string{"flock", "ofd"} {
		if v, ok := peerOps.Load(p + "/" + cell); ok {
			b.ReportMetric(ops/v.(float64), "x-"+p) // ops/s over the peer's in this cell
		}
	}
}

// One goroutine, one resource: the fast path.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("mutexmap/1proc", func(b *testing.B) {
		r := newRefMap()
		b.ReportAllocs()
		for b.Loop() {
			if err := r.acquire("bench:0", "owner"); err != nil {
				b.Fatal(err)
			}
			r.release("bench:0", "owner")
		}
		reportOps(b, b.N, b.Elapsed(), "mutexmap/1proc")
	})
	for _, kind := range []string{"flock", "ofd"} {
		b.Run(kind+"/1proc", func(b *testing.B) {
			l := newFileLocks(b, kind, tempDir(b))
			b.ReportAllocs()
			for b.Loop() {
				if err := l.lock("bench:0", false); err != nil {
					b.Fatal(err)
				}
				if err := l.unlock("bench:0"); err != nil {
					b.Fatal(err)
				}
			}
			reportOps(b, b.N, b.Elapsed(), kind+"/1proc")
		})
	}
	b.Run("lockmgr/1proc", func(b *testing.B) {
		m, _ := newManager(b, 64, lockmgr.Options{})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.Acquire(ctx, "bench:0", "owner", lockmgr.Exclusive, lockmgr.AcquireOptions{}); err != nil {
				b.Fatal(err)
			}
			if err := m.Release("bench:0", "owner"); err != nil {
				b.Fatal(err)
			}
		}
		ops := reportOps(b, b.N, b.Elapsed(), "")
		reportRatios(b, ops, "1proc")
		if v, ok := peerOps.Load("mutexmap/1proc"); ok {
			b.ReportMetric(ops/v.(float64), "x-mutexmap") // ops/s over the in-process map's
		}
	})
}

// P processes, each acquiring and releasing its own resource (distinct) or
// all the same one (shared, waiting with retries; each hold increments a
// plain counter, checked at the end).
func BenchmarkProcesses(b *testing.B) {
	procs := []int{1, 2, 4, 8}
	for _, shared := range []bool{false, true} {
		name := "distinct"
		if shared {
			name = "shared"
		}
		for _, p := range procs {
			if shared && p == 1 {
				continue
			}
			cell := fmt.Sprintf("%s-%dproc", name, p)
			for _, kind := range []string{"flock", "ofd", "lockmgr"} {
				b.Run(kind+"/"+cell, func(b *testing.B) {
					ops := runProcs(b, kind, shared, p)
					if kind == "lockmgr" {
						reportRatios(b, ops, cell)
					} else {
						peerOps.Store(kind+"/"+cell, ops)
					}
				})
			}
		}
	}
}

// runProcs starts p worker processes that do b.N acquire+release pairs
// between them and returns ops/s, timed from the start signal to the last
// worker's end.
func runProcs(b *testing.B, kind string, shared bool, p int) float64 {
	_, seg, path := newManagerAt(b, 64, lockmgr.Options{})
	sc, err := scratchOf(seg)
	require.NoError(b, err)
	dir := ""
	if kind != "lockmgr" {
		dir = tempDir(b)
	}
	var children []*testproc.Child
	for i := range p {
		n := b.N / p
		if i < b.N%p {
			n++
		}
		children = append(children, testproc.Start(b, "bench-worker", path, kind, strconv.FormatBool(shared),
			strconv.Itoa(i), strconv.Itoa(n), dir))
	}
	waitFor(b, func() bool { return sc.atomic(offReady).Load() == uint64(p) }, "workers to be ready")
	b.ResetTimer()
	start := time.Now()
	sc.atomic(offGo).Store(1)
	for _, c := range children {
		c.WaitOK(b)
	}
	b.StopTimer()
	var end time.Duration
	for i := range p {
		end = max(end, time.Duration(sc.atomic(offBench+64*uint64(i)).Load()))
	}
	d := time.Unix(0, int64(end)).Sub(start)
	if shared {
		require.EqualValues(b, b.N, *sc.plain(offCounter), "lost increments under the lock")
	}
	return reportOps(b, b.N, d, "")
}

// benchWorkersHelper is one worker of runProcs: ITERS acquire+release
// pairs, then its end time (Unix nanoseconds) in its scratch word.
// Args: PATH KIND SHARED INDEX ITERS DIR.
func benchWorkersHelper(args []string) int {
	seg, m, sc, err := openHelper(args[0])
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	kind, shared := args[1], args[2] == "true"
	idx, _ := strconv.Atoi(args[3])
	iters, _ := strconv.Atoi(args[4])
	res := "res-" + args[3]
	if shared {
		res = "shared"
	}
	owner := "worker-" + args[3]
	counter := sc.plain(offCounter)
	var lock func() error
	var unlock func() error
	switch kind {
	case "lockmgr":
		ctx := context.Background()
		opts := lockmgr.AcquireOptions{}
		if shared {
			opts = retryOpts
		}
		lock = func() error {
			_, err := m.Acquire(ctx, res, owner, lockmgr.Exclusive, opts)
			return err
		}
		unlock = func() error { return m.Release(res, owner) }
	default:
		l := newFileLocks(nil, kind, args[5])
		defer l.close()
		lock = func() error { return l.lock(res, shared) }
		unlock = func() error { return l.unlock(res) }
	}
	waitGo(sc)
	for i := range iters {
		if err := lock(); err != nil {
			return fail("lock %d: %v", i, err)
		}
		*counter++
		if err := unlock(); err != nil {
			return fail("unlock %d: %v", i, err)
		}
	}
	sc.atomic(offBench + 64*uint64(idx)).Store(uint64(time.Now().UnixNano()))
	return 0
}

func tempDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "lockmgr-bench-")
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// fileLocks is the file-per-name peer: a lock file per resource in dir,
// opened once and kept, locked with flock(2) or with fcntl(2) OFD locks.
type fileLocks struct {
	kind string
	dir  string
	fds  map[string]int
}

func newFileLocks(tb testing.TB, kind, dir string) *fileLocks {
	l := &fileLocks{kind: kind, dir: dir, fds: map[string]int{}}
	if tb != nil {
		tb.Cleanup(l.close)
	}
	return l
}

func (l *fileLocks) fd(name string) (int, error) {
	if fd, ok := l.fds[name]; ok {
		return fd, nil
	}
	fd, err := unix.Open(filepath.Join(l.dir, name), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, err
	}
	l.fds[name] = fd
	return fd, nil
}

// lock takes name's lock; wait says to block for it, else a conflict is an
// error (the design's exclusive mode).
func (l *fileLocks) lock(name string, wait bool) error {
	fd, err := l.fd(name)
	if err != nil {
		return err
	}
	for {
		if l.kind == "flock" {
			how := unix.LOCK_EX
			if !wait {
				how |= unix.LOCK_NB
			}
			err = unix.Flock(fd, how)
		} else {
			cmd := unix.F_OFD_SETLK
			if wait {
				cmd = unix.F_OFD_SETLKW
			}
			err = unix.FcntlFlock(uintptr(fd), cmd, &unix.Flock_t{Type: unix.F_WRLCK})
		}
		if err != unix.EINTR {
			return err
		}
	}
}

func (l *fileLocks) unlock(name string) error {
	fd := l.fds[name]
	if l.kind == "flock" {
		return unix.Flock(fd, unix.LOCK_UN)
	}
	return unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_UNLCK})
}

func (l *fileLocks) close() {
	for _, fd := range l.fds {
		_ = unix.Close(fd)
	}
	clear(l.fds)
}

// refMap is the in-process reference: a map of resource to holder behind a
// sync.Mutex, the simplest lock manager there is.
type refMap struct {
	mu    sync.Mutex
	locks map[string]refLock
}

type refLock struct {
	owner    string
	acquired time.Time
	version  uint64
}

func newRefMap() *refMap { return &refMap{locks: make(map[string]refLock)} }

func (r *refMap) acquire(resource, owner string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.locks[resource]; ok {
		return fmt.Errorf("held by %s", l.owner)
	}
	r.locks[resource] = refLock{owner: owner, acquired: time.Now(), version: 1}
	return nil
}

func (r *refMap) release(resource, owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.locks[resource]; ok && l.owner == owner {
		delete(r.locks, resource)
	}
}

// G goroutines of one process take turns at one resource, waiting with
// retries; each hold increments a plain counter, checked at the end. It
// measures the waiting within a process (the runtime's scheduler between
// the waiters), which the process benchmarks do not reach.
func BenchmarkGoroutines(b *testing.B) {
	ctx := context.Background()
	opts := lockmgr.AcquireOptions{Retries: lockmgr.RetryForever}
	for _, g := range []int{2, 8} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			m, _ := newManager(b, 64, lockmgr.Options{})
			per := max(b.N/g, 1)
			counter := 0
			var wg sync.WaitGroup
			b.ResetTimer()
			for i := range g {
				wg.Go(func() {
					owner := "owner-" + strconv.Itoa(i)
					for range per {
						if _, err := m.Acquire(ctx, "bench:0", owner, lockmgr.Exclusive, opts); err != nil {
							b.Error(err)
							return
						}
						counter++
						if err := m.Release("bench:0", owner); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if counter != per*g {
				b.Fatalf("counter %d, want %d", counter, per*g)
			}
			reportOps(b, per*g, b.Elapsed(), "")
		})
	}
}
