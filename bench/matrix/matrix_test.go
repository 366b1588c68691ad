package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The quick matrix builds, runs two cells with three locks (shmctl bench
// among them) and writes results that hold every run: samples, the
// unsupported, the reference, the placement probes; the plot and the table
// show each lock.
func TestQuickMatrix(t *testing.T) {
	buildDrivers(t) // skips without a C compiler; the matrix builds again, incrementally
	out := t.TempDir()
	opts, err := parseFlags([]string{"-quick", "-cells", "counter:2,rw90:2", "-locks", "shmlock_upgrade,pthread_mutex,pthread_rwlock",
		"-out", out, "-bin", testBin})
	require.NoError(t, err)
	require.Equal(t, 1, opts.Rounds)
	var stdout bytes.Buffer
	require.NoError(t, runMatrix(opts, &stdout, io.Discard))

	b, err := os.ReadFile(filepath.Join(out, jsonFile))
	require.NoError(t, err)
	var res Results
	require.NoError(t, json.Unmarshal(b, &res))
	require.True(t, res.Quick)
	require.Equal(t, []string{"shmlock_upgrade", "pthread_mutex", "pthread_rwlock"}, res.Settings.Contenders)
	require.Len(t, res.Placement, 2, "before the round and at the end")
	require.NotEmpty(t, res.Versions.Go)
	require.Len(t, res.Cells, 2)

	counter, rw90 := res.Cells[0], res.Cells[1]
	require.Equal(t, "counter", counter.Workload)
	require.Equal(t, "pthread_rwlock", counter.Reference, "pthread_mutex_robust did not run")
	require.Empty(t, counter.Unsupported)
	require.Len(t, counter.Entries, 3)
	for _, e := range counter.Entries {
		require.Len(t, e.Samples, 1, e.Name)
		require.Empty(t, e.Failed, e.Name)
		require.Positive(t, e.Median, e.Name)
		require.Positive(t, e.Ratio, e.Name)
		require.Positive(t, e.Iters, e.Name)
		require.Positive(t, e.Samples[0].CPUs, "%s: every driver says its CPU time", e.Name)
		require.Positive(t, e.CPUs, e.Name)
		// shmctl reports its lock's contention counters, kept per run;
		// the C drivers have none.
		if e.Name == "shmlock_upgrade" {
			require.Regexp(t, `^contended=\d+ over_10us=\d+ over_1ms=\d+ sleeps=\d+ wakeups=\d+$`, e.Samples[0].Waits)
		} else {
			require.Empty(t, e.Samples[0].Waits, e.Name)
		}
	}
	require.Equal(t, []string{"pthread_mutex"}, rw90.Unsupported)
	require.Equal(t, []string{"shmlock_upgrade", "pthread_rwlock"}, []string{rw90.Entries[0].Name, rw90.Entries[1].Name})
	require.Contains(t, rw90.Entries[0].Detail, "torn=0")

	md, err := os.ReadFile(filepath.Join(out, markdownFile))
	require.NoError(t, err)
	require.Equal(t, string(md), stdout.String(), "the table printed is the table written")
	require.Contains(t, string(md), "| pthread_mutex | ")
	require.Contains(t, string(md), "QUICK RUN")

	svg, err := os.ReadFile(filepath.Join(out, svgFile))
	require.NoError(t, err)
	d := parseSVG(t, svg)
	require.Equal(t, []string{"shmlock_upgrade", "pthread_mutex", "pthread_rwlock"}, d.panels["counter"])
	require.Equal(t, []string{"shmlock_upgrade", "pthread_rwlock"}, d.panels["rw90"])

	// The results file holds all the views show: drawn again from it, they
	// are the same bytes.
	checkViews(t, out)
}

// checkViews checks that the table and the plot in dir are what its
// results file draws.
func checkViews(t *testing.T, dir string) {
	t.Helper()
	res, err := readResults(filepath.Join(dir, jsonFile))
	require.NoError(t, err)
	md, svg, err := views(res)
	require.NoError(t, err)
	for name, want := range map[string][]byte{markdownFile: md, svgFile: svg} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%s is not what %s draws (go run ./bench/matrix -replot %s)", name, jsonFile, filepath.Join(dir, jsonFile))
	}
}

// The committed results are what the matrix wrote: full runs, whose
// tables and plots are drawn from their results files. The README cites
// the one in results/ and, for a host whose vCPUs are far apart, the one
// in results/xeon-far/.
func TestCommittedResults(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{filepath.Join("..", "results"), filepath.Join("..", "results", "xeon-far")} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			checkViews(t, dir)
			res, err := readResults(filepath.Join(dir, jsonFile))
			require.NoError(t, err)
			require.False(t, res.Quick, "a quick run is no result")
			require.Equal(t, len(res.Settings.Contenders), len(res.rowNames()), "every lock in the table")
			for _, c := range res.Cells {
				for _, e := range c.Entries {
					require.Len(t, e.Samples, res.Settings.Rounds, "%s %s: a sample per round", c.Title(), e.Name)
				}
			}
		})
	}
}
