// Command jobs shows named resource locks (package lockmgr) guarding a set
// of jobs that several runner processes share: each job runs once, under
// its own lock, and a runner killed (kill -9) in the middle of a job does
// not lose it: the next runner that takes the job's lock is told that its
// holder died and runs the job again. Each job's record keeps the fencing
// version of the hold that completed it, so a late write from an older
// holder would be refused.
//
//	go run ./examples/jobs [-runners 3] [-jobs 20]
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// runnerEnv marks a runner process: this program started again.
const runnerEnv = "SHMLOCK_EXAMPLE_JOBS_RUNNER"

// Each job has a record of two words in the region "jobs": how many times
// it ran to completion, and the fencing version of the hold that completed
// it last.
const record = 16

func main() {
	if os.Getenv(runnerEnv) != "" {
		if err := runner(os.Args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "jobs runner:", err)
			os.Exit(1)
		}
		return
	}
	runners := flag.Int("runners", 3, "runner processes")
	jobs := flag.Int("jobs", 20, "jobs")
	flag.Parse()
	if err := run(*runners, *jobs, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "jobs:", err)
		os.Exit(1)
	}
}

func jobName(j int) string { return "job-" + strconv.Itoa(j) }

// run makes a segment, starts a runner that dies in the middle of job 0
// and the other runners, and checks that every job ran exactly once to
// completion.
func run(runners, jobs int, out io.Writer) error {
	if runners < 1 || jobs < 1 {
		return errors.New("-runners and -jobs must be at least 1")
	}
	path := filepath.Join("/dev/shm", fmt.Sprintf("shmlock-example-jobs-%d", os.Getpid()))
	seg, err := shm.Create(path, shm.Options{})
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer seg.Close()
	region, err := seg.Data("jobs", jobs*record)
	if err != nil {
		return err
	}

	victim, err := start(path, jobs, true)
	if err != nil {
		return err
	}
	line, err := bufio.NewReader(victim.stdout).ReadString('\n')
	if err != nil || line != "running job-0\n" {
		_ = victim.cmd.Process.Kill()
		return fmt.Errorf("the victim did not start job-0: %q %v", line, err)
	}
	fmt.Fprintf(out, "killing runner %d in the middle of job-0\n", victim.cmd.Process.Pid)
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	_ = victim.cmd.Wait()
	var procs []*proc
	for range runners {
		p, err := start(path, jobs, false)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		rest, _ := io.ReadAll(p.stdout)
		if err := p.cmd.Wait(); err != nil {
			return fmt.Errorf("runner %d: %v", p.cmd.Process.Pid, err)
		}
		_, _ = out.Write(rest)
	}
	b := region.Bytes()
	for j := range jobs {
		if runs := binary.LittleEndian.Uint64(b[j*record:]); runs != 1 {
			return fmt.Errorf("FAIL: %s completed %d times", jobName(j), runs)
		}
	}
	fmt.Fprintf(out, "every one of %d jobs completed exactly once\nPASS\n", jobs)
	return nil
}

type proc struct {
	cmd    *exec.Cmd
	stdout io.Reader
}

// start runs this program again as a runner over jobs of segment path;
// a victim stops in the middle of job 0.
func start(path string, jobs int, victim bool) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, path, strconv.Itoa(jobs), strconv.FormatBool(victim))
	cmd.Env = append(os.Environ(), runnerEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	return &proc{cmd, stdout}, cmd.Start()
}

// runner takes each job's lock in turn, waiting for it, and runs the job
// unless its record says it completed.
func runner(args []string, out io.Writer) error {
	if len(args) != 3 {
		return fmt.Errorf("want PATH JOBS VICTIM, got %q", args)
	}
	jobs, _ := strconv.Atoi(args[1])
	victim := args[2] == "true"
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return err
	}
	defer seg.Close()
	region, err := seg.Data("jobs", 0)
	if err != nil {
		return err
	}
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	if err != nil {
		return err
	}
	me := "runner-" + strconv.Itoa(os.Getpid())
	b := region.Bytes()
	for j := range jobs {
		job := jobName(j)
		info, err := m.Acquire(context.Background(), job, me, lockmgr.Exclusive,
			lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
		if err != nil {
			return err
		}
		rec := b[j*record : (j+1)*record]
		if info.Reclaimed || info.Inconsistent {
			fmt.Fprintf(out, "runner %d: %s's last holder died: it runs again\n", os.Getpid(), job)
		}
		if binary.LittleEndian.Uint64(rec) == 0 {
			if victim {
				fmt.Fprintln(out, "running", job)
				time.Sleep(time.Hour) // until killed
				return errors.New("not killed")
			}
			time.Sleep(time.Millisecond) // the job's work
			if v := binary.LittleEndian.Uint64(rec[8:]); info.Version <= v {
				return fmt.Errorf("%s: version %d is not after the completing hold's %d", job, info.Version, v)
			}
			binary.LittleEndian.PutUint64(rec, binary.LittleEndian.Uint64(rec)+1)
			binary.LittleEndian.PutUint64(rec[8:], info.Version)
		}
		if info.Inconsistent {
			if err := m.MarkConsistent(job, me); err != nil {
				return err
			}
		}
		if err := m.Release(job, me); err != nil {
			return err
		}
	}
	return nil
}
