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

// infoJSONHelp names the fields of infoJSON for --help.
const infoJSONHelp = `JSON fields: path, version, total_size, created, creator {pid, start_ticks,
started, state, alive}, boot_id, current_boot, pid_namespace,
same_pid_namespace, group_access, tables [{kind, entry_size, count, offset,
size, claimed}]; claimed is the claimed entries of owner_slots, upgrades and
region_directory, the 64-byte units regions take of data, and null for the
other tables.`

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
namespace, and nothing in it changes.

` + infoJSONHelp,
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
	info, err := readInfo(seg)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, info)
	}
	return printInfo(opts.IO, info)
}

// printInfo prints info as key/value rows, keys named as in the JSON,
// then the table list.
func printInfo(ios *IOStreams, info *infoJSON) error {
	kv := newTablePrinter(ios)
	kv.AddRow("path", info.Path)
	kv.AddRow("version", info.Version)
	kv.AddRow("total_size", info.TotalSize)
	kv.AddRow("created", ios.FormatTime(info.Created))
	kv.AddRow("creator_pid", info.Creator.PID)
	started := "-"
	if info.Creator.Started != nil {
		started = ios.FormatTime(*info.Creator.Started)
	}
	kv.AddRow("creator_started", started)
	kv.AddRow("creator_state", info.Creator.State)
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

	tables := newTablePrinter(ios, "KIND", "ENTRY_SIZE", "COUNT", "OFFSET", "SIZE", "CLAIMED")
	for _, t := range info.Tables {
		claimed := "-"
		if t.Claimed != nil {
			claimed = strconv.Itoa(*t.Claimed)
		}
		tables.AddRow(t.Kind, t.EntrySize, t.Count, t.Offset, t.Size, claimed)
	}
	return tables.Render()
}
