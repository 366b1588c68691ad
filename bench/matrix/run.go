package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/peerwork"
)

// driverLine is the contract's one JSON line.
type driverLine = peerwork.Line

// Exit statuses of the contract that the matrix tells apart.
const (
	exitOK          = peerwork.ExitOK
	exitUnsupported = peerwork.ExitUnsupported
)

// outcome is one driver call.
type outcome struct {
	line        driverLine
	unsupported bool   // exit status 3: the lock has no such workload
	fail        string // why the run does not count; "" if it does
}

// runner runs drivers from one bin directory.
type runner struct {
	bin     string
	shmDir  string        // where the shared files go
	timeout time.Duration // per driver call
	seq     int           // numbers the shared files
	stop    *stopper      // nil: nothing stops a run but its timeout
}

// run calls c's driver once for cl with iters per worker. The shared file
// (and any sidecar FILE.*) is removed afterwards, whatever happened.
func (r *runner) run(c contender, cl cell, iters uint64) outcome {
	r.seq++
	path := filepath.Join(r.shmDir, fmt.Sprintf("shmlock-matrix-%d-%d", os.Getpid(), r.seq))
	defer r.stop.hold()() // a stop waits for the driver's end and its files' removal
	defer removeShared(path)
	ctx, cancel := context.WithTimeout(r.stop.context(), r.timeout)
	defer cancel()
	args := append(c.Argv[1:len(c.Argv):len(c.Argv)], "--workload", cl.Workload, "--procs", strconv.Itoa(cl.Procs),
		"--iters", strconv.FormatUint(iters, 10), "--path", path)
	bin := r.bin
	if c.Bin != "" {
		bin = c.Bin
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, c.Argv[0]), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &limitedWriter{w: &stderr, n: 4096}
	cmd.Cancel = func() error {
		if sig := r.stop.stopping(); sig != 0 {
			return cmd.Process.Signal(sig) // the driver removes its files and dies; the wait delay kills it if not
		}
		return cmd.Process.Kill()
	}
	cmd.WaitDelay = 5 * time.Second // workers that outlive a killed driver keep the pipes open
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	var o outcome
	text := strings.TrimSpace(stdout.String())
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		text = text[i+1:] // the contract's line is the last one
	}
	jerr := json.Unmarshal([]byte(text), &o.line)
	switch {
	case r.stop.stopping() != 0:
		o.fail = "stopped by " + unix.SignalName(r.stop.stopping())
	case ctx.Err() != nil:
		o.fail = fmt.Sprintf("killed after %s", r.timeout)
	case code == exitUnsupported:
		o.unsupported = true
	case jerr != nil:
		o.fail = fmt.Sprintf("no JSON line (%v, exit status %d): %s", jerr, code, oneLine(stderr.String()))
	case o.line.Peer != c.peer() || o.line.Workload != cl.Workload || o.line.Procs != cl.Procs || o.line.Iters != iters:
		o.fail = fmt.Sprintf("the line is for %s %s P=%d iters=%d", o.line.Peer, o.line.Workload, o.line.Procs, o.line.Iters)
	case !o.line.OK || code != exitOK || err != nil:
		o.fail = fmt.Sprintf("exit status %d, ok=%v: %s %s", code, o.line.OK, o.line.Detail, oneLine(stderr.String()))
	case o.line.Seconds <= 0 || o.line.OpsPerSec <= 0:
		o.fail = "no time measured"
	}
	return o
}

// removeShared removes a driver's shared file and its sidecars.
func removeShared(path string) {
	_ = os.Remove(path)
	side, _ := filepath.Glob(path + ".*")
	for _, p := range side {
		_ = os.Remove(p)
	}
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// limitedWriter keeps the first n bytes and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(l.n, len(p))
		l.n -= k
		if _, err := l.w.Write(p[:k]); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// firstIters is the pilot's first iteration count: small enough for the
// slowest lock (a file lock's round trip under contention is ~50 us).
func firstIters(w string) uint64 {
	switch w {
	case "uncontended", "uncontended_shared":
		return 10_000
	case "pingpong", "pingpong_retry":
		return 100
	}
	return 1000
}

// maxIters bounds calibration (a lock that takes no time is broken).
const maxIters = 1e12

// calibrate finds the iterations per worker that make one run of c in cl
// last about target: pilot runs with 10x more iterations each, until one
// lasts a tenth of target, scaled to target and rounded to two significant
// digits. It returns 0 with unsupported or a failure.
func (r *runner) calibrate(c contender, cl cell, target float64) (iters uint64, unsupported bool, fail string) {
	for n := firstIters(cl.Workload); ; n *= 10 {
		o := r.run(c, cl, n)
		if o.unsupported || o.fail != "" {
			return 0, o.unsupported, o.fail
		}
		if o.line.Seconds >= target/10 || n*10 > maxIters {
			return roundSig2(float64(n) * target / o.line.Seconds), false, ""
		}
	}
}

// roundSig2 rounds x to two significant digits, at least 1.
func roundSig2(x float64) uint64 {
	if x < 1 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(x))-1)
	return uint64(math.Round(x/e) * e)
}

// matrixRun is one run of the whole matrix.
type matrixRun struct {
	r          *runner
	contenders []contender
	cells      []cell
	rounds     int
	target     float64
	probeN     int       // round trips per placement probe
	log        io.Writer // progress
}

// do calibrates every contender in every cell, then runs the rounds: in
// each, every cell, and in each cell every contender once, in an order
// that rotates by one each round, so that no contender always runs first
// or right after another. The placement probe runs before each round and
// at the end.
func (m *matrixRun) do() ([]Cell, []Probe) {
	cells := make([]Cell, len(m.cells))
	for i, cl := range m.cells {
		cells[i] = Cell{Workload: cl.Workload, Procs: cl.Procs, Unit: cl.Unit()}
		for _, c := range m.contenders {
			if c.Of != "" { // a twin runs as many iterations as the lock it repeats: its rounds pair with them
				if k := slices.IndexFunc(cells[i].Entries, func(e Entry) bool { return e.Name == c.Of }); k >= 0 {
					cells[i].Entries = append(cells[i].Entries, Entry{Name: c.Name, Iters: cells[i].Entries[k].Iters})
				} else {
					cells[i].Unsupported = append(cells[i].Unsupported, c.Name)
				}
				continue
			}
			iters, unsupported, fail := m.r.calibrate(c, cl, m.target)
			if m.r.stop.stopping() != 0 {
				return nil, nil // no results after a stop
			}
			switch {
			case unsupported:
				cells[i].Unsupported = append(cells[i].Unsupported, c.Name)
				continue
			case fail != "":
				fmt.Fprintf(m.log, "calibrating %-15s %-20s FAILED: %s\n", cl.Title(), c.Name, fail)
				cells[i].Entries = append(cells[i].Entries, Entry{Name: c.Name, Failed: []Failure{{0, fail}}})
				continue
			}
			fmt.Fprintf(m.log, "calibrating %-15s %-20s %d iterations per process\n", cl.Title(), c.Name, iters)
			cells[i].Entries = append(cells[i].Entries, Entry{Name: c.Name, Iters: iters})
		}
	}
	var probes []Probe
	for round := 1; round <= m.rounds; round++ {
		p := probe(m.r.bin, fmt.Sprintf("round %d", round), m.probeN)
		probes = append(probes, p)
		fmt.Fprintf(m.log, "round %d/%d, placement probe: %s\n", round, m.rounds, p)
		for i := range cells {
			cl := m.cells[i]
			n := len(cells[i].Entries)
			for k := range n {
				e := &cells[i].Entries[(k+round-1)%n]
				if e.Iters == 0 {
					continue // its calibration failed
				}
				o := m.r.run(m.byName(e.Name), cl, e.Iters)
				if m.r.stop.stopping() != 0 {
					return nil, nil
				}
				if o.fail != "" || o.unsupported {
					why := o.fail
					if o.unsupported {
						why = "unsupported after calibration"
					}
					e.Failed = append(e.Failed, Failure{round, why})
					fmt.Fprintf(m.log, "  %-15s %-20s FAILED: %s\n", cl.Title(), e.Name, why)
					continue
				}
				e.Samples = append(e.Samples, Sample{Round: round, OpsPerSec: o.line.OpsPerSec, CPUs: o.line.BusyCPUs(), Waits: waitsOf(o.line.Detail)})
				e.Detail = o.line.Detail
				fmt.Fprintf(m.log, "  %-15s %-20s %s %s\n", cl.Title(), e.Name, si(o.line.OpsPerSec), cl.Unit())
			}
		}
	}
	p := probe(m.r.bin, "end", m.probeN)
	fmt.Fprintf(m.log, "placement probe at the end: %s\n", p)
	return cells, append(probes, p)
}

func (m *matrixRun) byName(name string) contender {
	for _, c := range m.contenders {
		if c.Name == name {
			return c
		}
	}
	panic("matrix: no contender " + name) // entries are made from m.contenders
}

func (p Probe) String() string {
	if p.Error != "" {
		return "failed: " + p.Error
	}
	return fmt.Sprintf("%.0f ns per cache-line round trip between CPU 0 and 1", p.Ns)
}
