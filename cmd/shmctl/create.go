package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

type createOptions struct {
	IO *IOStreams

	Segment string         // as given: a path or a bare name
	Sizes   layout.Options // zero fields mean the defaults, negative ones none
	Group   bool           // --group: create the file 0660 for its group
	JSON    bool
}

func newCmdCreate(ios *IOStreams, runF func(*createOptions) error) *cobra.Command {
	opts := &createOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "create <segment>",
		Short: "Create a new segment",
		Long: `Create a new segment and print what info would print about it.

A size of 0 (the default) means the library default; a negative size
means no such table, and the commands that read or use that table (slots,
rwlocks, txns, locks, stats, lock, data) then fail on the segment, naming
it and its flag. The data area (--data) holds the named data regions that
processes claim (shm.Segment.Data; 'shmctl data' lists them). The command fails if the segment already exists.`,
		Example: `  shmctl create jobs
  shmctl create /dev/shm/jobs --slots 256 --upgrades -1 --group
  shmctl create jobs --data 1MiB --data-regions 8`,
		Args: exactArgs(1, "one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segment = args[0]
			if n := opts.Sizes.LockMgrEntries; n == 1 {
				// One entry is the table's header: room for no resource.
				return newUsageError(cmd, "--lockmgr-entries must be 2 or more (one entry is the table's header), 0 for the default, or negative for none; got 1")
			}
			// A size over its limit is the command line's fault, as one
			// that does not parse is: the layout the sizes ask for is
			// planned here, before anything is made.
			if _, err := layout.Plan(opts.Sizes.WithDefaults()); err != nil {
				return newUsageError(cmd, "%v", err)
			}
			opts.Group = groupFlag(cmd)
			if runF != nil {
				return runF(opts)
			}
			return runCreate(opts)
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Sizes.Slots, "slots", 0, fmt.Sprintf("owner slots (spinlocks); 0 means %d", layout.DefaultSlots))
	f.IntVar(&opts.Sizes.Upgrades, "upgrades", 0, fmt.Sprintf("upgrade mutexes; 0 means %d", layout.DefaultUpgrades))
	f.IntVar(&opts.Sizes.UpgradeReaders, "upgrade-readers", 0, fmt.Sprintf("reader records (reading processes) per upgrade mutex; 0 means %d", layout.DefaultUpgradeReaders))
	f.IntVar(&opts.Sizes.TxnRecords, "txn-records", 0, fmt.Sprintf("transaction records; 0 means %d", layout.DefaultTxnRecords))
	f.Var(sizeValue{&opts.Sizes.TxnArenaBytes}, "txn-arena", fmt.Sprintf("transaction arena `size` (bytes, or with a unit: 64KiB, 1MiB); 0 means %d bytes", layout.DefaultTxnArenaBytes))
	f.IntVar(&opts.Sizes.LockMgrEntries, "lockmgr-entries", 0, fmt.Sprintf("lock-manager entries; 0 means %d", layout.DefaultLockMgrEntries))
	f.IntVar(&opts.Sizes.ClaimRefs, "claim-refs", 0, "per-process references to named slots and mutexes; 0 means twice their number (at least 16)")
	f.Var(sizeValue{&opts.Sizes.DataBytes}, "data", fmt.Sprintf("data area `size` for named data regions (bytes, or with a unit: 64KiB, 1MiB); 0 means %d bytes, at most %d", layout.DefaultDataBytes, int64(layout.MaxDataBytes)))
	f.IntVar(&opts.Sizes.DataRegions, "data-regions", 0, fmt.Sprintf("data regions the segment can hold; 0 means %d (none without a data area)", layout.DefaultDataRegions))
	addJSONFlag(cmd, &opts.JSON)
	return cmd
}

func runCreate(opts *createOptions) error {
	seg, err := shm.Create(opts.Segment, shm.Options{Options: opts.Sizes, GroupAccess: opts.Group})
	if err != nil {
		return err
	}
	defer seg.Close()
	info, err := readInfo(seg, "create")
	if err != nil {
		return fmt.Errorf("created %s, but reading it back: %w", seg.Path(), err)
	}
	if opts.JSON {
		err = writeJSON(opts.IO.Out, info)
	} else {
		err = printInfo(opts.IO, info)
	}
	if err != nil {
		// The segment is made: a caller that sees only the write's error
		// takes it for not made, and a second create fails.
		return fmt.Errorf("created %s, but printing its info: %w", seg.Path(), err)
	}
	return nil
}

// jsonDocs is where --help sends a reader for the documents' fields: the
// file in the module's repository, which an installed binary lacks.
const jsonDocs = "docs/JSON.md at github.com/shmlock/shmlock"

// addJSONFlag adds the --json flag of every command that prints a
// document: its help names the schema and where every field is described.
func addJSONFlag(cmd *cobra.Command, v *bool) {
	cmd.Flags().BoolVar(v, "json", false, fmt.Sprintf("print a JSON document (schema %d; its fields: %s)", schemaVersion, jsonDocs))
}
