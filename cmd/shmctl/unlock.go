package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

// The kinds of lock unlock --force frees.
const (
	unlockSlot     = "slot"
	unlockUpgrade  = "upgrade"
	unlockResource = "resource"
)

type unlockOptions struct {
	IO *IOStreams

	Segment string
	Name    string
	Kind    string // "" to find it by name
	Force   bool
	// IgnoreCheck unlocks on a segment that fails check.
	IgnoreCheck bool
	JSON        bool
	Group       bool
	// HoldFor and Owner name a hold of a resource to release, kept for a
	// process by 'shmctl lock --hold-for' or taken under an owner name.
	HoldFor int
	Owner   string
	// Wait bounds the wait of --force: on a pid/tid slot or an upgrade
	// mutex for another force of it in progress, on a resource for its
	// entry lock, on a slot whose claim says no mode for the claim
	// directory's lock too.
	Wait time.Duration
}

func newCmdUnlock(ios *IOStreams, runF func(*unlockOptions) error) *cobra.Command {
	opts := &unlockOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "unlock <segment> <name> (--hold-for PID | --owner NAME | --force [--kind slot|upgrade|resource])",
		Short: "Release a hold kept for a shell, or free a lock an operator names",
		Long: `With --hold-for PID, release the hold of resource NAME that 'shmctl lock
--hold-for PID' took for that process (the same process: a later one with
the same pid is another owner); with --owner, the hold of that owner. A
hold that is released this way ended as its owner meant, so the resource
is marked consistent first: after SHMLOCK_RECLAIMED=1, reaching the unlock
says the data was repaired. It is an error if the owner holds no lock on
NAME.

With --force, free the named lock whoever holds it, alive or not: an owner slot
(spinlock), an upgrade mutex (every hold: writer, upgrade holder, readers),
or a lock-manager resource (every holder). It is for a holder that is stuck
but alive, which reclaim never touches: a dead holder's lock is freed by
its waiters, or by 'shmctl reclaim'. Only holds are freed: an upgrade
mutex's writer or upgrade seeker that waits (for the stuck holder, most
often) is left to go on, and gets the lock next ("left waiting").

The lock's generation (version) advances past every token its holders had,
so their fencing tokens are stale, their own later releases fail with a
not-owner error, and the lock is marked inconsistent: its next holders are
told until one repairs the data and says so. --force is required. The name
is looked up among the slots, the upgrade mutexes and the resources;
--kind picks one where it names several. A segment that fails 'shmctl
check' is refused unless --ignore-check.

Two forces of one pid/tid slot or upgrade mutex never overlap: a force
waits for another in progress (of any process) to end, at most --wait,
then fails saying so (a force that stopped, or sits in a debugger, mid-way
holds the others off for as long). A force of a resource waits, at most
--wait too, for the resource's entry lock, which a process holds for a few
instructions of each lock-manager call: only one stopped (or in a
debugger) inside such a call keeps it, and the force then fails naming
that process's pid. A force of a slot whose claim says no mode records
pid/tid with it (as an open of the slot does), under the claim directory's
lock: it waits for that lock at most --wait too, which only a process
stopped mid-claim keeps, and then fails naming that process.`,
		Example: `  shmctl unlock jobs deploy --hold-for $$
  shmctl unlock jobs queue --force
  shmctl unlock jobs deploy --force --kind resource --json`,
		Args: exactArgs(2, "a segment and a lock's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segment, opts.Name = args[0], args[1]
			opts.Group = groupFlag(cmd)
			holdFor, owner := cmd.Flags().Changed("hold-for"), cmd.Flags().Changed("owner")
			holds := holdFor || owner
			switch {
			case holds && opts.Force:
				return newUsageError(cmd, "--force frees a lock whoever holds it: --hold-for and --owner name one holder")
			case holdFor && owner:
				return newUsageError(cmd, "--hold-for and --owner exclude each other")
			case holds && (opts.Kind != "" && opts.Kind != unlockResource || opts.IgnoreCheck || opts.JSON || cmd.Flags().Changed("wait")):
				return newUsageError(cmd, "--kind, --ignore-check, --json and --wait go with --force")
			case opts.Wait < 0:
				return newUsageError(cmd, "--wait must not be negative, got %v", opts.Wait)
			case holdFor && opts.HoldFor <= 0:
				return newUsageError(cmd, "--hold-for: %d is not a process id", opts.HoldFor)
			case holds:
				// As for lock, a name no hold can have is a usage error
				// (status 2), found before the segment is opened.
				if err := lockmgr.CheckResource(opts.Name); err != nil {
					return newUsageError(cmd, "resource %q: %v", opts.Name, err)
				}
				if owner {
					if err := lockmgr.CheckOwner(opts.Owner); err != nil {
						return newUsageError(cmd, "--owner %q: %v", opts.Owner, err)
					}
				}
				if runF != nil {
					return runF(opts)
				}
				return runReleaseHold(opts)
			case !opts.Force:
				return newUsageError(cmd, "unlock frees a lock another process may still use: say --force (or --hold-for PID, --owner NAME for a hold of yours)")
			}
			switch opts.Kind {
			case "", unlockSlot, unlockUpgrade, unlockResource:
			default:
				return newUsageError(cmd, "--kind must be %s or %s, got %q", unlockSlot+", "+unlockUpgrade, unlockResource, opts.Kind)
			}
			if runF != nil {
				return runF(opts)
			}
			return runUnlock(opts)
		},
	}
	cmd.Flags().IntVar(&opts.HoldFor, "hold-for", 0, "release the hold 'shmctl lock --hold-for PID' took for process PID")
	cmd.Flags().StringVar(&opts.Owner, "owner", "", "release this owner's hold of the resource")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "free the lock whoever holds it")
	cmd.Flags().StringVar(&opts.Kind, "kind", "", "slot, upgrade or resource, where the name names several")
	cmd.Flags().BoolVar(&opts.IgnoreCheck, "ignore-check", false, "unlock even on a segment that fails 'shmctl check'")
	cmd.Flags().DurationVar(&opts.Wait, "wait", unlockDefaultWait, "how long --force waits for another force of a slot or an upgrade mutex in progress, or for a resource's entry lock or the claim directory's lock")
	addJSONFlag(cmd, &opts.JSON)
	return cmd
}

func runUnlock(opts *unlockOptions) error {
	seg, err := shm.Open(opts.Segment, shm.Options{GroupAccess: opts.Group})
	if err != nil {
		return err
	}
	defer seg.Close()
	if err := refuseDamaged(seg, "--ignore-check", opts.IgnoreCheck); err != nil {
		return err
	}
	kind, err := unlockKind(seg, opts.Name, opts.Kind)
	if err != nil {
		return err
	}
	doc := unlockJSON{docHeader: header("unlock"), Path: seg.Path(), Kind: kind, Name: opts.Name, Holders: []unlockHolderJSON{}, Waiting: []unlockHolderJSON{}, Action: "freed"}
	// One --wait bounds every wait of the force (see Wait).
	ctx, cancel := context.WithTimeout(context.Background(), opts.Wait)
	defer cancel()
	switch kind {
	case unlockSlot:
		err = forceSlot(ctx, seg, opts.Name, &doc)
	case unlockUpgrade:
		err = forceUpgrade(ctx, seg, opts.Name, &doc)
	default:
		err = forceResource(ctx, seg, opts.Name, &doc)
	}
	if err != nil {
		return err
	}
	if len(doc.Holders) == 0 {
		doc.Action = "was free"
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, doc)
	}
	t := newTablePrinter(opts.IO, "KIND", "NAME", "HOLDERS", "GENERATION", "ACTION")
	holders := "-"
	if len(doc.Holders) > 0 {
		cells := make([]string, len(doc.Holders))
		for i, h := range doc.Holders {
			cells[i] = h.text()
		}
		holders = fmt.Sprint(cells)
	}
	action := doc.Action
	for _, h := range doc.Waiting {
		action += "; left waiting " + h.text()
	}
	t.AddRow(doc.Kind, doc.Name, holders, orDash(doc.Generation), action)
	return t.Render()
}

// unlockKind finds which kind of lock name is: the one asked for, or the
// only one the segment has under that name.
func unlockKind(seg *shm.Segment, name, want string) (string, error) {
	var found []string
	if _, err := seg.Lookup(layout.KindOwnerSlots, name); err == nil {
		found = append(found, unlockSlot)
	}
	if _, err := seg.Lookup(layout.KindUpgrades, name); err == nil {
		found = append(found, unlockUpgrade)
	}
	if seg.Len(layout.KindLockMgr) > 0 && len(name) <= lockmgr.MaxResourceLen {
		if m, err := lockmgr.Open(seg, lockmgr.Options{}); err == nil {
			for _, ri := range m.List() {
				if ri.Resource == name {
					found = append(found, unlockResource)
					break
				}
			}
		}
	}
	for _, k := range found {
		if k == want || want == "" && len(found) == 1 {
			return k, nil
		}
	}
	switch {
	case len(found) == 0 || want != "":
		what := want
		if what == "" {
			what = "lock"
		}
		return "", fmt.Errorf("%w: no %s named %q in %s", shm.ErrNotFound, what, name, seg.Path())
	}
	return "", fmt.Errorf("%w: %q names a %s in %s: say which with --kind", errAmbiguous, name, orList(found), seg.Path())
}

var errAmbiguous = errors.New("ambiguous name")

func forceSlot(ctx context.Context, seg *shm.Segment, name string, doc *unlockJSON) error {
	i, err := seg.Lookup(layout.KindOwnerSlots, name)
	if err != nil {
		return err
	}
	mode, said := spinlock.PIDTID, false
	if claims, err := claimsByIndex(seg, layout.KindOwnerSlots, "owner slots"); err == nil {
		var m spinlock.Mode
		if m, said = spinlock.ModeOfClaimUse(claims[i].Use); said {
			mode = m
		}
	}
	if slot, err := seg.Slot(i); !said && err == nil && slot.PID.Load() == 0 {
		// A claim that says no mode, and no pid/tid holder: nothing a
		// force can free, and an Open would record a mode (spinlock.Open)
		// that token-mode users of the slot would then be refused.
		gen := idString(slot.Token.Load())
		doc.Generation = &gen
		return nil
	}
	// ctx bounds both waits: the Open's, for the claim directory's lock
	// when it records pid/tid with a claim that says no mode, and the
	// force's, for another force of the slot.
	l, err := spinlock.OpenContext(ctx, seg, i, mode)
	if err != nil {
		return err
	}
	owner, err := l.ForceUnlockContext(ctx)
	switch {
	case errors.Is(err, spinlock.ErrNotHeld):
	case err != nil:
		return err
	case mode == spinlock.Token:
		doc.Holders = append(doc.Holders, unlockHolderJSON{Role: unlockRoleHolder, Token: optID(owner.Token)})
	default:
		doc.Holders = append(doc.Holders, unlockHolderJSON{Role: unlockRoleHolder, Process: processOf(seg, owner.PID), TID: optID(owner.TID)})
	}
	if mode != spinlock.Token { // a token-mode slot has no generation
		gen := idString(l.Generation())
		doc.Generation = &gen
	}
	return nil
}

// unlockDefaultWait is how long, by default, a force of a pid/tid slot or
// an upgrade mutex waits for another force of it in progress, and a force
// of a resource for its entry lock: a running holder of either lets go
// within microseconds.
const unlockDefaultWait = 5 * time.Second

func forceUpgrade(ctx context.Context, seg *shm.Segment, name string, doc *unlockJSON) error {
	i, err := seg.Lookup(layout.KindUpgrades, name)
	if err != nil {
		return err
	}
	f, err := upgrade.ForceUnlockContext(ctx, seg, i)
	if err != nil {
		return err
	}
	if f.Writer != 0 {
		doc.Holders = append(doc.Holders, unlockHolderJSON{Role: unlockRoleWriter, Process: processOf(seg, f.Writer)})
	}
	if f.Upgrader != 0 {
		doc.Holders = append(doc.Holders, unlockHolderJSON{Role: unlockRoleUpgrader, Process: processOf(seg, f.Upgrader)})
	}
	for _, r := range f.Readers {
		doc.Holders = append(doc.Holders, unlockHolderJSON{Role: unlockRoleReader, Process: processOf(seg, r.Owner), Count: &r.Count})
	}
	if f.WaitingWriter != 0 {
		doc.Waiting = append(doc.Waiting, unlockHolderJSON{Role: unlockRoleWriter, Process: processOf(seg, f.WaitingWriter)})
	}
	if f.WaitingUpgrader != 0 {
		doc.Waiting = append(doc.Waiting, unlockHolderJSON{Role: unlockRoleUpgrader, Process: processOf(seg, f.WaitingUpgrader)})
	}
	st, err := upgrade.Inspect(seg, i)
	if err != nil {
		return err
	}
	gen := idString(st.Generation)
	doc.Generation = &gen
	return nil
}

func forceResource(ctx context.Context, seg *shm.Segment, name string, doc *unlockJSON) error {
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	if err != nil {
		return err
	}
	ended, err := m.ForceReleaseContext(ctx, name)
	if err != nil {
		return err
	}
	for _, h := range ended {
		doc.Holders = append(doc.Holders, unlockHolderJSON{Role: unlockRoleHolder, Owner: &h.Owner, Process: processOf(seg, h.Process)})
	}
	ri, err := m.Inspect(name)
	if err != nil {
		return err
	}
	gen := idString(ri.Version)
	doc.Generation = &gen
	return nil
}
