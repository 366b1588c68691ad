// Command matrix runs shmlock's locks side by side with pthread, Boost,
// flock, fcntl OFD locks and a CAS floor on the same workloads, and writes
// the results: a JSON file, a markdown table (also printed) and an SVG
// plot. From the repository's root:
//
//	go run ./bench/matrix              # the full matrix, about 4 minutes on 2 CPUs; results in bench/results/
//	go run ./bench/matrix -quick       # seconds: checks that everything runs, numbers mean nothing
//	go run ./bench/matrix -baseline HEAD -rounds 10 -locks ... -cells ...  # this tree against a commit (bench/README.md)
//
// It builds the drivers (make -C bench), shmctl and the placement probe
// (scripts/linert) into bench/bin, calibrates each lock's iterations per
// cell to about -target seconds a run, then runs -rounds rounds: each runs
// every cell, and in each cell every lock once, in an order rotated every
// round, so that a quiet or busy minute lands on all of them alike. The
// placement probe runs before every round and at the end. See
// bench/README.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		os.Exit(2)
	}
	if opts.Replot != "" {
		err = replot(opts, os.Stdout, os.Stderr)
	} else {
		s, stop := newStopper(os.Stderr, os.Exit)
		opts.stop = s
		err = runMatrix(opts, os.Stdout, os.Stderr)
		if s.stopping() != 0 {
			select {} // the stop exits 128+N once the running driver's files are gone
		}
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		os.Exit(1)
	}
}

type options struct {
	Rounds     int
	Target     float64 // seconds per measured run
	Cells      string
	Contenders string
	Reference  string
	Out        string // "": bench/results, or a new temporary directory with -quick
	Bin        string // "": bench/bin
	Quick      bool
	Timeout    time.Duration
	ProbeN     int
	ShmDir     string
	Replot     string   // a results file to draw again, running nothing
	Baseline   string   // a bin directory of another build: shmlock's locks run from it too
	Args       []string // as given, for the results file
	stop       *stopper // nil: a signal kills the matrix at once
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("matrix", flag.ContinueOnError)
	fs.IntVar(&o.Rounds, "rounds", 5, "rounds: each runs every lock in every cell once")
	fs.Float64Var(&o.Target, "target", 0.5, "seconds per measured run (iterations are calibrated to it)")
	fs.StringVar(&o.Cells, "cells", defaultCells, "workload:procs,...")
	fs.StringVar(&o.Contenders, "locks", "", "comma-separated locks to run (default all: "+strings.Join(contenderNames(contenders), ",")+")")
	fs.StringVar(&o.Reference, "ref", "pthread_mutex_robust,pthread_rwlock", "the reference of the ratios: in each cell, the first of these that ran")
	fs.StringVar(&o.Out, "out", "", "directory for matrix.json, matrix.md and matrix.svg (default bench/results; with -quick a new temporary directory)")
	fs.StringVar(&o.Bin, "bin", "", "directory for the built drivers (default bench/bin)")
	fs.BoolVar(&o.Quick, "quick", false, "a run of seconds that checks the machinery: 1 round, 0.01 s a run")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "limit for one driver call")
	fs.IntVar(&o.ProbeN, "probe", 500_000, "cache-line round trips per placement probe")
	fs.StringVar(&o.ShmDir, "shm", "/dev/shm", "directory for the drivers' shared files")
	fs.StringVar(&o.Baseline, "baseline", "", "another build: a git revision (its tree is exported and built in a temporary directory) or a directory of its drivers (shmctl, C drivers); each of shmlock's locks also runs from it, beside this build's in every round, and a table compares the two round by round")
	fs.StringVar(&o.Replot, "replot", "", "write matrix.md and matrix.svg again from this matrix.json (beside it), running nothing")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.Quick {
		if !set["rounds"] {
			o.Rounds = 1
		}
		if !set["target"] {
			o.Target = 0.01
		}
		if !set["probe"] {
			o.ProbeN = 20_000
		}
	}
	if o.Rounds < 1 || o.Target <= 0 || o.ProbeN < 1 || o.Timeout <= 0 {
		return o, fmt.Errorf("-rounds, -target, -probe and -timeout must be positive")
	}
	o.Args = args
	return o, nil
}
