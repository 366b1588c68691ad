package main

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/metrics"
	"github.com/shmlock/shmlock/shm"
)

type topOptions struct {
	IO *IOStreams

	Segment  string
	Group    bool // --group: the segment is shared with a group (shm.Options.GroupAccess)
	Interval time.Duration
	Once     bool

	now func() time.Time // for tests; nil means time.Now
}

func newCmdTop(ios *IOStreams, runF func(*topOptions) error) *cobra.Command {
	opts := &topOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "top <segment>",
		Short: "Show the segment's busiest locks, redrawn every second",
		Long: `Show what 'shmctl serve' exports for a segment, in the terminal: a line on
the tables' use (entries in use of the capacity, and the data area's bytes,
or "no data area"), a line of the lock manager's counters, and a row per
lock in use: its kind (spinlock, upgrade, lockmgr), its name (or index),
whether it is held, its holders and how many of them are dead, its
sleepers (WAITERS; "-" for a named resource, whose waiters the segment
does not record), the acquisitions that had to wait (CONTENDED) and the
seconds they waited in all (WAIT_SECONDS), over every process since the
segment was made ("-" before format version 4), the age of its oldest hold
(AGE_SECONDS; only named resources record it) and whether it is
inconsistent. The busiest locks come first: most waiters, then most
contended, then most dead holders, then most holders.

The view is read again and redrawn in place every --interval (cursor home,
the rest of the screen cleared), until SIGINT or SIGTERM, which end it with
status 0; in a pipe each frame follows the last after a blank line. --once
prints one frame, without escape codes, for scripts. The segment is opened
read-only, once per frame, and nothing in it changes: a segment removed and
made again under its path is followed. A frame that cannot be read (the
segment gone, or not ready yet) shows the error instead and the next one
tries again; if the first cannot, top ends with status 1.`,
		Example: `  shmctl top jobs
  shmctl top jobs --interval 200ms
  shmctl top jobs --once`,
		Args: exactArgs(1, "one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segment = args[0]
			opts.Group = groupFlag(cmd)
			if !opts.Once && opts.Interval < minWatch {
				return newUsageError(cmd, "--interval must be at least %v, got %v", minWatch, opts.Interval)
			}
			if runF != nil {
				return runF(opts)
			}
			return runTop(opts)
		},
	}
	cmd.Flags().DurationVar(&opts.Interval, "interval", time.Second, "redraw every `D` (100ms or more)")
	cmd.Flags().BoolVar(&opts.Once, "once", false, "print one frame and exit")
	return cmd
}

func runTop(opts *topOptions) error {
	if opts.Once {
		return topFrame(opts)
	}
	return watch(opts.IO, opts.Interval, func() error { return topFrame(opts) })
}

// topFrame prints one frame: the segment is opened for it and closed, so
// that a segment made again under the same path is followed.
func topFrame(opts *topOptions) error {
	seg, err := shm.Open(opts.Segment, shm.Options{ReadOnly: true, GroupAccess: opts.Group})
	if err != nil {
		return err
	}
	defer seg.Close()
	now := time.Now()
	if opts.now != nil {
		now = opts.now()
	}
	v, err := metrics.Read(seg, now)
	if err != nil {
		return err
	}
	out := opts.IO.Out
	fmt.Fprintf(out, "%s  %s\n", v.Path, opts.IO.FormatTime(now))
	fmt.Fprint(out, "tables:")
	for _, t := range v.Tables {
		fmt.Fprintf(out, " %s %d/%d", t.Kind, t.Used, t.Capacity)
	}
	// A data area is never empty when there is one (create's --data 0 is
	// the default size): no size means the segment was made without one.
	if v.DataBytes == 0 {
		fmt.Fprint(out, "  no data area\n")
	} else {
		regions := "regions"
		if v.Regions == 1 {
			regions = "region"
		}
		fmt.Fprintf(out, "  data %d/%d bytes in %d %s\n", v.DataUsedBytes, v.DataBytes, v.Regions, regions)
	}
	if st := v.LockMgr; st != nil {
		fmt.Fprintf(out, "lockmgr: grants %d  releases %d  conflicts %d  expired %d  reclaimed %d  active %d\n",
			st.TotalLocks, st.Released, st.ConflictsDetected, st.ExpiredLocks, st.Reclaimed, st.ActiveLocks)
	}
	fmt.Fprintln(out)
	locks := slices.Clone(v.Locks)
	slices.SortStableFunc(locks, busier)
	t := newTablePrinter(opts.IO, "KIND", "LOCK", "HELD", "HOLDERS", "DEAD", "WAITERS", "CONTENDED", "WAIT_SECONDS",
		"AGE_SECONDS", "INCONSISTENT")
	for _, l := range locks {
		waiters, contended, wait, age := "-", "-", "-", "-"
		if l.Waiters >= 0 {
			waiters = fmt.Sprint(l.Waiters)
		}
		if c := l.Contention; c != nil {
			contended, wait = fmt.Sprint(c.Contended), secondsCell(c.Wait.Seconds())
		}
		if l.HoldAge >= 0 {
			age = secondsCell(l.HoldAge.Seconds())
		}
		t.AddRow(l.Kind, l.Label, yesNo(l.Held), l.Holders, l.DeadHolders, waiters, contended, wait, age, yesNo(l.Inconsistent))
	}
	return t.Render()
}

// busier orders the locks worth a look first: most waiters (contention
// now), then most contended acquisitions (contention so far), then most
// dead holders (to reclaim), then most holders; the table order
// otherwise. Waiters that are not recorded (-1) count as none.
func busier(a, b metrics.Lock) int {
	return cmp.Or(cmp.Compare(max(b.Waiters, 0), max(a.Waiters, 0)), cmp.Compare(contended(b), contended(a)),
		cmp.Compare(b.DeadHolders, a.DeadHolders), cmp.Compare(b.Holders, a.Holders))
}

// contended is l's contended acquisitions; 0 without counters.
func contended(l metrics.Lock) uint64 {
	if l.Contention == nil {
		return 0
	}
	return l.Contention.Contended
}
