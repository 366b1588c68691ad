package main

import (
	"fmt"
	"slices"
	"strings"
)

// A goal is one of the speed goals of the issue that asks where shmlock
// still trails (issue 20), judged on one cell of one run: a lock against
// the best of some others in each round (their per-round ratio of
// throughput must reach Min), or against a fixed bound (Absolute). The
// goals are written once here so that every sitting judges them the same
// way, on whatever host it ran: each row of the table says what the
// sitting measured, and "met" only if the median over the rounds reaches
// the goal.
type goal struct {
	What     string   // the goal, as the table words it
	Lock     string   // the contender judged
	Against  []string // per round, the best of these is the reference; nil for an absolute goal
	Workload string
	Procs    []int
	Min      float64 // the ratio to reach; for an absolute goal, ops/s to reach or (MaxNs) ns not to exceed
	MaxNs    float64 // an absolute bound on the time of one uncontended lock+unlock
}

var nonRobustMutexes = []string{"pthread_mutex", "boost_mutex"}
var rwlockPeers = []string{"pthread_rwlock", "boost_upgradable"}

// goals are issue 20's: for the spinlock, the upgrade mutex and the lock
// manager (the awaitable mutex has no cross-process cell in the matrix).
var goals = []goal{
	{What: "spinlock pingpong_retry at least pthread's robust mutex", Lock: "shmlock_spin", Against: []string{"pthread_mutex_robust"}, Workload: "pingpong_retry", Procs: []int{2}, Min: 1},
	{What: "the same, token mode", Lock: "shmlock_spin_token", Against: []string{"pthread_mutex_robust"}, Workload: "pingpong_retry", Procs: []int{2}, Min: 1},
	{What: "the same, libshmlock", Lock: "shmlock_spin_c", Against: []string{"pthread_mutex_robust"}, Workload: "pingpong_retry", Procs: []int{2}, Min: 1},
	{What: "token mode's pingpong_retry at least pid/tid mode's", Lock: "shmlock_spin_token", Against: []string{"shmlock_spin"}, Workload: "pingpong_retry", Procs: []int{2}, Min: 1},
	{What: "spinlock counter at least 1.5x the better non-robust mutex", Lock: "shmlock_spin", Against: nonRobustMutexes, Workload: "counter", Procs: []int{2, 4, 8}, Min: 1.5},
	{What: "the same, token mode", Lock: "shmlock_spin_token", Against: nonRobustMutexes, Workload: "counter", Procs: []int{2, 4, 8}, Min: 1.5},
	{What: "the same, libshmlock", Lock: "shmlock_spin_c", Against: nonRobustMutexes, Workload: "counter", Procs: []int{2, 4, 8}, Min: 1.5},
	{What: "upgrade mutex's unique lock, uncontended, no slower than pthread's rwlock", Lock: "shmlock_upgrade", Against: []string{"pthread_rwlock"}, Workload: "uncontended", Procs: []int{1}, Min: 1},
	{What: "the same, libshmlock", Lock: "shmlock_upgrade_c", Against: []string{"pthread_rwlock"}, Workload: "uncontended", Procs: []int{1}, Min: 1},
	{What: "upgrade mutex's shared lock, uncontended, no slower than pthread's rdlock", Lock: "shmlock_upgrade", Against: []string{"pthread_rwlock"}, Workload: "uncontended_shared", Procs: []int{1}, Min: 1},
	{What: "the same, libshmlock", Lock: "shmlock_upgrade_c", Against: []string{"pthread_rwlock"}, Workload: "uncontended_shared", Procs: []int{1}, Min: 1},
	{What: "upgrade mutex rw90 at least the best rwlock peer", Lock: "shmlock_upgrade", Against: rwlockPeers, Workload: "rw90", Procs: []int{2, 4, 8}, Min: 1},
	{What: "upgrade mutex counter at least the best rwlock peer", Lock: "shmlock_upgrade", Against: rwlockPeers, Workload: "counter", Procs: []int{2, 4, 8}, Min: 1},
	{What: "lock manager uncontended acquire+release at most 100 ns", Lock: "shmlock_lockmgr", Workload: "uncontended", Procs: []int{1}, MaxNs: 100},
	{What: "the same, libshmlock", Lock: "shmlock_lockmgr_c", Workload: "uncontended", Procs: []int{1}, MaxNs: 100},
	{What: "lock manager counter at least 7.4M ops/s", Lock: "shmlock_lockmgr", Workload: "counter", Procs: []int{2, 4, 8}, Min: 7.4e6},
	{What: "the same, libshmlock", Lock: "shmlock_lockmgr_c", Workload: "counter", Procs: []int{2, 4, 8}, Min: 7.4e6},
	{What: "lock manager rw90 at least 7.4M ops/s", Lock: "shmlock_lockmgr", Workload: "rw90", Procs: []int{2, 4, 8}, Min: 7.4e6},
	{What: "the same, libshmlock", Lock: "shmlock_lockmgr_c", Workload: "rw90", Procs: []int{2, 4, 8}, Min: 7.4e6},
}

// goalRow is one goal on one cell, as a sitting measured it.
type goalRow struct {
	What, Cell, Lock, Against string
	Values                    []float64 // per round: ratios, or ops/s, or ns
	Median                    float64
	Met                       bool
	Unit                      string // "x", "ops/s" or "ns"
}

// judge is g on cell c: nil if the cell lacks the lock or its references.
func (g goal) judge(c *Cell) *goalRow {
	e := c.entry(g.Lock)
	if e == nil || len(e.Samples) == 0 {
		return nil
	}
	row := &goalRow{What: g.What, Cell: c.Title(), Lock: g.Lock}
	switch {
	case g.MaxNs > 0:
		row.Unit, row.Against = "ns", "—"
		for _, s := range e.Samples {
			row.Values = append(row.Values, 1e9/s.OpsPerSec)
		}
		row.Median = median(row.Values)
		row.Met = row.Median <= g.MaxNs
	case g.Against == nil:
		row.Unit, row.Against = "ops/s", "—"
		row.Values = e.values()
		row.Median = median(row.Values)
		row.Met = row.Median >= g.Min
	default:
		row.Unit = "x"
		if len(g.Against) == 1 {
			row.Against = g.Against[0]
		} else {
			row.Against = "the better of " + strings.Join(g.Against, ", ")
		}
		best := map[int]float64{} // round -> the best reference's ops/s
		for _, name := range g.Against {
			ref := c.entry(name)
			if ref == nil || len(ref.Samples) == 0 {
				return nil
			}
			for _, s := range ref.Samples {
				best[s.Round] = max(best[s.Round], s.OpsPerSec)
			}
		}
		for _, s := range e.Samples {
			if r := best[s.Round]; r > 0 {
				row.Values = append(row.Values, s.OpsPerSec/r)
			}
		}
		if len(row.Values) == 0 {
			return nil
		}
		row.Median = median(row.Values)
		row.Met = row.Median >= g.Min
	}
	return row
}

// goalRows are the rows of every goal whose cells the run has, in the
// order of the goals, then of their process counts.
func (res *Results) goalRows() []goalRow {
	var rows []goalRow
	for _, g := range goals {
		for _, p := range g.Procs {
			i := slices.IndexFunc(res.Cells, func(c Cell) bool { return c.Workload == g.Workload && c.Procs == p })
			if i < 0 {
				continue
			}
			if row := g.judge(&res.Cells[i]); row != nil {
				rows = append(rows, *row)
			}
		}
	}
	return rows
}

// writeGoals writes the goals' table: per goal and cell, the per-round
// values as min-max (median), and whether the median meets the goal.
func (res *Results) writeGoals(b *strings.Builder) {
	rows := res.goalRows()
	if len(rows) == 0 {
		return
	}
	b.WriteString("\nThe speed goals of issue 20, judged on this run (bench/matrix/goals.go): per round, the lock's throughput over the best reference's in the same round (or the lock's own figure, for a fixed bound), min-max (median); met: the median reaches the goal.\n\n")
	b.WriteString("| goal | cell | lock | against | per round | met |\n|---|---|---|---|---:|---|\n")
	for _, r := range rows {
		lo, hi := slices.Min(r.Values), slices.Max(r.Values)
		var span string
		switch r.Unit {
		case "ns":
			span = fmt.Sprintf("%s-%s (%s)", duration(lo), duration(hi), duration(r.Median))
		case "ops/s":
			span = fmt.Sprintf("%s-%s (%s)", si(lo), si(hi), si(r.Median))
		default: // the median to three places: 1.00x beside "no" would read as a contradiction
			span = fmt.Sprintf("%.2f-%.2fx (%.3fx)", lo, hi, r.Median)
		}
		met := "no"
		if r.Met {
			met = "yes"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", r.What, r.Cell, r.Lock, r.Against, span, met)
	}
}
