package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Output files, in the -out directory.
const (
	jsonFile     = "matrix.json"
	markdownFile = "matrix.md"
	svgFile      = "matrix.svg"
)

// runMatrix builds, runs the matrix and writes the results; the table goes
// to stdout, progress to log.
func runMatrix(o options, stdout, log io.Writer) error {
	cells, err := parseCells(o.Cells)
	if err != nil {
		return err
	}
	cs, err := lookupContenders(o.Contenders)
	if err != nil {
		return err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := findRoot(cwd)
	if err != nil {
		return err
	}
	bin, out := o.Bin, o.Out
	if bin == "" {
		bin = filepath.Join(root, "bench", "bin")
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return err
	}
	switch {
	case out == "" && o.Quick:
		if out, err = os.MkdirTemp("", "shmlock-matrix-quick-"); err != nil {
			return err
		}
		tmp := out
		o.stop.atStop(func() { _ = os.Remove(tmp) }) // empty: no results are written after a stop
	case out == "":
		out = filepath.Join(root, "bench", "results")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}

	res := &Results{
		Date:     time.Now().UTC().Format(time.RFC3339),
		Command:  strings.TrimSpace("go run ./bench/matrix " + strings.Join(o.Args, " ")),
		Commit:   commit(root),
		Quick:    o.Quick,
		Machine:  machine(),
		Versions: versions(),
	}
	if l := res.Machine.LoadAvgStart[0]; l > 0.5 {
		fmt.Fprintf(log, "matrix: WARNING: the load average is %.2f: other work on the machine will disturb the numbers\n", l)
	}
	missing, err := build(root, bin, log)
	if err != nil {
		return err
	}
	res.Missing = missing
	cs = slices.DeleteFunc(cs, func(c contender) bool { return !fileExists(filepath.Join(bin, c.Argv[0])) })
	if len(cs) == 0 {
		return fmt.Errorf("no lock to run")
	}
	if o.Baseline != "" {
		dir, label, done, err := baselineOf(root, o.Baseline, log)
		if err != nil {
			return err
		}
		defer done()
		o.stop.atStop(done)
		before := len(cs)
		if cs = withBaseline(cs, dir); len(cs) == before {
			return fmt.Errorf("-baseline %s: none of the locks' drivers is there (build them: make -C bench c and go build -o DIR/shmctl ./cmd/shmctl in the baseline's tree)", dir)
		}
		o.Baseline = label
	}
	res.Settings = Settings{Rounds: o.Rounds, TargetSeconds: o.Target, Reference: strings.Split(o.Reference, ","),
		Contenders: contenderNames(cs), Baseline: o.Baseline}
	for _, c := range cells {
		res.Settings.Cells = append(res.Settings.Cells, c.String())
	}

	m := &matrixRun{
		r:          &runner{bin: bin, shmDir: o.ShmDir, timeout: o.Timeout, stop: o.stop},
		contenders: cs, cells: cells, rounds: o.Rounds, target: o.Target, probeN: o.ProbeN, log: log,
	}
	res.Cells, res.Placement = m.do()
	if sig := o.stop.stopping(); sig != 0 {
		return fmt.Errorf("stopped by %s", unix.SignalName(sig)) // the stop exits first
	}
	res.Machine.LoadAvgEnd = loadAvg()
	for i := range res.Cells {
		res.Cells[i].summarize(res.Settings.Reference)
	}
	defer o.stop.hold()() // a signal now waits for the files: whole, never half written
	if sig := o.stop.stopping(); sig != 0 {
		return fmt.Errorf("stopped by %s", unix.SignalName(sig)) // the stop exits first
	}
	return writeResults(res, out, stdout, log)
}

// writeResults writes the three files into dir and the table to stdout.
func writeResults(res *Results, dir string, stdout, log io.Writer) error {
	var js bytes.Buffer
	enc := json.NewEncoder(&js)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, jsonFile), js.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(log, "matrix: wrote %s\n", filepath.Join(dir, jsonFile))
	return writeViews(res, dir, stdout, log)
}

// writeViews writes the table and the plot of res into dir, and the table
// to stdout.
func writeViews(res *Results, dir string, stdout, log io.Writer) error {
	md, svg, err := views(res)
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{markdownFile: md, svgFile: svg} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	if _, err := stdout.Write(md); err != nil {
		return err
	}
	fmt.Fprintf(log, "matrix: wrote %s and %s\n", filepath.Join(dir, markdownFile), filepath.Join(dir, svgFile))
	return nil
}

// views are the markdown table and the SVG plot of res.
func views(res *Results) (md, svg []byte, err error) {
	var m, s bytes.Buffer
	if err := res.writeMarkdown(&m); err != nil {
		return nil, nil, err
	}
	if err := writeSVG(&s, plot(res)); err != nil {
		return nil, nil, err
	}
	return m.Bytes(), s.Bytes(), nil
}

// readResults reads a results file.
func readResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &res, nil
}

// replot draws the table and the plot of an existing results file again,
// beside it: after a change to how they are drawn, the numbers stay those
// measured.
func replot(o options, stdout, log io.Writer) error {
	res, err := readResults(o.Replot)
	if err != nil {
		return err
	}
	return writeViews(res, filepath.Dir(o.Replot), stdout, log)
}
