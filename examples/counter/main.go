// Command counter shows a lock surviving the death of its holder, with
// the data it protects: worker processes add to one counter in a data
// region under a spinlock, and one of them is killed (kill -9) in the
// middle of an update, holding the lock. The next worker to take the lock
// is told, repairs the counter from the tallies the workers keep beside
// it, and the total comes out exact.
//
//	go run ./examples/counter [-workers 4] [-adds 20000]
package main

import (
	"bufio"
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

	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// workerEnv marks a worker process: this program started again.
const workerEnv = "SHMLOCK_EXAMPLE_COUNTER_WORKER"

// The region "counter" holds the total, then one tally per worker; an
// update adds one to the worker's tally, then one to the total, so a death
// between the two leaves total != sum of tallies.
const word = 8

func main() {
	if os.Getenv(workerEnv) != "" {
		if err := worker(os.Args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "counter worker:", err)
			os.Exit(1)
		}
		return
	}
	workers := flag.Int("workers", 4, "worker processes")
	adds := flag.Int("adds", 20000, "additions per worker")
	flag.Parse()
	if err := run(*workers, *adds, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "counter:", err)
		os.Exit(1)
	}
}

// run makes a segment, runs the workers and a victim, kills the victim
// while it holds the lock, and checks the total.
func run(workers, adds int, out io.Writer) error {
	if workers < 1 || adds < 1 {
		return errors.New("-workers and -adds must be at least 1")
	}
	path := filepath.Join("/dev/shm", fmt.Sprintf("shmlock-example-counter-%d", os.Getpid()))
	seg, err := shm.Create(path, shm.Options{})
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer seg.Close()
	region, err := seg.Data("counter", (workers+2)*word) // total, the victim's tally, the workers'
	if err != nil {
		return err
	}

	// The victim (tally 1) takes the lock, does half an update and waits to
	// be killed; then the workers (tallies 2...) start.
	victim, err := start(path, 1, 0)
	if err != nil {
		return err
	}
	line, err := bufio.NewReader(victim.stdout).ReadString('\n')
	if err != nil || line != "holding\n" {
		_ = victim.cmd.Process.Kill()
		return fmt.Errorf("the victim did not take the lock: %q %v", line, err)
	}
	var procs []*proc
	for i := 2; i < workers+2; i++ {
		p, err := start(path, i, adds)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	fmt.Fprintf(out, "killing worker %d, which holds the lock in the middle of an update\n", victim.cmd.Process.Pid)
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	_ = victim.cmd.Wait()
	for _, p := range procs {
		rest, _ := io.ReadAll(p.stdout)
		if err := p.cmd.Wait(); err != nil {
			return fmt.Errorf("worker %d: %v", p.cmd.Process.Pid, err)
		}
		_, _ = out.Write(rest)
	}

	b := region.Bytes()
	total, sum := binary.LittleEndian.Uint64(b), uint64(0)
	for i := 1; i < workers+2; i++ {
		sum += binary.LittleEndian.Uint64(b[i*word:])
	}
	fmt.Fprintf(out, "total %d, sum of the tallies %d\n", total, sum)
	if total != sum || sum != uint64(workers*adds)+1 {
		return fmt.Errorf("FAIL: total %d, tallies %d, want %d", total, sum, workers*adds+1)
	}
	fmt.Fprintln(out, "PASS")
	return nil
}

type proc struct {
	cmd    *exec.Cmd
	stdout io.Reader
}

// start runs this program again as worker tally of segment path.
func start(path string, tally, adds int) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, path, strconv.Itoa(tally), strconv.Itoa(adds))
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	return &proc{cmd, stdout}, cmd.Start()
}

// worker adds to the counter adds times; with adds 0 it is the victim:
// it stops in the middle of its first update, holding the lock.
func worker(args []string, out io.Writer) error {
	if len(args) != 3 {
		return fmt.Errorf("want PATH TALLY ADDS, got %q", args)
	}
	tally, _ := strconv.Atoi(args[1])
	adds, _ := strconv.Atoi(args[2])
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return err
	}
	defer seg.Close()
	region, err := seg.Data("counter", 0) // made by run: find it
	if err != nil {
		return err
	}
	lock, err := spinlock.Named(seg, "counter", spinlock.PIDTID)
	if err != nil {
		return err
	}
	defer lock.Close()
	b, me := region.Bytes(), spinlock.NewHolder()
	add := func(off int) { binary.LittleEndian.PutUint64(b[off:], binary.LittleEndian.Uint64(b[off:])+1) }
	if adds == 0 {
		if _, err := lock.Lock(me); err != nil {
			return err
		}
		add(tally * word) // the tally, not the total: then the kill
		fmt.Fprintln(out, "holding")
		time.Sleep(time.Hour) // until killed
		return errors.New("not killed")
	}
	for range adds {
		g, err := lock.Lock(me)
		if err != nil {
			return err
		}
		if g.Inconsistent() {
			// A holder died in the middle of an update: the tallies are
			// right (each is written first), the total may not be.
			var sum uint64
			for off := word; off < len(b); off += word {
				sum += binary.LittleEndian.Uint64(b[off:])
			}
			fmt.Fprintf(out, "worker %d: a holder died holding the lock (reclaimed by this hold: %v); total %d repaired to %d\n",
				os.Getpid(), g.Reclaimed(), binary.LittleEndian.Uint64(b), sum)
			binary.LittleEndian.PutUint64(b, sum)
			if err := g.MarkConsistent(); err != nil {
				return err
			}
		}
		add(tally * word)
		add(0)
		if err := g.Release(); err != nil {
			return err
		}
	}
	return nil
}
