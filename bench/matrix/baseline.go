package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// A/B runs (-baseline): is a change to one of shmlock's locks faster? On a
// shared VM one cell's runs spread by 20-60 % from round to round, often
// more than the change, and the host may move the vCPUs between runs;
// runs of the two builds next to each other in every round, compared round
// by round, keep most of that drift out, and the sign test says how often
// that many rounds would go one way by chance.

// abRow compares, in one cell, a lock as this build has it with its twin
// from the baseline build.
type abRow struct {
	Cell   string
	Lock   string
	This   float64   // median ops/s, this build
	Base   float64   // median ops/s, baseline
	Ratios []float64 // per round both ran: this build's ops/s over the baseline's
	Faster int       // rounds in which this build was faster
	P      float64   // two-sided sign test: the chance of a split at least this uneven if neither were faster
}

// baselineRows are the A/B comparisons of res, cell by cell.
func (res *Results) baselineRows() []abRow {
	var rows []abRow
	for i := range res.Cells {
		c := &res.Cells[i]
		for k := range c.Entries {
			twin := &c.Entries[k]
			name, ok := strings.CutSuffix(twin.Name, baselineSuffix)
			if !ok {
				continue
			}
			j := slices.IndexFunc(c.Entries, func(e Entry) bool { return e.Name == name })
			if j < 0 {
				continue
			}
			this := &c.Entries[j]
			r := abRow{Cell: c.Title(), Lock: name, This: this.Median, Base: twin.Median}
			r.Ratios = roundRatios(this.Samples, twin.Samples)
			for _, x := range r.Ratios {
				if x > 1 {
					r.Faster++
				}
			}
			r.P = signTest(r.Faster, len(r.Ratios))
			rows = append(rows, r)
		}
	}
	return rows
}

// signTest is the two-sided exact sign test of k successes in n trials
// (ties count as neither here: a tie in throughput to the last digit does
// not happen): the probability, with a fair coin, of a split at least as
// uneven as k to n-k. 1 for n = 0.
func signTest(k, n int) float64 {
	if n == 0 {
		return 1
	}
	tail := min(k, n-k)
	sum := 0.0
	for i := 0; i <= tail; i++ {
		sum += binomial(n, i)
	}
	return math.Min(1, 2*sum/math.Pow(2, float64(n)))
}

// binomial is n choose k.
func binomial(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

// writeBaseline writes the A/B table of a -baseline run.
func (res *Results) writeBaseline(b *strings.Builder) {
	rows := res.baselineRows()
	if res.Settings.Baseline == "" || len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\nThis build against the baseline (-baseline %s): per round, this build's throughput over the baseline's, min-max (median); faster: the rounds this build won; p: the two-sided sign test, the chance of so uneven a split if neither build were faster (at least 2/2^rounds).\n\n", res.Settings.Baseline)
	b.WriteString("| cell | lock | this build | baseline | per round | faster | p |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		per := "—"
		if len(r.Ratios) > 0 {
			per = fmt.Sprintf("%.2f-%.2fx (%.3fx)", slices.Min(r.Ratios), slices.Max(r.Ratios), median(r.Ratios))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %d of %d | %.3f |\n", r.Cell, r.Lock, si(r.This), si(r.Base), per, r.Faster, len(r.Ratios), r.P)
	}
}

// baselineOf resolves -baseline: a directory of drivers as it is, or else
// a git revision of this repository, whose tree is exported (git archive:
// the checkout is not touched) into a temporary directory and built there
// (its C drivers and shmctl). done removes what was built. label is what
// the results file and the table call the baseline.
func baselineOf(root, arg string, log io.Writer) (bin, label string, done func(), err error) {
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		abs, err := filepath.Abs(arg)
		return abs, abs, func() {}, err
	}
	hash, err := gitOutput(root, "rev-parse", "--verify", "--quiet", arg+"^{commit}")
	if err != nil {
		return "", "", nil, fmt.Errorf("-baseline %s: neither a directory nor a revision of %s", arg, root)
	}
	tmp, err := os.MkdirTemp("", "shmlock-baseline-")
	if err != nil {
		return "", "", nil, err
	}
	done = func() { _ = os.RemoveAll(tmp) }
	tree, bin := filepath.Join(tmp, "tree"), filepath.Join(tmp, "bin")
	fmt.Fprintf(log, "matrix: building the baseline %s (%s) in %s\n", arg, hash[:12], tmp)
	steps := []struct {
		dir  string
		args []string
	}{
		{root, []string{"sh", "-c", `mkdir -p "$1" && git archive "$2" | tar -x -C "$1"`, "sh", tree, hash}},
		{filepath.Join(tree, "bench"), []string{"make", "-s", "BIN=" + bin, "c"}},
		{tree, []string{"go", "build", "-o", filepath.Join(bin, "shmctl"), "./cmd/shmctl"}},
	}
	for _, s := range steps {
		cmd := exec.Command(s.args[0], s.args[1:]...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = s.dir, log, log
		if err := cmd.Run(); err != nil {
			done()
			return "", "", nil, fmt.Errorf("building the baseline %s: %s: %w", arg, strings.Join(s.args, " "), err)
		}
	}
	return bin, fmt.Sprintf("%s (%s)", arg, hash[:12]), done, nil
}

// gitOutput runs git in dir and returns its output, trimmed.
func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}
