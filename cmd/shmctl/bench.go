package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/cmd/shmctl/internal/bench"
	"github.com/shmlock/shmlock/shm"
)

// benchWorkerEnv marks a worker process of bench: the driver runs this
// program again with the same flags and this variable set to the worker's
// index, as the peers' harness does with PEERS_WORKER.
const benchWorkerEnv = "SHMCTL_BENCH_WORKER"

type benchOptions struct {
	IO *IOStreams

	Workload string
	Procs    int
	Iters    uint64 // per worker
	Path     string // the shared file; the lock's segment goes in Path+".shm"
	Lock     string // one of bench.LockNames
}

func newCmdBench(ios *IOStreams, runF func(*benchOptions) error) *cobra.Command {
	opts := &benchOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "bench --workload W --procs P --iters N [--path FILE] [--lock spin|spin-token|upgrade|lockmgr|lockmgr-eager]",
		Short: "Run one cell of the cross-process lock benchmark",
		Long: `Run one benchmark cell as a driver of the peer-benchmark contract
(bench/README.md in the repository), so that shmlock's locks are measured
beside pthread, Boost, flock and the other drivers there by the same
command (go run ./bench/matrix).

The driver creates and maps FILE (64 KiB, the contract's layout), creates
the lock's segment in FILE.shm, starts P worker processes (this program again, killed
if the driver dies), opens the start barrier and waits. Each worker opens
the segment and runs N iterations of the workload: uncontended (P = 1),
counter, pingpong and pingpong_retry (P = 2), and the two that need a
shared lock (the upgrade mutex and lockmgr have one): rw90 and
uncontended_shared (P = 1, shared lock+unlock pairs).

--lock spin is the spinlock in pid/tid mode, one holder per worker (peer
"shmlock_spin"); spin-token is token mode, one token per worker for the
whole run (peer "shmlock_spin_token"); upgrade is the upgradeable
reader/writer mutex, one handle per worker, Lock for the exclusive
workloads and LockShared for the shared ones (peer "shmlock_upgrade").
--lock lockmgr is one named resource of package lockmgr (peer
"shmlock_lockmgr"): each worker, as owner worker-PID, acquires it
exclusively (collaboratively for shared holds), waiting with retries woken
by releases, and releases it; the contract counts each acquire+release
pair as one op; lockmgr-eager is the same with eager waiters
(AcquireOptions.Eager: no keep-off after a failed attempt; peer
"shmlock_lockmgr_eager"). Without --lock, the shared workloads run on the
upgrade mutex and the rest on spin.

FILE is resolved like every segment path (a bare name is in /dev/shm).
Without --path the driver uses a private file of its own. Either way it
removes FILE and FILE.shm when done, or when SIGINT, SIGTERM or SIGHUP
stops it (Ctrl-C; its workers die with it), and it refuses to start if
either exists: bench never truncates, replaces or removes a file it did
not make.

Output is exactly one line of JSON: peer, workload, procs, iters, seconds,
ops_per_sec, ns_per_op, cpu_seconds (the CPU time the workers used in
their loops, all together), ok, detail. Exit status 0 if the run validated, 1
if it ran but failed, 2 for bad arguments, 3 for an unsupported workload;
a run a signal stopped prints no line and exits 128 plus the signal.`,
		Example: `  shmctl bench --workload counter --procs 2 --iters 2e6 --path /dev/shm/b
  shmctl bench --workload=uncontended --procs=1 --iters=1e7 --path=/dev/shm/b --lock=spin-token
  shmctl bench --workload rw90 --procs 4 --iters 1e6 --path /dev/shm/b`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Workload == "" || opts.Iters == 0 {
				return newUsageError(cmd, "bench needs --workload, --procs and --iters")
			}
			if cmd.Flags().Changed("path") {
				p, err := shm.ResolvePath(opts.Path)
				if err != nil {
					return newUsageError(cmd, "--path: %v", err)
				}
				opts.Path = p
			}
			if opts.Procs < 1 || opts.Procs > bench.MaxProcs {
				return newUsageError(cmd, "--procs must be 1 to %d, got %d", bench.MaxProcs, opts.Procs)
			}
			if !cmd.Flags().Changed("lock") && bench.Shared(opts.Workload) {
				opts.Lock = bench.LockUpgrade // the only lock with shared holds
			}
			if !isOneOf(opts.Lock, bench.LockNames()) {
				return newUsageError(cmd, "--lock must be %s, got %q", orList(bench.LockNames()), opts.Lock)
			}
			if runF != nil {
				return runF(opts)
			}
			return runBench(opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Workload, "workload", "", orList(bench.Workloads()))
	f.IntVar(&opts.Procs, "procs", 0, "worker processes")
	f.Var(itersValue{&opts.Iters}, "iters", "iterations per worker (2e6 is accepted)")
	f.StringVar(&opts.Path, "path", "", "the shared `file`, which must not exist (the driver creates it and FILE.shm, and removes both); default: a private one")
	f.StringVar(&opts.Lock, "lock", bench.LockSpin, "the lock: "+orList(bench.LockNames())+" (shared workloads: upgrade)")
	return cmd
}

func runBench(opts *benchOptions) error {
	if opts.Path == "" {
		opts.Path = privateBenchPath()
	}
	cfg := bench.Config{Workload: opts.Workload, Procs: opts.Procs, Iters: opts.Iters, Path: opts.Path, Lock: opts.Lock}
	if w, ok := os.LookupEnv(benchWorkerEnv); ok {
		me, err := strconv.Atoi(w)
		if err != nil {
			return fmt.Errorf("bench worker: bad %s=%q", benchWorkerEnv, w)
		}
		return bench.Work(cfg, me)
	}
	errOut := workerOutput(opts.IO.ErrOut)
	if opts.IO.stderrTTY {
		defer showProgress(errOut, cfg)()
	}
	res, code := bench.Drive(cfg, func(me int) (*exec.Cmd, error) {
		cmd, err := selfCommand(benchArgs(cfg)...)
		if err != nil {
			return nil, err
		}
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env, benchWorkerEnv+"="+strconv.Itoa(me))
		// Workers print only errors; stdout is the driver's JSON line.
		cmd.Stdout, cmd.Stderr = errOut, errOut
		return cmd, nil
	})
	if err := writeJSONLine(opts.IO.Out, benchJSON(res)); err != nil {
		return err
	}
	if code != bench.ExitOK {
		return exitStatus(code)
	}
	return nil
}

// showProgress redraws one line on stderr (a terminal) every half second
// while the run goes on: what runs and for how long. stdout keeps its one
// JSON line. The returned func ends it and clears the line.
func showProgress(w io.Writer, cfg bench.Config) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			fmt.Fprintf(w, "\rbench: %s, %d procs x %d iters, %s lock: %.1fs", cfg.Workload, cfg.Procs, cfg.Iters, cfg.Lock, time.Since(start).Seconds())
			select {
			case <-done:
				fmt.Fprint(w, "\r\x1b[K")
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// privateBenchPath is a path in /dev/shm that no other run uses: this
// process's pid and 64 random bits. bench creates it exclusively, so a
// clash is an error, never an overwrite.
func privateBenchPath() string {
	return filepath.Join(shm.DefaultDir, fmt.Sprintf("shmlock-bench-%d-%016x", os.Getpid(), rand.Uint64()))
}

// benchArgs are a worker's command line: the driver's flags.
func benchArgs(cfg bench.Config) []string {
	return []string{"bench", "--workload", cfg.Workload, "--procs", strconv.Itoa(cfg.Procs),
		"--iters", strconv.FormatUint(cfg.Iters, 10), "--path", cfg.Path, "--lock", cfg.Lock}
}

// itersValue is --iters: a count that may be written in floating-point
// form such as 2e6, as the contract allows. Like the harness, it keeps the
// whole part of a fraction.
type itersValue struct{ n *uint64 }

func (v itersValue) String() string {
	if v.n == nil {
		return "0"
	}
	return strconv.FormatUint(*v.n, 10)
}

func (v itersValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < 1 || f >= math.MaxUint64 {
		return fmt.Errorf("want a count of at least 1, such as 2000000 or 2e6")
	}
	*v.n = uint64(f)
	return nil
}

func (v itersValue) Type() string { return "count" }

// orList writes "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

func isOneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}
