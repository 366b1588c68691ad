package bench_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/shmlock/shmlock/cmd/shmctl/internal/bench"
	"github.com/shmlock/shmlock/internal/testproc"
)

func TestMain(m *testing.M) { testproc.Main(m, helpers) }

// Worker processes: this test binary again.
var helpers = map[string]func(args []string) int{
	// work WORKLOAD PROCS ITERS PATH LOCK ME: bench.Work.
	"work": func(args []string) int {
		procs, _ := strconv.Atoi(args[1])
		iters, _ := strconv.ParseUint(args[2], 10, 64)
		me, _ := strconv.Atoi(args[5])
		cfg := bench.Config{Workload: args[0], Procs: procs, Iters: iters, Path: args[3], Lock: args[4]}
		if err := bench.Work(cfg, me); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	},
	// create-full DIR: mount a tmpfs smaller than the shared file on DIR,
	// create the file there and write each of its pages; print
	// "enospc=B files=[...]" (what DIR holds after) and the error for a
	// create that failed. On a sparse file the writes raise SIGBUS.
	"create-full": func(args []string) int {
		if err := testproc.MountTmpfs(args[0], bench.ShmSize/4); err != nil {
			fmt.Println(err)
			if testproc.MountRefused(err) {
				return testproc.ExitCannotMount
			}
			return 2
		}
		err := bench.CreateSharedFile(filepath.Join(args[0], "file"))
		if err == nil {
			fmt.Println("created a file larger than its file system, and wrote all of it")
			return 1
		}
		names, _ := filepath.Glob(filepath.Join(args[0], "*"))
		fmt.Printf("enospc=%t files=%q\n%v\n", errors.Is(err, syscall.ENOSPC), names, err)
		return 0
	},
	// fail PATH: attach to the start barrier, then exit 1.
	"fail": func(args []string) int {
		if err := bench.AttachThenFail(args[0]); err != nil {
			return 1
		}
		return 0
	},
}

func workers(cfg bench.Config, failing int) func(me int) (*exec.Cmd, error) {
	return func(me int) (*exec.Cmd, error) {
		if me == failing {
			return testproc.Command("fail", cfg.Path), nil
		}
		return testproc.Command("work", cfg.Workload, strconv.Itoa(cfg.Procs), strconv.FormatUint(cfg.Iters, 10),
			cfg.Path, cfg.Lock, strconv.Itoa(me)), nil
	}
}

func TestDrive(t *testing.T) {
	t.Parallel()
	for _, lock := range bench.LockNames() {
		cfg := bench.Config{Workload: "counter", Procs: 2, Iters: 5000, Path: testproc.SegmentPath(t), Lock: lock}
		res, code := bench.Drive(cfg, workers(cfg, -1))
		assert.Equal(t, bench.ExitOK, code, "%s: %+v", lock, res)
		assert.True(t, res.OK)
		assert.Contains(t, res.Detail, "; counter=10000 want=10000")
		for _, p := range []string{cfg.Path, cfg.Path + ".shm"} {
			_, err := os.Stat(p)
			assert.ErrorIs(t, err, os.ErrNotExist, "%s after Drive", p)
		}
	}
}

// rw90 across processes on the locks that share: no torn read. On the
// upgrade mutex, the same operations as TestWorkloadsInProcess's
// sync.RWMutex run; lockmgr's collaborative mode is the shared lock.
func TestDriveRW90(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		lock   string
		iters  uint64
		peer   string
		detail string
	}{
		{bench.LockUpgrade, 1000, "shmlock_upgrade", "reads=1825 writes=175 torn=0 record=175"},
		{bench.LockMgr, 3000, "shmlock_lockmgr", "torn=0"},
		{bench.LockMgrEager, 3000, "shmlock_lockmgr_eager", "torn=0"},
	} {
		cfg := bench.Config{Workload: "rw90", Procs: 2, Iters: tt.iters, Path: testproc.SegmentPath(t), Lock: tt.lock}
		res, code := bench.Drive(cfg, workers(cfg, -1))
		assert.Equal(t, bench.ExitOK, code, "%s: %+v", tt.lock, res)
		assert.True(t, res.OK, tt.lock)
		assert.Contains(t, res.Detail, tt.detail, tt.lock)
		assert.Equal(t, tt.peer, res.Peer, tt.lock)
	}
}

// A worker that dies after the start fails the run: ok false, exit 1. It
// counts once, though both its exit status and its stat slot tell it, as
// in bench/'s C harness.
func TestDriveFailedWorker(t *testing.T) {
	t.Parallel()
	cfg := bench.Config{Workload: "counter", Procs: 3, Iters: 1000, Path: testproc.SegmentPath(t), Lock: bench.LockSpin}
	res, code := bench.Drive(cfg, workers(cfg, 1))
	assert.Equal(t, bench.ExitFailed, code)
	assert.False(t, res.OK)
	assert.Contains(t, res.Detail, "; counter=2000 want=3000; failed_workers=1 lock_errors=0")
}

// A worker that cannot start: the others are told to abort.
func TestDriveSpawnFails(t *testing.T) {
	t.Parallel()
	cfg := bench.Config{Workload: "counter", Procs: 3, Iters: 1000, Path: testproc.SegmentPath(t), Lock: bench.LockSpin}
	spawn := workers(cfg, -1)
	res, code := bench.Drive(cfg, func(me int) (*exec.Cmd, error) {
		if me == 2 {
			return exec.Command("/nonexistent/worker"), nil
		}
		return spawn(me)
	})
	assert.Equal(t, bench.ExitFailed, code)
	assert.False(t, res.OK)
	assert.Contains(t, res.Detail, "start worker: ")
	_, err := os.Stat(cfg.Path)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// The first outputs of splitmix64 from state 0 (Vigna's reference).
func TestSplitmix64(t *testing.T) {
	t.Parallel()
	var s uint64
	for _, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		assert.Equal(t, want, bench.Splitmix64(&s))
	}
}

// The workload loops and their validation, with workers as goroutines and
// sync's locks (rw90 needs shared locking, which the spinlock lacks).
func TestWorkloadsInProcess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		workload string
		procs    int
		l        sync.Locker
		detail   string
	}{
		{"uncontended", 1, new(sync.Mutex), "ns per lock+unlock pair"},
		{"counter", 3, new(sync.Mutex), "counter=3000 want=3000"},
		{"pingpong_retry", 2, new(sync.Mutex), "turns=2000 want=2000 retries/turn="},
		// Seeds 1 and 2 (worker index + 1) give 97 and 78 writes in 1000
		// operations each (computed with an independent splitmix64).
		{"rw90", 2, new(sync.RWMutex), "reads=1825 writes=175 torn=0 record=175"},
		{"uncontended_shared", 1, new(sync.RWMutex), "ns per shared lock+unlock pair"},
	}
	for _, tt := range tests {
		res, code := bench.RunInProcess(bench.Config{Workload: tt.workload, Procs: tt.procs, Iters: 1000}, tt.l)
		assert.Equal(t, bench.ExitOK, code, "%s: %+v", tt.workload, res)
		assert.True(t, res.OK, tt.workload)
		assert.Contains(t, res.Detail, tt.detail, tt.workload)
	}
}

// The driver's shared file has all its memory: on a full file system
// creating it fails with ENOSPC and leaves no file, where a sparse file
// was made and the workers' first writes to its pages raised SIGBUS.
func TestSharedFileOnFullFileSystem(t *testing.T) {
	t.Parallel()
	out, err := testproc.RunWithOwnMounts(t, "create-full", t.TempDir())
	first, _, _ := strings.Cut(string(out), "\n")
	if want := `enospc=true files=[]`; err != nil || first != want {
		t.Fatalf("helper: %v; got %q, want %q; output:\n%s", err, first, want, out)
	}
}
