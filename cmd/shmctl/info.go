package main

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/shm"
)

type infoOptions struct {
	IO *IOStreams

	Segment string
	Group   bool // --group: the segment is shared with a group (shm.Options.GroupAccess)
	JSON    bool
}

func newCmdInfo(ios *IOStreams, runF func(*infoOptions) error) *cobra.Command {
	opts := &infoOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "info <segment>",
		Short: "Print a segment's header and tables",
		Long: `Print a segment's header: its size, when and by which process it was
created and whether that process is alive, the boot and PID namespace it
was made in, and each table with its offset, size and claimed entries (for
the data area: the 64-byte units its regions take; 'shmctl data' lists
them).

The segment is opened read-only, also when it was made in another PID
namespace, and nothing in it changes. Its processes then cannot be judged
by their pids here: the creator's liveness is "unknown".`,
		Example: `  shmctl info jobs
  shmctl info /dev/shm/jobs --json | jq .tables`,
		Args: exactArgs(1, "one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segment = args[0]
			opts.Group = groupFlag(cmd)
			if runF != nil {
				return runF(opts)
			}
			return runInfo(opts)
		},
	}
	addJSONFlag(cmd, &opts.JSON)
	return cmd
}

func runInfo(opts *infoOptions) error {
	// Reporting same_pid_namespace is part of the job, so a foreign
	// namespace is no reason to refuse here.
	seg, err := shm.Open(opts.Segment, shm.Options{ReadOnly: true, AllowForeignPIDNamespace: true, GroupAccess: opts.Group})
	if err != nil {
		return err
	}
	defer seg.Close()
	info, err := readInfo(seg, "info")
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, info)
	}
	return printInfo(opts.IO, info)
}

// printInfo prints info as key/value rows, each named by its JSON key
// (creator.pid for the creator's pid), then the table list.
func printInfo(ios *IOStreams, info *infoJSON) error {
	kv := newTablePrinter(ios)
	kv.AddRow("path", info.Path)
	kv.AddRow("format_version", info.FormatVersion)
	kv.AddRow("total_bytes", info.TotalBytes)
	kv.AddRow("created", ios.FormatTime(info.Created))
	kv.AddRow("creator.pid", info.Creator.PID)
	started := "-"
	if info.Creator.Started != nil {
		started = ios.FormatTime(*info.Creator.Started)
	}
	kv.AddRow("creator.started", started)
	kv.AddRow("creator.liveness", info.Creator.Liveness)
	kv.AddRow("boot_id", info.BootID)
	kv.AddRow("current_boot", info.CurrentBoot)
	kv.AddRow("pid_namespace", info.PIDNamespace)
	kv.AddRow("same_pid_namespace", info.SamePIDNamespace)
	kv.AddRow("group_access", info.GroupAccess)
	if err := kv.Render(); err != nil {
		return err
	}
	if ios.IsStdoutTTY() {
		if _, err := ios.Out.Write([]byte("\n")); err != nil {
			return err
		}
	}

	tables := newTablePrinter(ios, "KIND", "ENTRY_BYTES", "ENTRIES", "CAPACITY", "OFFSET", "BYTES", "CLAIMED")
	for _, t := range info.Tables {
		claimed := "-"
		if t.Claimed != nil {
			claimed = strconv.Itoa(*t.Claimed)
		}
		tables.AddRow(t.Kind, t.EntryBytes, t.Entries, t.Capacity, t.Offset, t.Bytes, claimed)
	}
	return tables.Render()
}
