package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

type txnsOptions struct {
	IO *IOStreams

	Segment string
	Group   bool // --group: the segment is shared with a group (shm.Options.GroupAccess)
	All     bool // list every record, also free and closed ones
	JSON    bool
}

func newCmdTxns(ios *IOStreams, runF func(*txnsOptions) error) *cobra.Command {
	opts := &txnsOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "txns <segment>",
		Short: "List the transactions, their pins and arena use",
		Long: `List the transactions (package txn) of a segment that are open, closing
(waiting for pins) or finishing (drained, ending): for each its record
index, generation, state, close mode ("pins" for
per-transaction pins, "barrier" for the global close barrier), owner pid
and its liveness, arena size and bytes used, objects, promotions
registered on it, and the pins each process holds on it, as PID:COUNT, a
process that is not alive marked with its liveness, "(dead)": those no
longer count.
Readers of barrier-mode transactions take global pins, which belong to no
one transaction: --json lists them per process (global_pins).

A transaction whose owner is dead can be closed with 'shmctl reclaim'.

The segment is opened read-only and nothing in it changes. The words are
read one by one while other processes may change them.`,
		Example: `  shmctl txns jobs
  shmctl txns jobs --all --json`,
		Args: exactArgs(1, "one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segment = args[0]
			opts.Group = groupFlag(cmd)
			if runF != nil {
				return runF(opts)
			}
			return runTxns(opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.All, "all", "a", false, "list every record, also free and closed ones")
	addJSONFlag(cmd, &opts.JSON)
	return cmd
}

func runTxns(opts *txnsOptions) error {
	seg, err := openWithTables(opts.Segment, shm.Options{ReadOnly: true, GroupAccess: opts.Group}, layout.KindTxnRecords, layout.KindTxnArena)
	if err != nil {
		return err
	}
	defer seg.Close()
	doc, err := readTxns(seg, opts.All)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, doc)
	}
	t := newTablePrinter(opts.IO, "INDEX", "GENERATION", "STATE", "MODE", "PID", "LIVENESS", "ARENA_BYTES", "USED_BYTES",
		"OBJECTS", "PROMOTIONS", "PINS_BY_PROCESS")
	for _, x := range doc.Txns {
		pid, liveness := processCells(x.Process)
		pins := make([]string, 0, len(x.PinsByProcess))
		for _, p := range x.PinsByProcess {
			s := fmt.Sprintf("%d:%d", p.Process.PID, p.Pins)
			if p.Process.Liveness != livenessAlive {
				s += "(" + p.Process.Liveness + ")"
			}
			pins = append(pins, s)
		}
		pinCol := "-"
		if len(pins) > 0 {
			pinCol = strings.Join(pins, ",")
		}
		t.AddRow(x.Index, x.Generation, x.State, x.Mode, pid, liveness, x.ArenaBytes, x.UsedBytes, x.Objects, x.Promotions, pinCol)
	}
	return t.Render()
}

// readTxns builds the txns document from txn.Inspect.
func readTxns(seg *shm.Segment, all bool) (*txnsJSON, error) {
	snap, err := txn.Inspect(seg, all)
	if err != nil {
		return nil, fmt.Errorf("reading the transactions: %w", err)
	}
	doc := &txnsJSON{
		docHeader:     header("txns"),
		Path:          seg.Path(),
		Records:       snap.Records,
		DataBytes:     snap.DataUnits * layout.ArenaUnit,
		FreeBytes:     snap.FreeUnits * layout.ArenaUnit,
		BarrierLeader: processOf(seg, snap.BarrierLeader),
		Txns:          []txnJSON{},
		Processes:     []txnProcJSON{},
	}
	for _, ti := range snap.Txns {
		x := txnJSON{
			Index:         ti.Index,
			Generation:    idString(uint64(ti.Gen)),
			State:         ti.State.String(),
			Mode:          "pins",
			Process:       processOf(seg, ti.Owner),
			ArenaBytes:    ti.ArenaSize,
			UsedBytes:     ti.Used,
			Objects:       ti.Objects,
			Promotions:    ti.Promotions,
			Promoted:      ti.Promoted,
			Destroyed:     ti.Destroyed,
			PinsByProcess: []txnPinsJSON{},
		}
		if ti.ArenaSize != 0 {
			off := ti.ArenaStart
			x.ArenaOffset = &off
		}
		if ti.Barrier {
			x.Mode = "barrier"
		}
		for _, p := range ti.Pins {
			x.PinsByProcess = append(x.PinsByProcess, txnPinsJSON{Process: processOf(seg, p.Owner), Pins: p.Pins})
			if p.Alive {
				x.Pins += uint64(p.Pins)
			}
		}
		doc.Txns = append(doc.Txns, x)
	}
	for _, r := range snap.Rows {
		doc.Processes = append(doc.Processes, txnProcJSON{Row: r.Row, Process: processOf(seg, r.Owner),
			Pins: r.Pins, GlobalPins: r.GlobalPins})
	}
	return doc, nil
}
