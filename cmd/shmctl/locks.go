package main

import (
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

type locksOptions struct {
	IO *IOStreams

	Segment string
	Group   bool // --group: the segment is shared with a group (shm.Options.GroupAccess)
	All     bool // also resources that nobody holds
	JSON    bool

	now func() time.Time // for tests; nil means time.Now
}

func newCmdLocks(ios *IOStreams, runF func(*locksOptions) error) *cobra.Command {
	opts := &locksOptions{IO: ios}
	cmd := &cobra.Command{
		Use:     "locks <segment>",
		Aliases: []string{"resources"}, // the package's noun
		Short:   "List the named resource locks (lockmgr)",
		Long: `List the named resource locks of the segment's lock-manager table, one row
per holder: the resource, its mode (exclusive or collaborative), its state
(acquired, expired: every hold past its TTL, unlocked), its generation (the
fencing token of the last grant, which lockmgr calls the version), the
owner, the holding process's pid and liveness, the companion process whose
life also keeps the hold (the command 'shmctl lock' runs; "(dead)" if it
died), the hold's age in seconds, and the seconds left before it expires
("-" if it never does; negative if it expired and nobody has ended it yet).

Without --all, resources that nobody holds and that were not declared are
left out. The segment is opened read-only and nothing in it changes.`,
		Example: `  shmctl locks jobs
  shmctl locks jobs --all --json`,
		Args: exactArgs(1, "one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segment = args[0]
			opts.Group = groupFlag(cmd)
			if runF != nil {
				return runF(opts)
			}
			return runLocks(opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.All, "all", "a", false, "list also the resources that nobody holds")
	addJSONFlag(cmd, &opts.JSON)
	return cmd
}

// openLockTable opens segment path with opts and a Manager over its
// lock-manager table; the caller closes the segment.
func openLockTable(path string, opts shm.Options) (*shm.Segment, *lockmgr.Manager, error) {
	seg, err := openWithTables(path, opts, layout.KindLockMgr)
	if err != nil {
		return nil, nil, err
	}
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	if err != nil {
		_ = seg.Close()
		return nil, nil, err
	}
	return seg, m, nil
}

func runLocks(opts *locksOptions) error {
	seg, m, err := openLockTable(opts.Segment, shm.Options{ReadOnly: true, GroupAccess: opts.Group})
	if err != nil {
		return err
	}
	defer seg.Close()
	now := time.Now()
	if opts.now != nil {
		now = opts.now()
	}
	doc := readLocks(seg, m, opts.All, now)
	if opts.JSON {
		return writeJSON(opts.IO.Out, doc)
	}
	t := newTablePrinter(opts.IO, "RESOURCE", "MODE", "STATE", "GENERATION", "OWNER", "PID", "LIVENESS", "COMPANION",
		"AGE_SECONDS", "LEFT_SECONDS")
	for _, r := range doc.Resources {
		if len(r.Holders) == 0 {
			t.AddRow(r.Resource, orDash(r.Mode), r.State, r.Generation, "-", "-", "-", "-", "-", "-")
			continue
		}
		for _, h := range r.Holders {
			pid, liveness := processCells(h.Process)
			left := "-"
			if h.LeftSeconds != nil {
				left = secondsCell(*h.LeftSeconds)
			}
			t.AddRow(r.Resource, orDash(r.Mode), r.State, r.Generation, h.Owner, pid, liveness, pidCell(h.Companion),
				secondsCell(h.AgeSeconds), left)
		}
	}
	return t.Render()
}

// secondsCell prints seconds to the millisecond.
func secondsCell(s float64) string {
	return strconv.FormatFloat(s, 'f', 3, 64)
}

func readLocks(seg *shm.Segment, m *lockmgr.Manager, all bool, now time.Time) *locksJSON {
	doc := &locksJSON{docHeader: header("locks"), Path: seg.Path(), DeclaredOnly: m.DeclaredOnly(),
		Capacity: m.Capacity(), Resources: []lockJSON{}}
	for _, r := range m.List() {
		if !all && len(r.Holders) == 0 && !r.Declared {
			continue
		}
		l := lockJSON{Resource: r.Resource, State: r.State.String(), Generation: idString(r.Version),
			Declared: r.Declared, Inconsistent: r.Inconsistent, Holders: []lockHolderJSON{}}
		if r.Mode != 0 {
			mode := r.Mode.String()
			l.Mode = &mode
		}
		for _, h := range r.Holders {
			hj := lockHolderJSON{Owner: h.Owner, Process: processOf(seg, h.Process), Companion: processOf(seg, h.CompanionProcess),
				State: h.State.String(), Acquired: h.AcquiredAt.UTC(), AgeSeconds: now.Sub(h.AcquiredAt).Seconds()}
			if !h.ExpiresAt.IsZero() {
				exp := h.ExpiresAt.UTC()
				left := h.ExpiresAt.Sub(now).Seconds()
				hj.Expires, hj.LeftSeconds = &exp, &left
			}
			l.Holders = append(l.Holders, hj)
		}
		doc.Resources = append(doc.Resources, l)
	}
	return doc
}
