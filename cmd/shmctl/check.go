package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/txn"
	"github.com/shmlock/shmlock/upgrade"
)

type checkOptions struct {
	IO *IOStreams

	Segment string
	JSON    bool
	Group   bool
}

func newCmdCheck(ios *IOStreams, runF func(*checkOptions) error) *cobra.Command {
	opts := &checkOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "check <segment>",
		Short: "Validate every table entry of a segment, changing nothing",
		Long: `Validate every entry of every table of the segment without changing
anything (it is opened read-only): the claim directories (states, names,
references, claimers), the owner slots (identities, holder ids, recursion,
sleepers), the upgrade mutexes (state bits, holders, reader records, the
drain mask), the lock-manager table (kinds, names, hashes, modes, holder
chains), the transactions (states, owners, arenas) and the region directory
(names, and regions inside the data area, aligned, none overlapping). Each finding is one
line; the exit status is 1 if there is any. Holds of dead processes are
not damage ('shmctl reclaim' frees them), nor are claims that a claimant
killed in the middle of its claim left unfinished: each is one line
"note: ...", and the next claim reuses the entry.

It reads without locks: under traffic a finding may be a moment's, so
check a quiet segment, or check again. reclaim refuses a segment that
fails check unless --force, and unlock unless --ignore-check.`,
		Example: `  shmctl check jobs
  shmctl check /dev/shm/jobs --json`,
		Args: exactArgs(1, "one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segment = args[0]
			opts.Group = groupFlag(cmd)
			if runF != nil {
				return runF(opts)
			}
			return runCheck(opts)
		},
	}
	addJSONFlag(cmd, &opts.JSON)
	return cmd
}

func runCheck(opts *checkOptions) error {
	seg, err := shm.Open(opts.Segment, shm.Options{ReadOnly: true, GroupAccess: opts.Group})
	if err != nil {
		return err
	}
	defer seg.Close()
	found, err := checkSegment(seg)
	if err != nil {
		return err
	}
	notes, err := seg.AbandonedClaims()
	if err != nil {
		return err
	}
	if notes == nil {
		notes = []string{}
	}
	doc := checkJSON{docHeader: header("check"), Path: seg.Path(), OK: len(found) == 0, Findings: found, Notes: notes}
	if opts.JSON {
		if err := writeJSON(opts.IO.Out, doc); err != nil {
			return err
		}
	} else {
		for _, f := range found {
			fmt.Fprintln(opts.IO.Out, f)
		}
		for _, n := range notes {
			fmt.Fprintln(opts.IO.Out, "note: "+n)
		}
		if len(found) == 0 && opts.IO.IsStdoutTTY() {
			fmt.Fprintf(opts.IO.ErrOut, "%s: no damage found\n", seg.Path())
		}
	}
	if len(found) > 0 {
		return errSilent
	}
	return nil
}

// checkSegment runs every package's check on seg.
func checkSegment(seg *shm.Segment) ([]string, error) {
	found := []string{}
	add := func(f []string, err error) error {
		found = append(found, f...)
		return err
	}
	if err := add(seg.CheckDirectories()); err != nil {
		return nil, err
	}
	if seg.Len(layout.KindOwnerSlots) > 0 {
		if err := add(spinlock.Check(seg)); err != nil {
			return nil, err
		}
	}
	for i := range seg.Len(layout.KindUpgrades) {
		if err := add(upgrade.Check(seg, i)); err != nil {
			return nil, err
		}
	}
	if seg.Len(layout.KindLockMgr) > 0 {
		m, err := lockmgr.Open(seg, lockmgr.Options{})
		if err != nil {
			return nil, err
		}
		if err := add(m.Check()); err != nil {
			return nil, err
		}
	}
	if seg.Len(layout.KindTxnRecords) > 0 && seg.Len(layout.KindTxnArena) > 0 {
		if err := add(txn.Check(seg)); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// refuseDamaged is the check that reclaim and unlock make before they
// change a segment: a damaged one is refused (they would act on garbage)
// unless the command's flag override (reclaim's --force, unlock's
// --ignore-check: its --force means the force of a lock) is given, and
// the refusal names that flag.
func refuseDamaged(seg *shm.Segment, override string, given bool) error {
	if given {
		return nil
	}
	found, err := checkSegment(seg)
	if err != nil {
		return err
	}
	if len(found) > 0 {
		return fmt.Errorf("%w: %s fails check (%d findings, the first: %s); see 'shmctl check', or %s", errRefused, seg.Path(), len(found), strings.TrimSpace(found[0]), override)
	}
	return nil
}
