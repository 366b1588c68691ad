package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// si writes x with three significant digits and a k, M or G suffix.
func si(x float64) string {
	for _, u := range []struct {
		div    float64
		suffix string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""}} {
		if math.Abs(x) >= u.div*0.9995 || u.div == 1 {
			return sig3(x/u.div) + u.suffix
		}
	}
	panic("unreachable")
}

// sig3 writes x with three significant digits (no exponent).
func sig3(x float64) string {
	switch ax := math.Abs(x); {
	case ax >= 99.95:
		return fmt.Sprintf("%.0f", x)
	case ax >= 9.995:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

// duration writes nanoseconds as ns or µs.
func duration(ns float64) string {
	if ns >= 999.5 {
		return sig3(ns/1000) + " µs"
	}
	return sig3(ns) + " ns"
}

// header is the lines above the table: when, where, with what, and the
// placement probe.
func (res *Results) header() string {
	var b strings.Builder
	date := res.Date
	if t, err := time.Parse(time.RFC3339, res.Date); err == nil {
		date = t.UTC().Format("2006-01-02 15:04 UTC")
	}
	fmt.Fprintf(&b, "Measured %s by `%s` (commit %s).\n", date, res.Command, res.Commit)
	m := res.Machine
	kind := "machine"
	if m.Virtual {
		kind = "virtual machine"
	}
	fmt.Fprintf(&b, "Machine: %s, %d CPUs (%s), %s; load average %.2f at the start, %.2f at the end.\n",
		m.CPU, m.CPUs, kind, m.Kernel, m.LoadAvgStart[0], m.LoadAvgEnd[0])
	v := res.Versions
	fmt.Fprintf(&b, "Toolchain: %s; %s; glibc %s; Boost %s.\n", v.Go, v.CC, v.Glibc, v.Boost)
	var ns []string
	for _, p := range res.Placement {
		if p.Error != "" {
			ns = append(ns, "failed")
		} else {
			ns = append(ns, fmt.Sprintf("%.0f", p.Ns))
		}
	}
	fmt.Fprintf(&b, "vCPU placement (cache-line round trip between CPU 0 and CPU 1, before each round and at the end): %s ns.\n",
		strings.Join(ns, ", "))
	rounds := fmt.Sprintf("%d rounds", res.Settings.Rounds)
	if res.Settings.Rounds == 1 {
		rounds = "1 round"
	}
	fmt.Fprintf(&b, "%s; in each, every lock ran every cell once (about %.2g s a run), in an order rotated each round.\n",
		rounds, res.Settings.TargetSeconds)
	if len(res.Missing) > 0 {
		fmt.Fprintf(&b, "Not built: %s.\n", strings.Join(res.Missing, "; "))
	}
	if res.Quick {
		b.WriteString("QUICK RUN: too short to mean anything.\n")
	}
	return b.String()
}

// references says which contender each cell's ratios divide by.
func (res *Results) references() string {
	byRef := map[string][]string{}
	var order []string
	for _, c := range res.Cells {
		if c.Reference == "" {
			continue
		}
		if _, ok := byRef[c.Reference]; !ok {
			order = append(order, c.Reference)
		}
		byRef[c.Reference] = append(byRef[c.Reference], fmt.Sprintf("%s:%d", c.Workload, c.Procs))
	}
	if len(order) == 1 {
		return order[0]
	}
	var parts []string
	for _, r := range order {
		parts = append(parts, fmt.Sprintf("%s for %s", r, strings.Join(byRef[r], ", ")))
	}
	return strings.Join(parts, "; ")
}

// rowNames are the contenders in the results, in the settings' order.
func (res *Results) rowNames() []string {
	var names []string
	for _, name := range res.Settings.Contenders {
		for _, c := range res.Cells {
			if slices.ContainsFunc(c.Entries, func(e Entry) bool { return e.Name == name }) {
				names = append(names, name)
				break
			}
		}
	}
	return names
}

func (c *Cell) entry(name string) *Entry {
	for i := range c.Entries {
		if c.Entries[i].Name == name {
			return &c.Entries[i]
		}
	}
	return nil
}

func (c *Cell) column() string {
	if uncontended(c.Workload) {
		return fmt.Sprintf("%s P=%d (time per lock+unlock)", c.Workload, c.Procs)
	}
	return fmt.Sprintf("%s P=%d (%s)", c.Workload, c.Procs, c.Unit)
}

// hasCPUs reports whether any entry knows its busy CPUs (results from
// before the contract had cpu_seconds do not).
func (res *Results) hasCPUs() bool {
	for _, c := range res.Cells {
		for _, e := range c.Entries {
			if e.CPUs > 0 {
				return true
			}
		}
	}
	return false
}

// writeMarkdown writes the header, the table of medians with their ratios,
// the table of spreads and, where the drivers said, the busy CPUs.
func (res *Results) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString(res.header())
	fmt.Fprintf(&b, "\nMedian over the rounds; in parentheses, the speed against %s (the median of the per-round ratios of throughput: above 1 is faster). — : the lock has no such workload.\n\n",
		res.references())
	table := func(cellText func(c *Cell, e *Entry) string) {
		b.WriteString("| lock |")
		for _, c := range res.Cells {
			b.WriteString(" " + c.column() + " |")
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(res.Cells)) + "\n")
		for _, name := range res.rowNames() {
			b.WriteString("| " + name + " |")
			for i := range res.Cells {
				c := &res.Cells[i]
				text := "—"
				if e := c.entry(name); e != nil {
					text = cellText(c, e)
				}
				b.WriteString(" " + text + " |")
			}
			b.WriteString("\n")
		}
	}
	table(func(c *Cell, e *Entry) string {
		if len(e.Samples) == 0 {
			return "FAILED"
		}
		v := si(e.Median)
		if uncontended(c.Workload) {
			v = duration(e.NsPerOp)
		}
		if e.Ratio > 0 {
			v += fmt.Sprintf(" (%sx)", sig3(e.Ratio))
		}
		if k := len(e.Failed); k > 0 {
			v += fmt.Sprintf(", %d of %d failed", k, k+len(e.Samples))
		}
		return v
	})
	b.WriteString("\nSpread over the rounds, (max - min) / median, and the number of good runs:\n\n")
	table(func(_ *Cell, e *Entry) string {
		if len(e.Samples) == 0 {
			return "FAILED"
		}
		return fmt.Sprintf("%.0f%% (n=%d)", 100*e.Spread, len(e.Samples))
	})
	if res.hasCPUs() {
		fmt.Fprintf(&b, "\nCPUs busy: the workers' CPU time over the run's time, median over the rounds (at most %d here); beside the throughput, what the lock's waiters cost (spinning or sleeping). — : the driver does not say.\n\n", res.Machine.CPUs)
		table(func(_ *Cell, e *Entry) string {
			if e.CPUs == 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f", e.CPUs)
		})
	}
	res.writeGoals(&b)
	res.writeBaseline(&b)
	_, err := io.WriteString(w, b.String())
	return err
}
