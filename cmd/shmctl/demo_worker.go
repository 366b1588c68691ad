package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

type demoWorkerOptions struct {
	IO *IOStreams

	Path  string
	Index int
}

// newCmdDemoWorker is one worker process of demo, which starts it; it is
// hidden from help.
func newCmdDemoWorker(ios *IOStreams, runF func(*demoWorkerOptions) error) *cobra.Command {
	opts := &demoWorkerOptions{IO: ios}
	cmd := &cobra.Command{
		Use:    "demo-worker --path SEGMENT --index N",
		Short:  "One worker process of shmctl demo",
		Hidden: true,
		Args:   exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Path == "" || opts.Index < 0 || opts.Index >= demoMaxWorkers {
				return newUsageError(cmd, "demo-worker needs --path and an --index from 0 to %d", demoMaxWorkers-1)
			}
			if runF != nil {
				return runF(opts)
			}
			return runDemoWorker(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Path, "path", "", "the demo's segment")
	cmd.Flags().IntVar(&opts.Index, "index", -1, "this worker's number")
	return cmd
}

// demoWorker is one worker's state: its locks, its identity, its words.
type demoWorker struct {
	out   *IOStreams
	index int
	pid   int
	me    spinlock.Identity // one holder for the whole process
	locks []*spinlock.Lock  // by demoSlots index
	words *demoWords
	mine  demoWorkerWords
}

// runDemoWorker loops until the demo says stop: lock a random slot, count
// one increment in the slot's counter and in this worker's tally, unlock.
// Told to hold, it locks the victim slot and keeps it until it is killed.
func runDemoWorker(opts *demoWorkerOptions) error {
	seg, err := shm.Open(opts.Path, shm.Options{})
	if err != nil {
		return err
	}
	defer seg.Close()
	words, err := demoWordsOf(seg, false)
	if err != nil {
		return err
	}
	w := &demoWorker{out: opts.IO, index: opts.Index, pid: os.Getpid(), me: spinlock.NewHolder(),
		words: words, mine: words.workers[opts.Index]}
	for _, name := range demoSlots {
		l, err := spinlock.Named(seg, name, spinlock.PIDTID)
		if err != nil {
			return err
		}
		w.locks = append(w.locks, l)
	}
	w.mine.ready.Store(1)
	for words.stop.Load() == 0 {
		if w.mine.hold.Load() != 0 {
			return w.holdUntilKilled()
		}
		s := rand.IntN(len(w.locks))
		var g spinlock.Guard
		if err := w.lock(&g, s); err != nil {
			return err
		}
		// The demo kills a worker only while it waits in holdUntilKilled,
		// where it increments nothing: every increment a worker made is
		// in both the counter and its tally, so the final check is exact.
		counter, tally := words.slots[s].counter, w.mine.tally[s]
		counter.Store(counter.Load() + 1) // a plain load and store: only the lock keeps it exact
		tally.Store(tally.Load() + 1)
		if err := g.Release(); err != nil {
			return err
		}
	}
	return nil
}

// lock locks slot s into g and records this worker as its last holder. If
// the previous holder died holding the lock, it says so on stdout (the demo
// relays the line) before it overwrites the dead holder's pid.
func (w *demoWorker) lock(g *spinlock.Guard, s int) error {
	l := w.locks[s]
	if err := g.Lock(l, w.me); err != nil {
		return err
	}
	last := w.words.slots[s].lastHolder
	if g.Reclaimed() {
		// The dead holder's data is ours now: here it is only its pid.
		w.mine.reclaims.Add(1)
		fmt.Fprintf(w.out.Out, "worker %d (pid %d) took over %s from dead pid %d (generation %d)\n",
			w.index, w.pid, demoSlots[s], last.Load(), l.Generation())
	}
	last.Store(uint64(w.pid))
	return nil
}

// holdUntilKilled locks the victim slot, says so in the segment, and waits
// to be killed (the demo sends SIGKILL; Pdeathsig ends it if the demo dies).
func (w *demoWorker) holdUntilKilled() error {
	var g spinlock.Guard
	if err := w.lock(&g, demoVictimSlot); err != nil {
		return err
	}
	w.mine.holding.Store(1)
	for {
		time.Sleep(time.Hour)
	}
}
