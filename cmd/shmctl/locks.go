package main

import (
	"context"
	"fmt"
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
	Etcd    etcdOptions // when on: the table in etcd, no segment

	now func() time.Time // for tests; nil means time.Now
}

func newCmdLocks(ios *IOStreams, runF func(*locksOptions) error) *cobra.Command {
	opts := &locksOptions{IO: ios}
	cmd := &cobra.Command{
		Use:     "locks <segment> | locks --etcd HOST:PORT[,...]",
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

With --etcd (or SHMLOCK_ETCD set), the table in etcd is listed instead
(no segment): path is then etcd://ENDPOINTS/PREFIX, capacity 0 (none), a
holder's host is given, and alive says whether its lease still runs.

JSON fields: path, declared_only, capacity, resources [{resource, mode,
state, version, declared, holders [{owner, pid, host (etcd only),
companion_pid, alive, state, acquired, expires, age_seconds,
left_seconds}]}].`,
		Example: `  shmctl locks jobs
  shmctl locks jobs --all --json
  shmctl locks --etcd 10.0.0.1:2379`,
		Args: segmentOrEtcd(&opts.Etcd),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				opts.Segment = args[0]
			}
			opts.Group = groupFlag(cmd)
			if runF != nil {
				return runF(opts)
			}
			return runLocks(opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.All, "all", "a", false, "list also the resources that nobody holds")
	addJSONFlag(cmd, &opts.JSON)
	addEtcdFlags(cmd, &opts.Etcd)
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
	where, ov, capacity, err := readTable(opts.Segment, opts.Group, &opts.Etcd)
	if err != nil {
		return err
	}
	now := time.Now()
	if opts.now != nil {
		now = opts.now()
	}
	doc := readLocks(where, ov, capacity, opts.All, now)
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

// readTable reads the whole lock table, the segment's or etcd's: where it
// is (the JSON's path), its overview and its capacity (0 in etcd).
func readTable(segment string, group bool, e *etcdOptions) (string, lockmgr.Overview, int, error) {
	if e.on() {
		ctx, cancel := context.WithTimeout(context.Background(), etcdDialTimeout)
		defer cancel()
		m, closeAll, err := e.open(ctx)
		if err != nil {
			return "", lockmgr.Overview{}, 0, err
		}
		defer closeAll()
		ov, err := m.Overview()
		if err != nil {
			return "", lockmgr.Overview{}, 0, fmt.Errorf("%s: %w", e.where(), err)
		}
		return e.where(), ov, 0, nil
	}
	seg, m, err := openLockTable(segment, shm.Options{ReadOnly: true, GroupAccess: group})
	if err != nil {
		return "", lockmgr.Overview{}, 0, err
	}
	defer seg.Close()
	ov, err := m.Overview()
	return seg.Path(), ov, m.Capacity(), err
}

// segmentOrEtcd accepts a segment, or none with --etcd (or SHMLOCK_ETCD).
func segmentOrEtcd(e *etcdOptions) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if e.on() {
			return exactArgs(0, "no segment with --etcd")(cmd, args)
		}
		return exactArgs(1, "one segment")(cmd, args)
	}
}

func readLocks(path string, ov lockmgr.Overview, capacity int, all bool, now time.Time) *locksJSON {
	doc := &locksJSON{Path: path, DeclaredOnly: ov.DeclaredOnly, Capacity: capacity, Resources: []lockJSON{}}
	for _, r := range ov.Resources {
		if !all && len(r.Holders) == 0 && !r.Declared {
			continue
		}
		l := lockJSON{Resource: r.Resource, Mode: modeName(r.Mode), State: r.State.String(), Version: r.Version,
			Declared: r.Declared, Holders: []lockHolderJSON{}}
		for _, h := range r.Holders {
			hj := lockHolderJSON{Owner: h.Owner, PID: h.PID, Host: h.Host, CompanionPID: h.Companion, Alive: h.Alive,
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
