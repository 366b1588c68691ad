package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

type rwlocksOptions struct {
	IO *IOStreams

	Segment string
	Group   bool // --group: the segment is shared with a group (shm.Options.GroupAccess)
	All     bool // list every upgrade mutex, not only those in use
	JSON    bool
}

// What an upgrade mutex is held as (rwlockJSON.Held).
const (
	heldFree          = "free"
	heldShared        = "shared"         // shared holds only
	heldUpgrade       = "upgrade"        // the upgrade lock, no shared holds
	heldUpgradeShared = "upgrade+shared" // the upgrade lock beside shared holds
	heldUnique        = "unique"         // a writer's unique lock
	heldUpgraded      = "upgraded"       // the upgrade holder's unique lock (UpgradeToUnique)
)

func newCmdRWLocks(ios *IOStreams, runF func(*rwlocksOptions) error) *cobra.Command {
	opts := &rwlocksOptions{IO: ios}
	cmd := &cobra.Command{
		Use:     "rwlocks <segment>",
		Aliases: []string{"upgrades"}, // the package's noun
		Short:   "List the upgrade mutexes (reader/writer locks) in use",
		Long: `List the upgrade mutexes (package upgrade) in use: claimed in the
directory, or with any holder, reader record or sleeper. For each: its
index, name and claims (refs); how it is held (free, shared, upgrade,
upgrade+shared, unique, or upgraded: the upgrade holder's unique lock);
its readers, as pid:holds for each reader record with holds or a dead
owner; the writer (holding or waiting for the unique lock) and the upgrade
holder, by pid; whether an upgrade is pending (new readers wait); the
sleepers on its gates (shared: readers and upgrade seekers, unique: a
writer or an upgrade draining readers, writer: writers queued for the
writers' mutex); and how many of its holders and reader records belong to
dead processes, which 'shmctl reclaim' frees. A process that is not alive
is marked with its liveness, "(dead)" or "(stale)", a writer still
waiting for readers or the upgrade lock "(waiting)".

The words are read one by one without a lock, so on a busy mutex the
fields may come from slightly different moments. The segment is opened
read-only and nothing in it changes.`,
		Example: `  shmctl rwlocks jobs
  shmctl rwlocks jobs --json | jq '.rwlocks[] | select(.dead > 0)'`,
		Args: exactArgs(1, "one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segment = args[0]
			opts.Group = groupFlag(cmd)
			if runF != nil {
				return runF(opts)
			}
			return runRWLocks(opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.All, "all", "a", false, "list every upgrade mutex, also the unused ones")
	addJSONFlag(cmd, &opts.JSON)
	return cmd
}

func runRWLocks(opts *rwlocksOptions) error {
	// As slots: pids of another PID namespace would be judged wrongly.
	seg, err := openWithTables(opts.Segment, shm.Options{ReadOnly: true, GroupAccess: opts.Group}, layout.KindUpgrades)
	if err != nil {
		return err
	}
	defer seg.Close()
	doc, err := readRWLocks(seg, opts.All)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, doc)
	}
	t := newTablePrinter(opts.IO, "INDEX", "NAME", "REFS", "HELD", "READERS", "WRITER", "UPGRADER", "PENDING",
		"SHARED_WAITERS", "UNIQUE_WAITERS", "WRITER_WAITERS", "DEAD")
	for _, l := range doc.RWLocks {
		writer := holderCell(l.Writer)
		if l.WriterWaiting {
			writer += " (waiting)"
		}
		t.AddRow(l.Index, deref(l.Name), l.Refs, l.Held, readersCell(l.Readers), writer, holderCell(l.Upgrader),
			yesNo(l.Pending), l.SharedWaiters, l.UniqueWaiters, l.WriterWaiters, l.Dead)
	}
	return t.Render()
}

// holderCell is a writer or upgrade holder in the table: "-", or its pid,
// marked if it is not alive.
func holderCell(h *holderJSON) string {
	if h == nil {
		return "-"
	}
	return pidCell(h.Process)
}

// readersCell lists the reader records with holds or a dead owner as
// pid:holds; idle records of live handles are left out.
func readersCell(rs []readerJSON) string {
	var cells []string
	for _, r := range rs {
		if r.Count == 0 && r.Process.Liveness == livenessAlive {
			continue
		}
		cells = append(cells, fmt.Sprintf("%s:%d", pidCell(r.Process), r.Count))
	}
	if len(cells) == 0 {
		return "-"
	}
	return strings.Join(cells, ",")
}

// readRWLocks gathers the upgrade mutexes of seg that are in use (claimed,
// or with any word or reader record set), or all of them.
func readRWLocks(seg *shm.Segment, all bool) (*rwlocksJSON, error) {
	byIndex, err := claimsByIndex(seg, layout.KindUpgrades, "upgrade")
	if err != nil {
		return nil, err
	}
	doc := &rwlocksJSON{docHeader: header("rwlocks"), Path: seg.Path(), RWLocks: []rwlockJSON{}}
	for i := range seg.Len(layout.KindUpgrades) {
		st, err := upgrade.Inspect(seg, i)
		if err != nil {
			return nil, err
		}
		c, claimed := byIndex[i]
		l := rwlockJSON{
			Index: i, Name: optName(c.Name, claimed), Refs: c.Refs,
			StateWord: st.State, WriteBit: st.WriteLocked, UpgradeBit: st.UpgradeLocked, Pending: st.UpgradePending,
			Writer:   holder(seg, st.Writer, st.WriterTID),
			Upgrader: holder(seg, st.Upgrader, st.UpgraderTID),
			Readers:  make([]readerJSON, 0, len(st.Readers)), ReaderRecords: st.ReaderRecords,
			SharedWaiters: st.SharedWaiters, UniqueWaiters: st.UniqueWaiters, WriterWaiters: st.WriterWaiters,
			Generation: idString(st.Generation), Handoff: st.Handoff, Inconsistent: st.Inconsistent,
		}
		for _, r := range st.Readers {
			rj := readerJSON{Record: r.Record, Process: processOf(seg, r.Owner), Count: r.Count}
			l.SharedHolds += uint64(r.Count)
			if rj.Process == nil || rj.Process.Liveness != livenessAlive {
				l.Dead++
			}
			l.Readers = append(l.Readers, rj)
		}
		for _, h := range []*holderJSON{l.Writer, l.Upgrader} {
			if h != nil && h.Process.Liveness != livenessAlive {
				l.Dead++
			}
		}
		l.Held = heldAs(st, l.SharedHolds)
		// The Writer word is the writers' own mutex: its holder has the
		// unique lock once it holds it in one CAS (the word's bit 61), or
		// once stateWrite is set (without stateUpgrade) and the readers
		// are gone.
		l.WriterWaiting = l.Writer != nil && l.Held != heldUnique
		inUse := claimed || st.State != 0 || l.Writer != nil || l.Upgrader != nil || len(l.Readers) > 0 ||
			st.SharedWaiters != 0 || st.UniqueWaiters != 0 || st.WriterWaiters != 0
		if inUse || all {
			doc.RWLocks = append(doc.RWLocks, l)
		}
	}
	return doc, nil
}

// heldAs names the mode st shows the mutex held in, with shared holds
// (possibly of dead readers) counted from its records.
func heldAs(st upgrade.Status, shared uint64) string {
	switch {
	case st.WriteLocked && shared == 0 && st.UpgradeLocked:
		return heldUpgraded
	case st.WriteLocked && shared == 0:
		return heldUnique
	case st.UpgradeLocked && shared != 0:
		return heldUpgradeShared
	case st.UpgradeLocked:
		return heldUpgrade
	case shared != 0:
		return heldShared // a writer or an upgrade may be draining them
	}
	return heldFree
}

// holder is the JSON of a recorded writer or upgrade holder; nil if none.
func holder(seg *shm.Segment, packed, tid uint64) *holderJSON {
	if packed == 0 {
		return nil
	}
	return &holderJSON{Process: processOf(seg, packed), TID: optID(tid)}
}
