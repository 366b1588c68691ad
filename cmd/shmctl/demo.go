package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/stopsig"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

type demoOptions struct {
	IO *IOStreams

	Path     string // the segment to create (a leftover demo segment is replaced)
	Workers  int
	Duration time.Duration
	Keep     bool // leave the segment behind
}

// Demo defaults and limits.
const (
	demoDefaultPath     = "/dev/shm/shmlock-demo"
	demoDefaultWorkers  = 4
	demoDefaultDuration = 2 * time.Second
	demoMinDuration     = 200 * time.Millisecond
	demoWaitLimit       = 10 * time.Second     // longest wait for any one step
	demoPoll            = 1 * time.Millisecond // how often a wait looks again
	demoSegmentSlots    = 8                    // owner slots; the demo claims len(demoSlots)
)

// demoSegmentOptions size the demo's segment: a few owner slots and one
// data region for demoWords, no other tables.
var demoSegmentOptions = shm.Options{Options: layout.Options{
	Slots: demoSegmentSlots, Upgrades: -1, TxnRecords: -1, TxnArenaBytes: -1, LockMgrEntries: -1,
	DataBytes: int64(demoDataBytes), DataRegions: 1,
}}

func newCmdDemo(ios *IOStreams, runF func(*demoOptions) error) *cobra.Command {
	opts := &demoOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "demo [--path SEGMENT] [--workers N] [--duration D] [--keep]",
		Short: "Show a lock surviving the death of its holder",
		Long: `Run shmlock's main job in a few seconds: worker processes share a segment
and its locks, one is killed with SIGKILL while it holds a lock, and the
others carry on.

The demo creates the segment (replacing a shmlock segment left there by an
earlier run), claims three named spinlocks (alpha, beta, gamma; pid/tid
mode) and starts the workers: this program again, killed if the demo dies.
Each worker loops: lock a random one of the three, add one to that lock's
counter in the segment (a plain load and store, which only the lock keeps
exact) and to its own tally, unlock. Halfway through, the last worker is
told to lock beta and keep it, and is killed while it holds it; the next
worker that waits for beta finds the holder dead, takes the lock over and
says so. At the end each counter must equal the sum of the workers'
tallies.

The slot tables are those of 'shmctl slots'. The exit status is 0 if every
check passed, 1 if not.`,
		Example: `  shmctl demo
  shmctl demo --workers 8 --duration 5s --keep && shmctl slots shmlock-demo`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Workers < 2 || opts.Workers > demoMaxWorkers {
				return newUsageError(cmd, "--workers must be 2 to %d, got %d", demoMaxWorkers, opts.Workers)
			}
			if opts.Duration < demoMinDuration {
				return newUsageError(cmd, "--duration must be at least %v, got %v", demoMinDuration, opts.Duration)
			}
			if runF != nil {
				return runF(opts)
			}
			return runDemo(opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Path, "path", demoDefaultPath, "the demo's `segment`, a path or a bare name")
	f.IntVar(&opts.Workers, "workers", demoDefaultWorkers, "worker processes")
	f.DurationVar(&opts.Duration, "duration", demoDefaultDuration, "how long the workers run")
	f.BoolVar(&opts.Keep, "keep", false, "keep the segment afterwards, for 'shmctl slots'")
	return cmd
}

// demo is one run: its segment, its workers and where it prints.
type demo struct {
	opts    *demoOptions
	out     *demoPrinter
	errOut  io.Writer // the workers' stderr
	seg     *shm.Segment
	words   *demoWords
	locks   []*spinlock.Lock // the demo's own handles, for the final check
	workers []*demoProcess
}

// demoProcess is one worker process as the demo sees it.
type demoProcess struct {
	index   int
	pid     int
	process *os.Process
	done    chan struct{} // closed once the process was waited for
	err     error         // its exit, valid after done
}

func runDemo(opts *demoOptions) error {
	d := &demo{opts: opts, out: &demoPrinter{w: opts.IO.Out}, errOut: workerOutput(opts.IO.ErrOut)}
	path, err := shm.ResolvePath(opts.Path)
	if err != nil {
		return err
	}
	switch removed, err := removeLeftoverDemo(path); {
	case err != nil:
		return err
	case removed:
		d.out.printf("removed %s, a demo segment left there by an earlier run\n\n", path)
	}
	// The handler is in place before the segment is made, so that no
	// signal finds the segment made and no handler to remove it, and it
	// is stopped once the cleanup is done: a signal during it still
	// removes the segment.
	var created atomic.Bool
	defer d.removeOnSignal(path, &created)()
	if d.seg, err = shm.Create(path, demoSegmentOptions); err != nil {
		return err
	}
	created.Store(true)
	testHookCreated()
	defer d.cleanup()
	if d.words, err = demoWordsOf(d.seg, true); err != nil {
		return err
	}
	for _, name := range demoSlots {
		l, err := spinlock.Named(d.seg, name, spinlock.PIDTID)
		if err != nil {
			return err
		}
		d.locks = append(d.locks, l)
	}
	if err := d.run(); err != nil {
		return err
	}
	if !d.check() {
		return errSilent // the FAIL lines are on stdout
	}
	return nil
}

// run is the demo's story: start, run, hold and kill, reclaim, stop.
func (d *demo) run() error {
	o := d.out
	victimSlot := demoSlots[demoVictimSlot]
	o.printf("shmlock demo: %d worker processes share the segment %s\n", d.opts.Workers, d.seg.Path())
	o.printf("for %v.\n\n", d.opts.Duration)
	o.printf("Each worker loops: lock one of the spinlocks %s (pid/tid mode:\n", strings.Join(demoSlots[:], ", "))
	o.printf("the lock records its holder's pid and start time), add 1 to that lock's\n")
	o.printf("counter in the segment (a plain load and store: only the lock keeps it\n")
	o.printf("exact) and to its own tally, unlock. Halfway through, one worker locks\n")
	o.printf("%s, keeps it, and is killed with SIGKILL. The next worker waiting for\n", victimSlot)
	o.printf("%s finds the holder dead and takes the lock over. At the end each\n", victimSlot)
	o.printf("counter must equal the sum of the workers' tallies.\n\n")

	for i := range d.opts.Workers {
		w, err := d.startWorker(i)
		if err != nil {
			return err
		}
		d.workers = append(d.workers, w)
		o.printf("started worker %d (pid %d)\n", w.index, w.pid)
	}
	// The clock starts once every worker has claimed the locks and loops,
	// so each one takes part from the first half on, however slowly the
	// machine started them, and the slot table shows every claim.
	for _, w := range d.workers {
		ready := d.words.workers[w.index].ready
		if err := d.waitFor("worker "+strconv.Itoa(w.index)+" to start", func() bool {
			return ready.Load() != 0 || isClosed(w.done)
		}); err != nil {
			return err
		}
		if ready.Load() == 0 {
			return fmt.Errorf("demo: worker %d exited before it started (%v)", w.index, w.err)
		}
	}
	start := time.Now()
	time.Sleep(time.Until(start.Add(d.opts.Duration / 2)))

	victim := d.workers[len(d.workers)-1]
	vw := d.words.workers[victim.index]
	o.printf("\nafter %v: worker %d (pid %d) is told to lock %s and keep it\n", d.opts.Duration/2, victim.index, victim.pid, victimSlot)
	vw.hold.Store(1)
	if err := d.waitFor("worker "+strconv.Itoa(victim.index)+" to hold "+victimSlot, func() bool {
		return vw.holding.Load() != 0 && d.ownerPID(demoVictimSlot) == uint32(victim.pid)
	}); err != nil {
		return err
	}
	doc, err := readSlots(d.seg, false)
	if err != nil {
		return err
	}
	o.printf("%s is held by pid %d, alive; WAITERS counts the workers asleep waiting:\n\n", victimSlot, victim.pid)
	if err := d.printSlots(doc); err != nil {
		return err
	}
	o.printf("\n(GENERATION is the lock's fencing counter, bumped by every release and\n")
	o.printf("takeover; TOKEN is for locks in token mode, which these are not.)\n")

	o.printf("\nkill -9 %d (worker %d, holding %s)\n", victim.pid, victim.index, victimSlot)
	if err := d.kill(victim); err != nil {
		return err
	}
	<-victim.done
	if doc, err = readSlots(d.seg, false); err != nil {
		return err
	}
	if s := slotNamed(doc, victimSlot); s != nil && s.Process != nil && s.Process.PID == uint32(victim.pid) {
		o.printf("worker %d is gone (%v); %s still names it as owner, now %s:\n\n", victim.index, victim.err, victimSlot, s.Process.Liveness)
	} else {
		o.printf("worker %d is gone (%v); a waiter has already taken %s over:\n\n", victim.index, victim.err, victimSlot)
	}
	if err := d.printSlots(doc); err != nil {
		return err
	}
	o.printf("\n")
	if err := d.waitFor("a worker to take "+victimSlot+" over", func() bool { return d.reclaims() > 0 }); err != nil {
		return err
	}

	time.Sleep(time.Until(start.Add(d.opts.Duration)))
	d.words.stop.Store(1)
	for _, w := range d.workers {
		if err := d.waitFor("worker "+strconv.Itoa(w.index)+" to stop", func() bool { return isClosed(w.done) }); err != nil {
			return err
		}
	}
	o.printf("\nafter %v: the workers stopped. The slots now:\n\n", time.Since(start).Round(time.Millisecond))
	doc, err = readSlots(d.seg, false)
	if err != nil {
		return err
	}
	return d.printSlots(doc)
}

// check prints each counter beside the sum of the tallies and the verdict,
// and reports whether every check passed.
func (d *demo) check() bool {
	o := d.out
	victim := d.workers[len(d.workers)-1]
	var failures []string

	o.printf("\nIncrements per worker and lock, from the tallies in the segment:\n\n")
	header := append([]string{"WORKER", "PID"}, upper(demoSlots[:])...)
	t := d.table(append(header, "NOTE")...)
	sums := make([]uint64, len(demoSlots))
	for _, w := range d.workers {
		row := []any{w.index, w.pid}
		for s := range demoSlots {
			n := d.words.workers[w.index].tally[s].Load()
			sums[s] += n
			row = append(row, n)
		}
		note := ""
		switch {
		case w == victim:
			note = "killed while holding " + demoSlots[demoVictimSlot]
		case w.err != nil:
			note = "failed: " + w.err.Error()
			failures = append(failures, fmt.Sprintf("worker %d failed: %v", w.index, w.err))
		}
		switch r := d.words.workers[w.index].reclaims.Load(); r {
		case 0:
		case 1:
			note = strings.TrimPrefix(note+"; took a lock over from a dead holder", "; ")
		default:
			note = strings.TrimPrefix(note+fmt.Sprintf("; took locks over from dead holders %d times", r), "; ")
		}
		t.AddRow(append(row, note)...)
	}
	sumRow, counterRow := []any{"sum", ""}, []any{"counter", ""}
	for s := range demoSlots {
		c := d.words.slots[s].counter.Load()
		sumRow, counterRow = append(sumRow, sums[s]), append(counterRow, c)
		if c != sums[s] {
			failures = append(failures, fmt.Sprintf("%s's counter is %d, but the tallies add up to %d", demoSlots[s], c, sums[s]))
		}
	}
	t.AddRow(append(sumRow, "what the workers counted")...)
	t.AddRow(append(counterRow, "what the locks' counters say")...)
	if err := t.render(); err != nil {
		failures = append(failures, err.Error())
	}

	if n := d.reclaims(); n != 1 {
		failures = append(failures, fmt.Sprintf("%d takeovers reported, want exactly 1", n))
	}
	for s, l := range d.locks {
		if id, held := l.Owner(); held {
			failures = append(failures, fmt.Sprintf("%s is still held, by %v", demoSlots[s], id))
		}
	}
	o.printf("\n")
	if len(failures) > 0 {
		for _, f := range failures {
			o.printf("FAIL: %s\n", f)
		}
		return false
	}
	o.printf("PASS: every counter equals the sum of the tallies, so no increment was lost\n")
	o.printf("or doubled; %s was taken over once, from the killed worker; no lock is held.\n", demoSlots[demoVictimSlot])
	return true
}

// startWorker starts worker i and relays its stdout, line by line.
func (d *demo) startWorker(i int) (*demoProcess, error) {
	cmd, err := selfCommand("demo-worker", "--path", d.seg.Path(), "--index", strconv.Itoa(i))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = d.errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting worker %d: %w", i, err)
	}
	w := &demoProcess{index: i, pid: cmd.Process.Pid, process: cmd.Process, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.out.printf("%s\n", sc.Text())
		}
		w.err = cmd.Wait() // after the last read, as exec wants
		close(w.done)
	}()
	return w, nil
}

// kill sends SIGKILL to worker w (os.Process uses a pidfd, so a worker
// already reaped is never confused with a new user of its pid).
func (d *demo) kill(w *demoProcess) error { return w.process.Kill() }

// removeOnSignal ends the demo on SIGINT, SIGTERM or SIGHUP (Ctrl-C,
// timeout(1), a closed terminal) as its end would, until stop is called:
// the segment removed (unless --keep) and the conventional status 128+N.
// Without it the process died at once and left its segment (the next run
// removed it). A signal ignored when the demo started stays ignored
// (stopsig.On): under nohup a hang-up stopped it. The workers die with the
// demo (their parent-death signal); the segment is only unlinked here, so
// the demo's goroutine, which may still be using its mapping, is never
// faulted: the exit unmaps it.
//
// A signal before created is set ends the demo with nothing removed: the
// file at path, if any, may not be the demo's (Create failed, or has not
// linked it yet: a pending file it leaves is a leftover that shmctl
// reclaim removes).
func (d *demo) removeOnSignal(path string, created *atomic.Bool) (stop func()) {
	return stopsig.On(func(sig syscall.Signal) {
		if created.Load() && !d.opts.Keep && shm.Remove(path) == nil {
			fmt.Fprintf(d.opts.IO.ErrOut, "\nshmctl: demo stopped by %v: removed %s\n", sig, path)
		}
		os.Exit(stopsig.ExitStatus(sig))
	})
}

// cleanup kills the workers still running, waits for them, and closes and
// (unless --keep) removes the segment.
func (d *demo) cleanup() {
	testHookCleanup()
	for _, w := range d.workers {
		if !isClosed(w.done) {
			_ = d.kill(w)
			<-w.done
		}
	}
	path := d.seg.Path()
	_ = d.seg.Close()
	if d.opts.Keep {
		d.out.printf("\nkept %s: see it with 'shmctl slots %s', remove it with 'shmctl rm %s'\n", path, path, path)
		return
	}
	if err := shm.Remove(path); err == nil {
		d.out.printf("\nremoved %s\n", path)
	}
}

// testHookCleanup runs as the demo's cleanup begins, and testHookCreated
// once its segment is made; tests replace them to signal the demo there.
var (
	testHookCleanup = func() {}
	testHookCreated = func() {}
)

// removeLeftoverDemo makes room for the demo's segment at path: nothing
// there is fine, and a segment an earlier demo left there (its three named
// slots claimed) that no process uses is removed; anything else, a file
// or a segment the demo did not make or one in use, is refused and left
// alone (choose another --path).
func removeLeftoverDemo(path string) (removed bool, err error) {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if !isDemoSegment(path) {
		return false, fmt.Errorf("%w: %s exists and is not a segment the demo made: the demo never removes it (choose another --path)", errRefused, path)
	}
	users, fi, err := segmentUsers(path)
	if err != nil {
		return false, err
	}
	if uid, foreign := foreignOwner(fi); foreign {
		return false, fmt.Errorf("%w: %s, a demo segment, is owned by another user (uid %d) (choose another --path)", errRefused, path, uid)
	}
	if len(users) > 0 {
		return false, fmt.Errorf("%w: %s, a demo segment, is in use: %s (choose another --path)", errRefused, path, strings.Join(users, "; "))
	}
	return true, shm.RemoveIfSame(path, fi)
}

// isDemoSegment reports whether the segment at path has the demo's named
// slots claimed: one the demo made (or that looks exactly like one).
func isDemoSegment(path string) bool {
	seg, err := shm.Open(path, shm.Options{ReadOnly: true})
	if err != nil {
		return false
	}
	defer seg.Close()
	for _, name := range demoSlots {
		if _, err := seg.Lookup(layout.KindOwnerSlots, name); err != nil {
			return false
		}
	}
	return true
}

// waitFor polls cond until it holds, for at most demoWaitLimit.
func (d *demo) waitFor(what string, cond func() bool) error {
	deadline := time.Now().Add(demoWaitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: gave up waiting %v for %s", demoWaitLimit, what)
		}
		time.Sleep(demoPoll)
	}
	return nil
}

// ownerPID is the pid recorded as the holder of lock s (0 if none).
func (d *demo) ownerPID(s int) uint32 {
	id, _ := d.locks[s].Owner()
	p, _ := proc.Unpack(id.PID)
	return p.PID
}

// reclaims is the number of takeovers the workers reported.
func (d *demo) reclaims() uint32 {
	var n uint32
	for _, w := range d.words.workers {
		n += w.reclaims.Load()
	}
	return n
}

// printSlots prints the slot table, as 'shmctl slots' does on a terminal.
func (d *demo) printSlots(doc *slotsJSON) error {
	var b bytes.Buffer
	if err := printSlots(d.tableStreams(&b), doc); err != nil {
		return err
	}
	d.out.write(b.Bytes())
	return nil
}

// tableStreams are streams for the demo's tables: always laid out for a
// person, with headers, even in a pipe, since the demo's output is only
// ever read by people (there is no --json).
func (d *demo) tableStreams(w io.Writer) *IOStreams {
	return &IOStreams{Out: w, ErrOut: d.opts.IO.ErrOut, stdoutTTY: true, location: d.opts.IO.location}
}

// demoTable is a table printed in one piece, so that relayed worker lines
// never land inside it.
type demoTable struct {
	*tablePrinter
	d   *demo
	buf *bytes.Buffer
}

func (d *demo) table(header ...string) *demoTable {
	var b bytes.Buffer
	return &demoTable{tablePrinter: newTablePrinter(d.tableStreams(&b), header...), d: d, buf: &b}
}

func (t *demoTable) render() error {
	if err := t.Render(); err != nil {
		return err
	}
	// An empty last column leaves padding at the ends of lines.
	var b bytes.Buffer
	for line := range strings.Lines(t.buf.String()) {
		b.WriteString(strings.TrimRight(line, " \n"))
		b.WriteByte('\n')
	}
	t.d.out.write(b.Bytes())
	return nil
}

// demoPrinter serialises the demo's output: its own lines and the lines it
// relays from the workers.
type demoPrinter struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *demoPrinter) printf(format string, args ...any) {
	p.write(fmt.Appendf(nil, format, args...))
}

func (p *demoPrinter) write(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = p.w.Write(b)
}

// slotNamed is the slot of doc claimed under name, or nil.
func slotNamed(doc *slotsJSON, name string) *slotJSON {
	for i := range doc.Slots {
		if n := doc.Slots[i].Name; n != nil && *n == name {
			return &doc.Slots[i]
		}
	}
	return nil
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func upper(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.ToUpper(n)
	}
	return out
}
