package main

import (
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
(acquired, expired: every hold past its TTL, unlocked), its version (the
fencing token of the last grant), the owner, the holding process's pid and
whether it (or the command 'shmctl lock' runs for it) is alive or dead,
the hold's age, and the time left before it expires ("-" if it never
does; a negative time if it expired and nobody has ended it yet).

Without --all, resources that nobody holds and that were not declared are
left out. The segment is opened read-only and nothing in it changes.

JSON fields: path, declared_only, capacity, resources [{resource, mode,
state, version, declared, holders [{owner, pid, companion_pid, alive,
state, acquired, expires, age_seconds, left_seconds}]}].`,
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
	doc := readLocks(seg.Path(), m, opts.All, now)
	if opts.JSON {
		return writeJSON(opts.IO.Out, doc)
	}
	t := newTablePrinter(opts.IO, "RESOURCE", "MODE", "STATE", "VERSION", "OWNER", "PID", "ALIVE", "AGE", "LEFT")
	for _, r := range doc.Resources {
		if len(r.Holders) == 0 {
			t.AddRow(r.Resource, r.Mode, r.State, r.Version, "-", "-", "-", "-", "-")
			continue
		}
		for _, h := range r.Holders {
			alive := "dead"
			if h.Alive {
				alive = "alive"
			}
			left := "-"
			if h.LeftSeconds != nil {
				left = roundDuration(*h.LeftSeconds)
			}
			t.AddRow(r.Resource, r.Mode, r.State, r.Version, h.Owner, h.PID, alive, roundDuration(h.AgeSeconds), left)
		}
	}
	return t.Render()
}

// roundDuration prints seconds as a duration to the millisecond.
func roundDuration(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

func readLocks(path string, m *lockmgr.Manager, all bool, now time.Time) *locksJSON {
	doc := &locksJSON{Path: path, DeclaredOnly: m.DeclaredOnly(), Capacity: m.Capacity(), Resources: []lockJSON{}}
	for _, r := range m.List() {
		if !all && len(r.Holders) == 0 && !r.Declared {
			continue
		}
		l := lockJSON{Resource: r.Resource, Mode: modeName(r.Mode), State: r.State.String(), Version: r.Version,
			Declared: r.Declared, Holders: []lockHolderJSON{}}
		for _, h := range r.Holders {
			hj := lockHolderJSON{Owner: h.Owner, PID: h.PID, CompanionPID: h.Companion, Alive: h.Alive,
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

// modeName is the mode as the listings show it; "-" when nobody holds the
// resource.
func modeName(m lockmgr.Mode) string {
	if m == 0 {
		return "-"
	}
	return m.String()
}
