package main

import (
	"context"
	"fmt"
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
(acquired, expired: every hold past its TTL, unlocked), its generation (the
fencing token of the last grant, which lockmgr calls the version), the
owner, the holding process's pid and liveness, the companion process whose
life also keeps the hold (the guard 'shmctl lock' runs its command under;
"(dead)" if it died), the hold's age in seconds, and the seconds left before it expires
("-" if it never does; negative if it expired and nobody has ended it yet).

Without --all, resources that nobody holds and that were not declared are
left out. The segment is opened read-only and nothing in it changes.

With --etcd (or SHMLOCK_ETCD set), the table in etcd is listed instead
(no segment): path is then etcd://ENDPOINTS/PREFIX, capacity null (none),
a holder's host is given, and its liveness says whether its lease runs.`,
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
	table, err := readTable(opts.Segment, opts.Group, &opts.Etcd)
	if err != nil {
		return err
	}
	now := time.Now()
	if opts.now != nil {
		now = opts.now()
	}
	doc := readLocks(table, opts.All, now)
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

// lockTable is the whole lock table, the segment's or etcd's, as the
// read commands show it.
type lockTable struct {
	where    string           // the JSON's path: the segment, or etcd://ENDPOINTS/PREFIX
	ov       lockmgr.Overview // resources, statistics, declared-only
	capacity *int             // nil in etcd: no fixed capacity
	// process describes a holder's process (packed identity w, pid): the
	// segment's liveness rules, or etcd's (alive while the lease runs).
	process func(h lockmgr.HolderInfo, companion bool) *processJSON
}

// readTable reads the lock table of segment, or etcd's with --etcd.
func readTable(segment string, group bool, e *etcdOptions) (*lockTable, error) {
	if e.on() {
		ctx, cancel := context.WithTimeout(context.Background(), etcdDialTimeout)
		defer cancel()
		m, closeAll, err := e.open(ctx)
		if err != nil {
			return nil, err
		}
		defer closeAll()
		ov, err := m.Overview()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.where(), err)
		}
		return &lockTable{where: e.where(), ov: ov, process: etcdProcess}, nil
	}
	seg, m, err := openLockTable(segment, shm.Options{ReadOnly: true, GroupAccess: group})
	if err != nil {
		return nil, err
	}
	defer seg.Close()
	ov, err := m.Overview()
	if err != nil {
		return nil, err
	}
	capacity := m.Capacity()
	return &lockTable{where: seg.Path(), ov: ov, capacity: &capacity,
		process: func(h lockmgr.HolderInfo, companion bool) *processJSON {
			if companion {
				return processOf(seg, h.CompanionProcess)
			}
			return processOf(seg, h.Process)
		}}, nil
}

// etcdProcess is a holder's process in etcd: a pid of another host, alive
// while its lease runs; no start time is known.
func etcdProcess(h lockmgr.HolderInfo, companion bool) *processJSON {
	if companion || h.PID == 0 {
		return nil
	}
	p := &processJSON{PID: uint32(h.PID), Liveness: livenessDead}
	if h.Alive {
		p.Liveness = livenessAlive
	}
	return p
}

// segmentOrEtcd accepts a segment, or none with --etcd (or SHMLOCK_ETCD).
func segmentOrEtcd(e *etcdOptions) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if e.on() && e.Endpoints == "" && len(args) > 0 {
			// The environment chose etcd, perhaps a profile's export
			// for lock: name it, and how to read a segment anyway.
			return newUsageError(cmd, "%s takes no segment while %s is set: it lists the table in etcd (%s= shmctl %s SEGMENT lists a segment's)",
				cmd.Name(), envEtcd, envEtcd, cmd.Name())
		}
		if e.on() {
			return exactArgs(0, "no segment with --etcd")(cmd, args)
		}
		return exactArgs(1, "one segment")(cmd, args)
	}
}

func readLocks(t *lockTable, all bool, now time.Time) *locksJSON {
	doc := &locksJSON{docHeader: header("locks"), Path: t.where, DeclaredOnly: t.ov.DeclaredOnly,
		Capacity: t.capacity, Resources: []lockJSON{}}
	for _, r := range t.ov.Resources {
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
			// A hold stamped by the lock manager's clock (the time-stamp
			// counter) may read a little after now: it is 0 old.
			hj := lockHolderJSON{Owner: h.Owner, Process: t.process(h, false), Companion: t.process(h, true),
				State: h.State.String(), Acquired: h.AcquiredAt.UTC(), AgeSeconds: max(now.Sub(h.AcquiredAt), 0).Seconds()}
			if h.Host != "" {
				host := h.Host
				hj.Host = &host
			}
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
