package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// palette colours the contenders in the settings' order (Tableau 10).
var palette = []string{"#4e79a7", "#e15759", "#f28e2b", "#76b7b2", "#59a14f",
	"#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// plot turns results into the figure: throughput against processes for
// counter and rw90, round trips for the pingpong cells and the time of an
// uncontended lock+unlock, each point the median with the range of the
// rounds around it.
func plot(res *Results) figure {
	color := map[string]string{}
	for i, name := range res.Settings.Contenders {
		color[name] = palette[i%len(palette)]
	}
	date := res.Date
	if t, err := time.Parse(time.RFC3339, res.Date); err == nil {
		date = t.UTC().Format("2006-01-02 15:04 UTC")
	}
	var probes []string
	for _, p := range res.Placement {
		if p.Error == "" {
			probes = append(probes, fmt.Sprintf("%.0f", p.Ns))
		}
	}
	fig := figure{
		Title: "Cross-process locks, worker processes on one machine",
		Notes: []string{
			fmt.Sprintf("%s; %s, %d CPUs; %s; median of %d alternating rounds, bars from min to max",
				date, res.Machine.CPU, res.Machine.CPUs, res.Machine.Kernel, res.Settings.Rounds),
			fmt.Sprintf("vCPU placement probe, cache-line round trip CPU 0 <-> CPU 1: %s ns", strings.Join(probes, ", ")),
		},
	}
	if res.Quick {
		fig.Title += " (QUICK RUN: numbers mean nothing)"
	}
	byProcs := func(workload, title string) panel {
		p := panel{ID: workload, Title: title, XLabel: "processes (the machine has " + fmt.Sprint(res.Machine.CPUs) + " CPUs)",
			YLabel: "ops/s, all processes (log)", Lines: true, Format: si}
		var cells []*Cell
		for i := range res.Cells {
			if res.Cells[i].Workload == workload {
				cells = append(cells, &res.Cells[i])
			}
		}
		slices.SortFunc(cells, func(a, b *Cell) int { return cmp.Compare(a.Procs, b.Procs) })
		for _, c := range cells {
			p.Categories = append(p.Categories, fmt.Sprint(c.Procs))
		}
		p.Series = seriesOf(res, cells, color, false)
		return p
	}
	counter := byProcs("counter", "counter: lock, increment, unlock")
	rw90 := byProcs("rw90", "rw90: 90% shared reads, 10% writes")
	pp := panel{ID: "pingpong", Title: "pingpong: strict turns between 2 processes", XLabel: "",
		YLabel: "round trips/s (log)", Format: si}
	var ppCells []*Cell
	for _, w := range []string{"pingpong", "pingpong_retry"} {
		for i := range res.Cells {
			if res.Cells[i].Workload == w {
				ppCells = append(ppCells, &res.Cells[i])
				pp.Categories = append(pp.Categories, fmt.Sprintf("%s (P=%d)", w, res.Cells[i].Procs))
			}
		}
	}
	pp.XLabel = "pingpong waits outside the lock; pingpong_retry inside"
	pp.Series = seriesOf(res, ppCells, color, false)
	un := panel{ID: "uncontended", Title: "uncontended: one process, lock+unlock", XLabel: "lower is faster",
		YLabel: "time per lock+unlock (log)", Format: duration}
	var unCells []*Cell
	for i := range res.Cells {
		if uncontended(res.Cells[i].Workload) {
			unCells = append(unCells, &res.Cells[i])
			un.Categories = append(un.Categories, res.Cells[i].Title())
		}
	}
	un.Series = seriesOf(res, unCells, color, true)
	for _, p := range []panel{counter, rw90, pp, un} {
		if len(p.Categories) > 0 {
			fig.Panels = append(fig.Panels, p)
		}
	}
	for _, name := range res.rowNames() {
		c := contenderOf(name)
		fig.Legend = append(fig.Legend, legendEntry{Name: name, About: c.About, Color: color[name], Bold: c.Ours})
	}
	return fig
}

// seriesOf is one series per contender that has a good run in any of
// cells, whose categories are the cells' indexes. With asTime, the values
// are nanoseconds per op instead of ops per second.
func seriesOf(res *Results, cells []*Cell, color map[string]string, asTime bool) []series {
	var out []series
	for _, name := range res.rowNames() {
		sr := series{Name: name, Color: color[name], Bold: contenderOf(name).Ours}
		for x, c := range cells {
			e := c.entry(name)
			if e == nil || len(e.Samples) == 0 {
				continue
			}
			xs := e.values()
			pt := point{X: x, Y: e.Median, Lo: slices.Min(xs), Hi: slices.Max(xs)}
			pt.Label = fmt.Sprintf("%s, %s: %s %s (%s to %s over %d rounds)", name, c.Title(), si(pt.Y), c.Unit, si(pt.Lo), si(pt.Hi), len(xs))
			if asTime {
				pt.Y, pt.Lo, pt.Hi = 1e9/pt.Y, 1e9/pt.Hi, 1e9/pt.Lo
				pt.Label = fmt.Sprintf("%s, %s: %s per lock+unlock (%s to %s over %d rounds)", name, c.Title(), duration(pt.Y), duration(pt.Lo), duration(pt.Hi), len(xs))
			}
			sr.Points = append(sr.Points, pt)
		}
		if len(sr.Points) > 0 {
			out = append(out, sr)
		}
	}
	return out
}

// contenderOf is the known contender of that name, or one that says only
// its name (results from an older list).
func contenderOf(name string) contender {
	for _, c := range contenders {
		if c.Name == name {
			return c
		}
	}
	return contender{Name: name, About: name}
}
