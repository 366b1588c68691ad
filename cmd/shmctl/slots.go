package main

import (
	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

type slotsOptions struct {
	IO *IOStreams

	Segment string
	Group   bool // --group: the segment is shared with a group (shm.Options.GroupAccess)
	All     bool // list every slot, not only those in use
	JSON    bool
}

func newCmdSlots(ios *IOStreams, runF func(*slotsOptions) error) *cobra.Command {
	opts := &slotsOptions{IO: ios}
	cmd := &cobra.Command{
		Use:     "slots <segment>",
		Aliases: []string{"spinlocks"}, // the package's noun
		Short:   "List the owner slots in use",
		Long: `List the owner slots (spinlocks) in use: claimed in the directory, or with
any field set. For each: its index, the name it was claimed under, its
claims (refs), its mode, the holding process's pid and its liveness
(alive, dead, or stale: recorded under a previous boot), the holder id
(tid), the holder's token (token mode) or the slot's generation (pid/tid
mode), the recursion count and the waiters.

Mode is the one spinlock.Named recorded; for a slot claimed otherwise it
is "pid/tid" when a pid is recorded, "token" when only the token word is
set, and "free" otherwise: a released pid/tid slot of that kind keeps
only its generation and so shows as "token".

The segment is opened read-only and nothing in it changes.`,
		Example: `  shmctl slots jobs
  shmctl slots jobs --all --json`,
		Args: exactArgs(1, "one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segment = args[0]
			opts.Group = groupFlag(cmd)
			if runF != nil {
				return runF(opts)
			}
			return runSlots(opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.All, "all", "a", false, "list every slot, also the unused ones")
	addJSONFlag(cmd, &opts.JSON)
	return cmd
}

func runSlots(opts *slotsOptions) error {
	// Unlike info, refuse a segment of another PID namespace: its pids
	// name other processes here, so alive/dead would be wrong.
	seg, err := openWithTables(opts.Segment, shm.Options{ReadOnly: true, GroupAccess: opts.Group}, layout.KindOwnerSlots)
	if err != nil {
		return err
	}
	defer seg.Close()
	doc, err := readSlots(seg, opts.All)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, doc)
	}
	return printSlots(opts.IO, doc)
}

// printSlots prints the slot table of slots and demo.
func printSlots(ios *IOStreams, doc *slotsJSON) error {
	t := newTablePrinter(ios, "INDEX", "NAME", "REFS", "MODE", "PID", "LIVENESS", "TID", "TOKEN", "GENERATION", "RECURSION", "WAITERS")
	for _, s := range doc.Slots {
		pid, liveness := processCells(s.Process)
		t.AddRow(s.Index, deref(s.Name), s.Refs, s.Mode, pid, liveness, orDash(s.TID), orDash(s.Token), orDash(s.Generation), s.Recursion, s.Waiters)
	}
	return t.Render()
}
