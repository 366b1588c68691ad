package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/txn"
	"github.com/shmlock/shmlock/upgrade"
)

type reclaimOptions struct {
	IO *IOStreams

	Segment string
	Group   bool          // --group: the segment is shared with a group (shm.Options.GroupAccess)
	DryRun  bool          // list the dead owners, change nothing
	Force   bool          // reclaim on a segment that fails check
	Wait    time.Duration // how long a transaction's close may wait for live readers, and a slot's take-over or the claims' repair for the directory lock
	JSON    bool
}

// Actions reported for each dead owner.
const (
	actionReclaimed = "reclaimed"     // taken over and released
	actionDryRun    = "would reclaim" // --dry-run
	actionSkipped   = "skipped"       // the owner changed before the takeover
	actionTimedOut  = "timed out"     // a transaction's live readers kept their pins past --wait
)

// reclaimDefaultWait is how long, by default, the close of a reclaimed
// transaction waits for the pins of live readers, and the repair of the
// claims for the directory lock a live process holds.
const reclaimDefaultWait = 5 * time.Second

func newCmdReclaim(ios *IOStreams, runF func(*reclaimOptions) error) *cobra.Command {
	opts := &reclaimOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "reclaim <segment>",
		Short: "Free the locks and close the transactions whose holder died",
		Long: `Free every owner slot (spinlock) whose recorded owner is dead: a process
that exited, a pid that now names another process, or an owner recorded
under a previous boot. Each is taken over as a waiting lock would take it
(the generation advances, the recursion count is reset) and released at
once, so the slot is free. Slots with a live owner are never touched, nor
are token-mode locks, which record no process: a held one is reported
(on stderr, and in the JSON's token_slots), since whether its holder lives
cannot be known.

Likewise for the upgrade mutexes (see 'shmctl rwlocks'): a dead writer's
or upgrade holder's lock is released (a pending upgrade withdrawn, an
upgraded holder's unique lock too), and the reader records of dead
processes are freed with their shared holds. Live holders are never
touched.

And the lock-manager holds (see 'shmctl locks') whose TTL passed or whose
processes (and companion) died are ended, each listed with why; and the
references dead processes held to named slots and mutexes are dropped (a
name whose last reference goes is freed if its lock is free; one whose lock
was taken over here is kept, so that the next process to claim it is told
its data may be half-updated, until a claim finds no other room); should a
live process hold the directory's lock (one stopped mid-claim), reclaim
fails after --wait, naming it. The take-over of a dead holder's slot
whose claim says no mode needs that lock too (it records pid/tid with the
claim), and fails so as well, the slot left as it was.

Locks reclaim dead holders by themselves when someone waits for them; this
is for a segment nobody waits on, or a caller that only ever uses TryLock.
The data a reclaimed lock protects may be half-updated: this command cannot
repair it, and marks the lock inconsistent, so that every later holder is
told until one says it repaired the data (MarkConsistent).

Then every transaction (package txn) whose owner is dead is closed as its
owner would have: once the live readers' pins are released (waiting at
most --wait; "timed out" leaves it open, to be reclaimed again), its
promotions are finalized and its arena is freed. The pins of dead readers
never count. In a pipe, transaction rows start with the field "txn".

Before all that, reclaim finishes what killed removers of the segment
began. A remover killed between moving the segment's name aside and
removing the file (shmctl rm, a program's shm.Remove, libshmlock's
shmlock_remove) leaves it under a hidden name in the segment's directory,
.shmlock-rm-PID-...-NAME, cut off from the processes that open the name
anew. Once that remover is dead, such a file that processes still have
mapped or open is put back under the segment's name (unless the name is
taken: then it is left, and said so), and one nobody uses is removed, as
its remover meant to. A live remover's, another user's, and a file that is
no segment are left alone. The file of a creator killed before its
segment got its name (on a file system without O_TMPFILE, where it is made
under .shmlock-init-PID-...) is removed once that creator is dead, unless
someone has it mapped or open; a live creator's is left. So is the file of
a remover or creator of another PID namespace (the hidden name says which:
a container that shares the directory) that cannot be judged here, where
its pid means another process, or none. One of a namespace below this one
(a container's, seen from its host) is judged by its pid there, and, run
in the initial PID namespace, one whose namespace has no process left is
dead (see shmctl help rm). Each is a line on stderr (the JSON's
leftovers).

The segment is opened read-write; with --dry-run it is opened read-only,
and nothing changes.

The text output is the table of slots, then (after an empty line) the
table of upgrade mutexes, then the transactions, each only if it has rows.`,
		Example: `  shmctl reclaim jobs --dry-run
  shmctl reclaim /dev/shm/jobs --json`,
		Args: exactArgs(1, "one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Wait < 0 {
				return newUsageError(cmd, "--wait must not be negative, got %v", opts.Wait)
			}
			opts.Segment = args[0]
			opts.Group = groupFlag(cmd)
			if runF != nil {
				return runF(opts)
			}
			return runReclaim(opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.DryRun, "dry-run", "n", false, "list the dead owners without freeing anything")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "reclaim even on a segment that fails 'shmctl check'")
	cmd.Flags().DurationVar(&opts.Wait, "wait", reclaimDefaultWait, "how long a transaction's close may wait for live readers' pins, and a slot's take-over or the claims' repair for the directory lock a live process holds")
	addJSONFlag(cmd, &opts.JSON)
	return cmd
}

func runReclaim(opts *reclaimOptions) (err error) {
	leftovers, err := leftoversOf(opts.Segment, opts.DryRun)
	if err != nil {
		return err
	}
	// A leftover removed or put back stays so: a reclaim that fails
	// after (the segment not found, or refused as damaged) says so too,
	// before its error.
	defer func() {
		if err != nil {
			printLeftovers(opts.IO.ErrOut, leftovers)
		}
	}()
	// A dry run only reads, and a writable open is itself a change: the
	// first one after a reboot recovers the segment (every owner marked
	// stale, this boot recorded). Read-only, the owners of an earlier boot
	// read as stale all the same.
	seg, err := shm.Open(opts.Segment, shm.Options{ReadOnly: opts.DryRun, GroupAccess: opts.Group})
	if err != nil {
		return err
	}
	defer seg.Close()
	if err := refuseDamaged(seg, "--force", opts.Force || opts.DryRun); err != nil {
		return err
	}
	doc, err := reclaimDead(seg, opts.DryRun, opts.Wait)
	if err != nil {
		return err
	}
	doc.Txns, err = reclaimTxns(seg, opts.DryRun, opts.Wait)
	if err != nil {
		return err
	}
	if doc.Locks, err = reclaimLocks(seg, opts.DryRun); err != nil {
		return err
	}
	if doc.TokenSlots, err = heldTokenSlots(seg); err != nil {
		return err
	}
	if doc.Claims, err = reclaimClaims(seg, opts.DryRun, opts.Wait); err != nil {
		return err
	}
	doc.Leftovers = leftovers
	if opts.JSON {
		return writeJSON(opts.IO.Out, doc)
	}
	printLeftovers(opts.IO.ErrOut, leftovers)
	leftovers = nil // said: an error writing the tables does not say them again
	tty := opts.IO.IsStdoutTTY()
	for _, c := range doc.Claims {
		fmt.Fprintf(opts.IO.ErrOut, "%s %d references of dead process %d to %s[%d] %q\n", c.Action, c.Count, c.Process.PID, c.Table, c.Index, deref(c.Name))
	}
	if len(doc.Slots) == 0 && len(doc.RWLocks) == 0 && len(doc.Txns) == 0 && len(doc.Locks) == 0 && tty {
		fmt.Fprintf(opts.IO.ErrOut, "no owner slot, upgrade mutex, transaction or lock of %s has a dead owner\n", doc.Path)
		return nil
	}
	for _, ts := range doc.TokenSlots {
		// A damaged directory's name may hold control characters.
		fmt.Fprintf(opts.IO.ErrOut, "owner slot %d (%s) is held in token mode by a holder it does not record: not reclaimed\n", ts.Index, escapeControls(deref(ts.Name)))
	}
	if err := printReclaimedLocks(opts.IO, doc.Locks); err != nil {
		return err
	}
	if len(doc.Slots) > 0 {
		t := newTablePrinter(opts.IO, "INDEX", "NAME", "PID", "LIVENESS", "GENERATION", "NEW_GENERATION", "ACTION")
		for _, s := range doc.Slots {
			pid, liveness := processCells(s.Process)
			t.AddRow(s.Index, deref(s.Name), pid, liveness, s.Generation, orDash(s.NewGeneration), s.Action)
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	if len(doc.RWLocks) > 0 {
		if len(doc.Slots) > 0 {
			fmt.Fprintln(opts.IO.Out)
		}
		t := newTablePrinter(opts.IO, "INDEX", "NAME", "ROLE", "RECORD", "PID", "LIVENESS", "TID", "COUNT", "UNIQUE", "ACTION")
		for _, l := range doc.RWLocks {
			record := "-"
			if l.Record != nil {
				record = fmt.Sprint(*l.Record)
			}
			pid, liveness := processCells(l.Process)
			t.AddRow(l.Index, deref(l.Name), l.Role, record, pid, liveness, orDash(l.TID), l.Count, yesNo(l.Unique), l.Action)
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	if len(doc.Txns) == 0 {
		return nil
	}
	if (len(doc.Slots) > 0 || len(doc.RWLocks) > 0) && tty {
		fmt.Fprintln(opts.IO.Out)
	}
	t := newTablePrinter(opts.IO, "KIND", "INDEX", "GENERATION", "MODE", "PID", "LIVENESS", "ACTION")
	for _, x := range doc.Txns {
		pid, liveness := processCells(x.Process)
		t.AddRow("txn", x.Index, x.Generation, x.Mode, pid, liveness, x.Action)
	}
	return t.Render()
}

// reclaimClaims drops the references dead processes held to named slots
// and upgrade mutexes (shm.Segment.DropDeadClaims).
func reclaimClaims(seg *shm.Segment, dryRun bool, wait time.Duration) ([]reclaimClaimJSON, error) {
	// The directory's lock may be held by a live process that stopped
	// (SIGSTOP, a debugger) mid-claim: wait for it as long as for pins,
	// then say who holds it rather than hang.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	dropped, err := seg.DropDeadClaimsContext(ctx, dryRun)
	if err != nil {
		return nil, err
	}
	action := "dropped"
	if dryRun {
		action = "would drop"
	}
	out := []reclaimClaimJSON{}
	for _, d := range dropped {
		out = append(out, reclaimClaimJSON{Table: d.Kind.String(), Index: d.Index, Name: optName(d.Name, true),
			Process: processOf(seg, d.Owner), Count: d.Count, Action: action})
	}
	return out, nil
}

// heldTokenSlots lists the token-mode slots (as their claims say) that are
// held: their holder is a token, not a process, so whether it lives cannot
// be known, and reclaim never frees them.
func heldTokenSlots(seg *shm.Segment) ([]reclaimTokenJSON, error) {
	out := []reclaimTokenJSON{}
	claims, err := seg.Claims(layout.KindOwnerSlots)
	if err != nil {
		return nil, err
	}
	for _, c := range claims {
		if c.Use != spinlock.Token.ClaimUse() {
			continue
		}
		s, err := seg.Slot(c.Index)
		if err != nil {
			return nil, err
		}
		if tok := s.Token.Load(); tok != 0 {
			out = append(out, reclaimTokenJSON{Index: c.Index, Name: optName(c.Name, true), Token: idString(tok), Action: "not reclaimed: holder unknown"})
		}
	}
	return out, nil
}

// reclaimLocks ends the lock-manager holds of dead processes and the
// expired ones (see lockmgr.Manager.Reclaim).
func reclaimLocks(seg *shm.Segment, dryRun bool) ([]reclaimLockJSON, error) {
	out := []reclaimLockJSON{}
	if seg.Len(layout.KindLockMgr) == 0 {
		return out, nil
	}
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	if err != nil {
		return nil, err
	}
	ended, err := m.Reclaim(dryRun)
	if err != nil {
		return nil, err
	}
	action := "ended"
	if dryRun {
		action = "would end"
	}
	for _, h := range ended {
		out = append(out, reclaimLockJSON{Resource: h.Resource, Owner: h.Owner, Process: processOf(seg, h.Process), Why: h.Why, Action: action})
	}
	return out, nil
}

// printReclaimedLocks prints the lock-manager holds reclaim ended, if any,
// as a table of its own, on stderr's side of the others: it comes first.
func printReclaimedLocks(ios *IOStreams, locks []reclaimLockJSON) error {
	if len(locks) == 0 {
		return nil
	}
	t := newTablePrinter(ios, "RESOURCE", "OWNER", "PID", "LIVENESS", "WHY", "ACTION")
	for _, l := range locks {
		pid, liveness := processCells(l.Process)
		t.AddRow(l.Resource, l.Owner, pid, liveness, l.Why, l.Action)
	}
	if err := t.Render(); err != nil {
		return err
	}
	if ios.IsStdoutTTY() {
		fmt.Fprintln(ios.Out)
	}
	return nil
}

// reclaimTxns closes the transactions of seg whose owner is dead (unless
// dryRun), each waiting at most wait for the pins of live readers. A
// segment without transaction tables has none. A handle on the
// transactions (a pin row, the txn package's lock slots) is taken only if
// there is something to close.
func reclaimTxns(seg *shm.Segment, dryRun bool, wait time.Duration) ([]reclaimTxnJSON, error) {
	out := []reclaimTxnJSON{}
	snap, err := txn.Inspect(seg, false)
	if errors.Is(err, txn.ErrNoSpace) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the transactions: %w", err)
	}
	var sp *txn.Space
	defer func() {
		if sp != nil {
			_ = sp.Close()
		}
	}()
	for _, ti := range snap.Txns {
		if ti.Owner == 0 || ti.OwnerAlive {
			continue
		}
		x := reclaimTxnJSON{Index: ti.Index, Generation: idString(uint64(ti.Gen)), Mode: "pins", Process: processOf(seg, ti.Owner),
			Action: actionDryRun}
		if ti.Barrier {
			x.Mode = "barrier"
		}
		if !dryRun {
			if sp == nil {
				if sp, err = txn.Open(seg); err != nil {
					return nil, fmt.Errorf("opening the transactions: %w", err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			err := sp.Reclaim(ctx, ti.Index)
			cancel()
			switch {
			case err == nil:
				x.Action = actionReclaimed
			case errors.Is(err, txn.ErrOwnerAlive), errors.Is(err, txn.ErrClosed):
				x.Action = actionSkipped
			case errors.Is(err, context.DeadlineExceeded):
				x.Action = actionTimedOut
			default:
				return nil, fmt.Errorf("reclaiming transaction %d: %w", ti.Index, err)
			}
		}
		out = append(out, x)
	}
	return out, nil
}

// reclaimDead finds the owner slots of seg whose PID word names a dead or
// stale owner and, unless dryRun, takes each over and releases it.
//
// It leaves Pad, the sleeper count, alone, also on a slot it frees: a live
// waiter may be registered there, asleep on this very lock, and zeroing
// the count would make the next unlock skip the wake-up it needs (it would
// then only notice at its next liveness check). A count left too high by a
// dead sleeper costs an unneeded wake-up, never correctness.
func reclaimDead(seg *shm.Segment, dryRun bool, wait time.Duration) (*reclaimJSON, error) {
	claims, err := claimsByIndex(seg, layout.KindOwnerSlots, "slot")
	if err != nil {
		return nil, err
	}
	doc := &reclaimJSON{docHeader: header("reclaim"), Path: seg.Path(), DryRun: dryRun, Slots: []reclaimSlotJSON{}}
	for i := range seg.Len(layout.KindOwnerSlots) {
		slot, err := seg.Slot(i)
		if err != nil {
			return nil, err
		}
		owner := slot.PID.Load()
		if owner == 0 || seg.OwnerAlive(owner) {
			continue
		}
		c, claimed := claims[i]
		rs := reclaimSlotJSON{
			Index:      i,
			Name:       optName(c.Name, claimed),
			Process:    processOf(seg, owner),
			TID:        optID(slot.TID.Load()),
			Generation: idString(slot.Token.Load()),
			Action:     actionDryRun,
		}
		if !dryRun {
			gen, err := takeOverAndRelease(seg, i, wait)
			switch {
			case errors.Is(err, spinlock.ErrWouldBlock):
				rs.Action = actionSkipped
			case err != nil:
				return nil, fmt.Errorf("reclaiming slot %d: %w", i, err)
			default:
				g := idString(gen)
				rs.Action, rs.NewGeneration = actionReclaimed, &g
			}
		}
		doc.Slots = append(doc.Slots, rs)
	}
	rw, err := reclaimRWLocks(seg, dryRun)
	if err != nil {
		return nil, err
	}
	doc.RWLocks = rw
	return doc, nil
}

// reclaimRWLocks finds the dead and stale holders and reader records of
// every upgrade mutex of seg and, unless dryRun, frees them
// (upgrade.Reclaim): the writer's or upgrade holder's lock is released,
// a dead reader's shared holds dropped.
func reclaimRWLocks(seg *shm.Segment, dryRun bool) ([]reclaimRWLockJSON, error) {
	claims, err := claimsByIndex(seg, layout.KindUpgrades, "upgrade")
	if err != nil {
		return nil, err
	}
	rows := []reclaimRWLockJSON{}
	for i := range seg.Len(layout.KindUpgrades) {
		st, err := upgrade.Inspect(seg, i)
		if err != nil {
			return nil, err
		}
		c, claimed := claims[i]
		row := func(role string, owner, tid uint64) reclaimRWLockJSON {
			return reclaimRWLockJSON{Index: i, Name: optName(c.Name, claimed), Role: role, Process: processOf(seg, owner),
				TID: optID(tid), Action: actionDryRun}
		}
		var found []reclaimRWLockJSON
		if st.Writer != 0 && !seg.OwnerAlive(st.Writer) {
			found = append(found, row("writer", st.Writer, st.WriterTID))
		}
		if st.Upgrader != 0 && !seg.OwnerAlive(st.Upgrader) {
			r := row("upgrader", st.Upgrader, st.UpgraderTID)
			r.Unique = st.Unique()
			found = append(found, r)
		}
		for _, rd := range st.Readers {
			if seg.OwnerAlive(rd.Owner) {
				continue
			}
			r := row("reader", rd.Owner, 0)
			r.Record, r.Count = &rd.Record, rd.Count
			found = append(found, r)
		}
		if len(found) == 0 {
			continue
		}
		if !dryRun {
			rep, err := upgrade.Reclaim(seg, i, false)
			if err != nil {
				return nil, fmt.Errorf("reclaiming upgrade mutex %d: %w", i, err)
			}
			freed := make(map[int]upgrade.ReaderStatus, len(rep.Readers))
			for _, rd := range rep.Readers {
				freed[rd.Record] = rd
			}
			for k := range found {
				r := &found[k]
				r.Action = actionSkipped // changed meanwhile: a waiter repaired it, say
				id := proc.Identity{PID: r.Process.PID, StartTicks: r.Process.StartTicks}
				switch r.Role {
				case "writer":
					if rep.Writer != 0 && sameProcess(rep.Writer, id) {
						r.Action = actionReclaimed
					}
				case "upgrader":
					if rep.Upgrader != 0 && sameProcess(rep.Upgrader, id) {
						r.Action = actionReclaimed
					}
				default:
					if rd, ok := freed[*r.Record]; ok && sameProcess(rd.Owner, id) {
						r.Action, r.Count = actionReclaimed, rd.Count
					}
				}
			}
		}
		rows = append(rows, found...)
	}
	return rows, nil
}

// sameProcess reports whether the packed identity w names id, whether or
// not w is marked stale.
func sameProcess(w uint64, id proc.Identity) bool {
	got, _ := proc.Unpack(w)
	return got.PID == id.PID && got.StartTicks == id.StartTicks
}

// takeOverAndRelease reclaims slot i from its dead owner for a new holder
// of this process and releases it, and returns the generation the release
// left. spinlock.ErrWouldBlock if the slot has a live owner or none by now.
func takeOverAndRelease(seg *shm.Segment, i int, wait time.Duration) (uint64, error) {
	// The Open records pid/tid with a claim that says no mode, under the
	// claim directory's lock: a live process stopped mid-claim keeps it.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	l, err := spinlock.OpenContext(ctx, seg, i, spinlock.PIDTID)
	if err != nil {
		return 0, err
	}
	g, err := l.Reclaim(spinlock.NewHolder())
	if err != nil {
		return 0, err
	}
	// Only the holder changes the generation, and the release adds one.
	gen := l.Generation() + 1
	if err := g.Release(); err != nil {
		return 0, err
	}
	return gen, nil
}
