// Command queue shows the upgrade mutex (package upgrade) guarding a work
// queue that several processes share, in a data region: producers push
// jobs under the unique lock; consumers look at the queue under the upgrade
// lock, which readers share, and only when there is a job turn it into the
// unique lock to take it (no other writer can get in between); a monitor
// reads the queue's length under shared locks meanwhile. Every job must be
// taken exactly once.
//
//	go run ./examples/queue [-producers 2] [-consumers 3] [-jobs 2000]
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// roleEnv marks a producer, consumer or monitor: this program again.
const roleEnv = "SHMLOCK_EXAMPLE_QUEUE_ROLE"

// The region "queue": head (jobs pushed), tail (jobs taken), then the ring
// of ringLen job numbers, then one count per job of the times it was taken.
const (
	word    = 8
	ringLen = 16
	headAt  = 0
	tailAt  = word
	ringAt  = 2 * word
	takenAt = ringAt + ringLen*word
)

func main() {
	if role := os.Getenv(roleEnv); role != "" {
		if err := work(role, os.Args[1:], os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "queue %s: %v\n", role, err)
			os.Exit(1)
		}
		return
	}
	producers := flag.Int("producers", 2, "producer processes")
	consumers := flag.Int("consumers", 3, "consumer processes")
	jobs := flag.Int("jobs", 2000, "jobs per producer")
	flag.Parse()
	if err := run(*producers, *consumers, *jobs, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "queue:", err)
		os.Exit(1)
	}
}

// run makes the segment, runs every process and checks that each job was
// taken exactly once.
func run(producers, consumers, jobs int, out io.Writer) error {
	if producers < 1 || consumers < 1 || jobs < 1 {
		return errors.New("-producers, -consumers and -jobs must be at least 1")
	}
	total := producers * jobs
	path := filepath.Join("/dev/shm", fmt.Sprintf("shmlock-example-queue-%d", os.Getpid()))
	seg, err := shm.Create(path, shm.Options{})
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer seg.Close()
	region, err := seg.Data("queue", takenAt+total*word)
	if err != nil {
		return err
	}
	var cmds []*exec.Cmd
	shared := &lockedWriter{w: out} // the processes write their reports at once
	startRole := func(role string, args ...int) error {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		argv := []string{path, strconv.Itoa(total)}
		for _, a := range args {
			argv = append(argv, strconv.Itoa(a))
		}
		cmd := exec.Command(exe, argv...)
		cmd.Env = append(os.Environ(), roleEnv+"="+role)
		cmd.Stdout, cmd.Stderr = shared, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		cmds = append(cmds, cmd)
		return cmd.Start()
	}
	for p := range producers {
		if err := startRole("producer", p*jobs, jobs); err != nil {
			return err
		}
	}
	for range consumers {
		if err := startRole("consumer"); err != nil {
			return err
		}
	}
	if err := startRole("monitor"); err != nil {
		return err
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("%v: %v", cmd.Env[len(cmd.Env)-1], err)
		}
	}
	b := region.Bytes()
	for j := range total {
		if n := binary.LittleEndian.Uint64(b[takenAt+j*word:]); n != 1 {
			return fmt.Errorf("FAIL: job %d taken %d times", j, n)
		}
	}
	fmt.Fprintf(out, "%d jobs pushed by %d producers, each taken exactly once by %d consumers\nPASS\n", total, producers, consumers)
	return nil
}

// lockedWriter lets several processes' output goroutines share a writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// work is one process of the example: args are the segment's path, the
// total of jobs, and for a producer its first job and how many it pushes.
func work(role string, args []string, out io.Writer) error {
	if len(args) < 2 {
		return fmt.Errorf("want PATH TOTAL [FIRST COUNT], got %q", args)
	}
	total, _ := strconv.ParseUint(args[1], 10, 64)
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return err
	}
	defer seg.Close()
	region, err := seg.Data("queue", 0)
	if err != nil {
		return err
	}
	m, err := upgrade.Named(seg, "queue")
	if err != nil {
		return err
	}
	defer m.Close()
	b := region.Bytes()
	get := func(at int) uint64 { return binary.LittleEndian.Uint64(b[at:]) }
	set := func(at int, v uint64) { binary.LittleEndian.PutUint64(b[at:], v) }
	idle := func() { time.Sleep(50 * time.Microsecond) }
	switch role {
	case "producer":
		if len(args) != 4 {
			return fmt.Errorf("want PATH TOTAL FIRST COUNT, got %q", args)
		}
		first, _ := strconv.ParseUint(args[2], 10, 64)
		count, _ := strconv.ParseUint(args[3], 10, 64)
		for job := first; job < first+count; {
			if err := m.Lock(); err != nil {
				return err
			}
			if head := get(headAt); head-get(tailAt) < ringLen {
				set(ringAt+int(head%ringLen)*word, job)
				set(headAt, head+1)
				job++
			}
			if err := m.Unlock(); err != nil {
				return err
			}
		}
	case "consumer":
		taken := 0
		for {
			if err := m.LockUpgrade(); err != nil {
				return err
			}
			tail := get(tailAt)
			if tail == total {
				fmt.Fprintf(out, "consumer %d took %d jobs\n", os.Getpid(), taken)
				return m.UnlockUpgrade()
			}
			if tail == get(headAt) { // nothing yet: readers were never held up
				if err := m.UnlockUpgrade(); err != nil {
					return err
				}
				idle()
				continue
			}
			if err := m.UpgradeToUnique(); err != nil {
				return err
			}
			job := get(ringAt + int(tail%ringLen)*word)
			set(takenAt+int(job)*word, get(takenAt+int(job)*word)+1)
			set(tailAt, tail+1)
			taken++
			if err := m.UniqueToUpgrade(); err != nil {
				return err
			}
			if err := m.UnlockUpgrade(); err != nil {
				return err
			}
		}
	case "monitor":
		most := uint64(0)
		for {
			if err := m.LockShared(); err != nil {
				return err
			}
			head, tail := get(headAt), get(tailAt)
			if err := m.UnlockShared(); err != nil {
				return err
			}
			most = max(most, head-tail)
			if tail == total {
				fmt.Fprintf(out, "monitor: at most %d jobs waited in the queue\n", most)
				return nil
			}
			idle()
		}
	}
	return nil
}
