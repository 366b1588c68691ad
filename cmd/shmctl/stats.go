package main

import (
	"strconv"

	"github.com/spf13/cobra"
)

type statsOptions struct {
	IO *IOStreams

	Segment string
	Group   bool // --group: the segment is shared with a group (shm.Options.GroupAccess)
	JSON    bool
	Etcd    etcdOptions // when on: the table in etcd, no segment
}

func newCmdStats(ios *IOStreams, runF func(*statsOptions) error) *cobra.Command {
	opts := &statsOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "stats <segment> | stats --etcd HOST:PORT[,...]",
		Short: "Show the statistics of the named resource locks (lockmgr)",
		Long: `Show the statistics of the segment's lock-manager table, over every process
that used it since it was created: holds granted (total_locks), holds now
live (active_locks), holds that expired (expired_locks: ended by their TTL,
or past it and not yet ended), acquisitions that met a conflict
(conflicts_detected), the mean length of the released holds
(average_hold_seconds), holds released and holds reclaimed from dead
processes, and the resources in the table against its capacity.

The segment is opened read-only and nothing in it changes. With --etcd
(or SHMLOCK_ETCD set), the statistics of the table in etcd are shown
instead (no segment), over every shmctl and program that used it: path is
then etcd://ENDPOINTS/PREFIX, capacity null (none), and reclaimed counts the
holds whose holder's etcd session ended (it died or lost etcd).`,
		Example: `  shmctl stats jobs
  shmctl stats jobs --json
  SHMLOCK_ETCD=10.0.0.1:2379 shmctl stats --json`,
		Args: segmentOrEtcd(&opts.Etcd),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				opts.Segment = args[0]
			}
			opts.Group = groupFlag(cmd)
			if runF != nil {
				return runF(opts)
			}
			return runStats(opts)
		},
	}
	addJSONFlag(cmd, &opts.JSON)
	addEtcdFlags(cmd, &opts.Etcd)
	return cmd
}

func runStats(opts *statsOptions) error {
	table, err := readTable(opts.Segment, opts.Group, &opts.Etcd)
	if err != nil {
		return err
	}
	st := table.ov.Stats
	doc := &statsJSON{docHeader: header("stats"), Path: table.where, TotalLocks: st.TotalLocks, ActiveLocks: st.ActiveLocks,
		ExpiredLocks: st.ExpiredLocks, ConflictsDetected: st.ConflictsDetected,
		AverageHoldSeconds: st.AverageHoldTime.Seconds(), Released: st.Released, Reclaimed: st.Reclaimed,
		Resources: st.Resources, Capacity: table.capacity, DeclaredOnly: table.ov.DeclaredOnly}
	if opts.JSON {
		return writeJSON(opts.IO.Out, doc)
	}
	t := newTablePrinter(opts.IO)
	t.AddRow("path", doc.Path)
	t.AddRow("total_locks", doc.TotalLocks)
	t.AddRow("active_locks", doc.ActiveLocks)
	t.AddRow("expired_locks", doc.ExpiredLocks)
	t.AddRow("conflicts_detected", doc.ConflictsDetected)
	t.AddRow("average_hold_seconds", strconv.FormatFloat(doc.AverageHoldSeconds, 'f', -1, 64))
	t.AddRow("released", doc.Released)
	t.AddRow("reclaimed", doc.Reclaimed)
	t.AddRow("resources", doc.Resources)
	t.AddRow("capacity", intCell(doc.Capacity))
	t.AddRow("declared_only", doc.DeclaredOnly)
	return t.Render()
}

// intCell prints a number that may be absent ("-").
func intCell(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}
