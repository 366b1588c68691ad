package main

import (
	"math"
	"slices"
	"strings"
)

// Results is the results file: what ran, where, and what every contender
// measured in every cell.
type Results struct {
	Date      string   `json:"date"`    // start, RFC 3339, UTC
	Command   string   `json:"command"` // as typed, from the repository's root
	Commit    string   `json:"commit"`  // git describe of the tree that ran
	Quick     bool     `json:"quick"`   // a quick run for tests: the numbers mean nothing
	Machine   Machine  `json:"machine"`
	Versions  Versions `json:"versions"`
	Settings  Settings `json:"settings"`
	Placement []Probe  `json:"placement"` // the vCPU placement probe, before each round and at the end
	Missing   []string `json:"missing,omitempty"`
	Cells     []Cell   `json:"cells"`
}

// Machine describes the computer.
type Machine struct {
	Kernel       string     `json:"kernel"`
	CPU          string     `json:"cpu"`
	CPUs         int        `json:"cpus"`
	Virtual      bool       `json:"virtual"`       // cpuinfo has the hypervisor flag
	LoadAvgStart [3]float64 `json:"loadavg_start"` // 1, 5 and 15 minutes
	LoadAvgEnd   [3]float64 `json:"loadavg_end"`
}

// Versions are the toolchains and libraries.
type Versions struct {
	Go    string `json:"go"`
	CC    string `json:"cc"`
	CXX   string `json:"cxx"`
	Glibc string `json:"glibc"`
	Boost string `json:"boost"`
}

// Settings are the run's knobs.
type Settings struct {
	Rounds        int      `json:"rounds"`
	TargetSeconds float64  `json:"target_seconds"` // per measured run, from a calibration
	Reference     []string `json:"reference"`      // the first of these that ran a cell is its reference
	Contenders    []string `json:"contenders"`
	Cells         []string `json:"cells"`
	Baseline      string   `json:"baseline,omitempty"` // -baseline: the other build's drivers' directory, or the revision built and its commit
}

// Probe is one reading of the placement probe: the round trip of a cache
// line between CPU 0 and CPU 1, which on a VM depends on where the host
// put the two virtual CPUs.
type Probe struct {
	Before string  `json:"before"` // "round N" or "end"
	Ns     float64 `json:"ns,omitempty"`
	Error  string  `json:"error,omitempty"`
}

// Cell is one workload at one process count.
type Cell struct {
	Workload    string   `json:"workload"`
	Procs       int      `json:"procs"`
	Unit        string   `json:"unit"`      // what ops_per_sec counts
	Reference   string   `json:"reference"` // whose median the ratios divide by; "" if none ran
	Entries     []Entry  `json:"entries"`
	Unsupported []string `json:"unsupported,omitempty"` // contenders without the workload
}

// Entry is one contender in one cell.
type Entry struct {
	Name    string    `json:"name"`
	Iters   uint64    `json:"iters"` // per worker, the same in every round
	Samples []Sample  `json:"samples"`
	Failed  []Failure `json:"failed,omitempty"`
	Median  float64   `json:"median"` // ops per second, over the samples
	NsPerOp float64   `json:"ns_per_op"`
	Spread  float64   `json:"spread"`         // (max - min) / median
	CPUs    float64   `json:"cpus,omitempty"` // busy CPUs, median over the samples that say (Sample.CPUs)
	// Ratio is the median over rounds of this contender's ops/s over the
	// reference's in the same round (the two ran seconds apart, so the
	// ratio keeps less of the machine's drift than a ratio of medians).
	// 0 if no round has both.
	Ratio  float64 `json:"ratio"`
	Detail string  `json:"detail"` // the last good run's detail
}

// Sample is one good run.
type Sample struct {
	Round     int     `json:"round"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// CPUs is how many CPUs the run kept busy on average (its workers' CPU
	// time over its time); 0 if the driver did not say. Beside the
	// throughput it tells a lock whose waiters sleep from one whose
	// waiters spin: pthread's rwlock at rw90 with 8 processes on 2 CPUs
	// keeps about 1.1 busy, shmlock's upgrade mutex about 1.9.
	CPUs float64 `json:"cpus,omitempty"`
	// Waits is the run's contention counters, as shmctl bench's detail
	// ends ("contended=... wakeups=..."); "" for the other drivers. They
	// tell, round by round, whether waiters spun or slept.
	Waits string `json:"waits,omitempty"`
}

// waitsOf is the contention counters at the end of a detail, if any.
func waitsOf(detail string) string {
	if i := strings.LastIndex(detail, "; waits: "); i >= 0 {
		return detail[i+len("; waits: "):]
	}
	return ""
}

// Failure is a run that did not validate, or no run at all.
type Failure struct {
	Round int    `json:"round"` // 0: calibration
	Why   string `json:"why"`
}

func (e *Entry) values() []float64 {
	xs := make([]float64, len(e.Samples))
	for i, s := range e.Samples {
		xs[i] = s.OpsPerSec
	}
	return xs
}

// busyCPUs are the samples' busy CPUs, of those that have them.
func (e *Entry) busyCPUs() []float64 {
	var xs []float64
	for _, s := range e.Samples {
		if s.CPUs > 0 {
			xs = append(xs, s.CPUs)
		}
	}
	return xs
}

// median of xs (not modified); NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread is (max - min) / median: 0.3 means the runs lay within 30 % of
// their median.
func spread(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return (slices.Max(xs) - slices.Min(xs)) / median(xs)
}

// pairedRatio is the median over rounds of x's ops/s over ref's in the
// same round, over the rounds both have; 0 if there is none.
func pairedRatio(x, ref []Sample) float64 {
	rs := roundRatios(x, ref)
	if len(rs) == 0 {
		return 0
	}
	return median(rs)
}

// roundRatios are x's ops/s over ref's, round by round, over the rounds
// both have.
func roundRatios(x, ref []Sample) []float64 {
	refOf := make(map[int]float64, len(ref))
	for _, s := range ref {
		refOf[s.Round] = s.OpsPerSec
	}
	var rs []float64
	for _, s := range x {
		if r, ok := refOf[s.Round]; ok && r > 0 {
			rs = append(rs, s.OpsPerSec/r)
		}
	}
	return rs
}

// summarize fills each entry's median, spread and ns_per_op from its
// samples, picks the cell's reference and fills the ratios.
func (c *Cell) summarize(reference []string) {
	for i := range c.Entries {
		e := &c.Entries[i]
		if len(e.Samples) == 0 {
			continue
		}
		e.Median = median(e.values())
		e.Spread = spread(e.values())
		e.CPUs = 0
		if cpus := e.busyCPUs(); len(cpus) > 0 {
			e.CPUs = median(cpus)
		}
		if e.Median > 0 {
			e.NsPerOp = 1e9 / e.Median // the contract's: for counter and rw90 the inverse of the total throughput, not a latency
		}
	}
	c.Reference = ""
	var ref *Entry
	for _, name := range reference {
		if i := slices.IndexFunc(c.Entries, func(e Entry) bool { return e.Name == name && len(e.Samples) > 0 }); i >= 0 {
			c.Reference, ref = name, &c.Entries[i]
			break
		}
	}
	for i := range c.Entries {
		if ref != nil {
			c.Entries[i].Ratio = pairedRatio(c.Entries[i].Samples, ref.Samples)
		}
	}
}

// Title is the cell as the table and plot name it.
func (c *Cell) Title() string { return cell{c.Workload, c.Procs}.Title() }
