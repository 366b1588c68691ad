package main

import (
	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

type dataOptions struct {
	IO *IOStreams

	Segment string
	Group   bool // --group: the segment is shared with a group (shm.Options.GroupAccess)
	JSON    bool
}

// The tables data needs, for the message on a segment without them (see
// needtable.go). Registered here to keep the data command in one file.
func init() {
	tableNeeds[layout.KindData] = tableNeed{"data area", "--data", shm.ErrDataFull}
	tableNeeds[layout.KindRegionDirectory] = tableNeed{"region directory", "--data-regions", shm.ErrTableFull}
}

func newCmdData(ios *IOStreams, runF func(*dataOptions) error) *cobra.Command {
	opts := &dataOptions{IO: ios}
	cmd := &cobra.Command{
		Use:     "data <segment>",
		Aliases: []string{"regions"},
		Short:   "List the data regions",
		Long: `List the data regions of a segment: the named pieces of its data area
that hold the data its locks protect (shm.Segment.Data). For each: its
entry in the region directory (index), its name, where it starts in the
data area (offset, a multiple of 64) and its size (bytes). Regions are
claimed by the first process that names them and kept while the segment
exists; 'shmctl info' shows how much of the area they use.

The segment is opened read-only, also when it was made in another PID
namespace (regions record no process), and nothing in it changes.`,
		Example: `  shmctl data jobs
  shmctl regions jobs --json | jq '.regions[] | select(.name == "queue")'`,
		Args: exactArgs(1, "one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segment = args[0]
			opts.Group = groupFlag(cmd)
			if runF != nil {
				return runF(opts)
			}
			return runData(opts)
		},
	}
	addJSONFlag(cmd, &opts.JSON)
	return cmd
}

func runData(opts *dataOptions) error {
	seg, err := openWithTables(opts.Segment, shm.Options{ReadOnly: true, AllowForeignPIDNamespace: true, GroupAccess: opts.Group},
		layout.KindData, layout.KindRegionDirectory)
	if err != nil {
		return err
	}
	defer seg.Close()
	doc, err := readData(seg)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, doc)
	}
	t := newTablePrinter(opts.IO, "INDEX", "NAME", "OFFSET", "BYTES")
	for _, r := range doc.Regions {
		t.AddRow(r.Index, r.Name, r.Offset, r.Bytes)
	}
	return t.Render()
}

// readData gathers the data document of seg.
func readData(seg *shm.Segment) (*dataJSON, error) {
	size, used, err := seg.DataArea()
	if err != nil {
		return nil, err
	}
	regions, err := seg.Regions()
	if err != nil {
		return nil, err
	}
	doc := &dataJSON{docHeader: header("data"), Path: seg.Path(), AreaBytes: size, UsedBytes: used, FreeBytes: size - used,
		DirectoryEntries: seg.Len(layout.KindRegionDirectory), Regions: []regionJSON{}}
	for _, r := range regions {
		doc.Regions = append(doc.Regions, regionJSON{Index: r.Index(), Name: r.Name(), Offset: r.Offset(), Bytes: r.Len()})
	}
	return doc, nil
}

// dataUse sets the claimed count of info's row tj of table k: the regions
// of the region directory, and the units of the data area they take.
func dataUse(seg *shm.Segment, k layout.Kind, tj *tableJSON) error {
	if k != layout.KindRegionDirectory && k != layout.KindData {
		return nil
	}
	var n int
	if k == layout.KindRegionDirectory {
		regions, err := seg.Regions()
		if err != nil {
			return err
		}
		n = len(regions)
	} else {
		_, used, err := seg.DataArea()
		if err != nil {
			return err
		}
		n = used / layout.DataUnit
	}
	tj.Claimed = &n
	return nil
}
