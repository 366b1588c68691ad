package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSignTest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k, n int
		want float64
	}{
		{0, 0, 1},
		{5, 5, 2.0 / 32},
		{0, 5, 2.0 / 32},
		{9, 10, 2 * 11.0 / 1024},
		{1, 10, 2 * 11.0 / 1024},
		{5, 10, 1},
		{4, 5, 2 * 6.0 / 32},
		{10, 20, 1},
	} {
		require.InDelta(t, tc.want, signTest(tc.k, tc.n), 1e-12, "%d of %d", tc.k, tc.n)
	}
}

// A twin is made for each of shmlock's own locks whose driver the
// baseline directory has, right after the lock it repeats, and reports
// that lock's name as its peer; the others get none.
func TestWithBaseline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "shmctl"), nil, 0o755))
	cs, err := lookupContenders("shmlock_spin,shmlock_spin_c,pthread_mutex,shmlock_upgrade")
	require.NoError(t, err)
	got := withBaseline(cs, dir)
	require.Equal(t, []string{"shmlock_spin", "shmlock_spin@baseline", "shmlock_spin_c", "pthread_mutex", "shmlock_upgrade", "shmlock_upgrade@baseline"}, contenderNames(got))
	twin := got[1]
	require.Equal(t, "shmlock_spin", twin.peer())
	require.Equal(t, dir, twin.Bin)
	require.Equal(t, cs[0].Argv, twin.Argv)
	require.Equal(t, "shmlock_spin", got[0].peer())
	require.Empty(t, got[0].Bin)
}

// The A/B table compares a lock with its twin round by round, over the
// rounds both ran.
func TestBaselineRows(t *testing.T) {
	t.Parallel()
	res := &Results{Settings: Settings{Baseline: "/b"}, Cells: []Cell{{Workload: "counter", Procs: 2, Entries: []Entry{
		{Name: "shmlock_spin", Samples: samples(12, 10, 30, 11, 22)},
		{Name: "shmlock_spin@baseline", Samples: []Sample{{Round: 1, OpsPerSec: 10}, {Round: 2, OpsPerSec: 20}, {Round: 3, OpsPerSec: 20}, {Round: 4, OpsPerSec: 10}}},
		{Name: "pthread_mutex", Samples: samples(1, 1, 1, 1, 1)},
	}}}}
	for i := range res.Cells {
		res.Cells[i].summarize([]string{"pthread_mutex"})
	}
	rows := res.baselineRows()
	require.Len(t, rows, 1)
	r := rows[0]
	require.Equal(t, "counter P=2", r.Cell)
	require.Equal(t, "shmlock_spin", r.Lock)
	require.InDeltaSlice(t, []float64{1.2, 0.5, 1.5, 1.1}, r.Ratios, 1e-12, "round 5 has no baseline run")
	require.Equal(t, 3, r.Faster)
	require.InDelta(t, signTest(3, 4), r.P, 1e-12)
	var b strings.Builder
	res.writeBaseline(&b)
	require.Contains(t, b.String(), "| counter P=2 | shmlock_spin | 12.0 | 15.0 | 0.50-1.50x (1.150x) | 3 of 4 | 0.625 |")

	res.Settings.Baseline = ""
	b.Reset()
	res.writeBaseline(&b)
	require.Empty(t, b.String(), "no table without -baseline")
}

// A quick matrix with this build's own bin directory as the baseline runs
// each twin with its lock's iterations and writes the A/B table.
func TestQuickMatrixBaseline(t *testing.T) {
	buildDrivers(t)
	out := t.TempDir()
	opts, err := parseFlags([]string{"-quick", "-rounds", "2", "-cells", "counter:2", "-locks", "shmlock_spin,pthread_mutex",
		"-out", out, "-bin", testBin, "-baseline", testBin})
	require.NoError(t, err)
	var stdout bytes.Buffer
	require.NoError(t, runMatrix(opts, &stdout, io.Discard))

	res := jsonOf(t, out)
	require.Equal(t, []string{"shmlock_spin", "shmlock_spin@baseline", "pthread_mutex"}, res.Settings.Contenders)
	abs, err := filepath.Abs(testBin)
	require.NoError(t, err)
	require.Equal(t, abs, res.Settings.Baseline)
	entries := res.Cells[0].Entries
	require.Len(t, entries, 3)
	require.Equal(t, entries[0].Iters, entries[1].Iters, "the twin runs its lock's iterations")
	require.Len(t, entries[1].Samples, 2)
	require.Empty(t, entries[1].Failed)
	require.Contains(t, stdout.String(), "This build against the baseline")
	require.Contains(t, stdout.String(), "| counter P=2 | shmlock_spin | ")
	checkViews(t, out)

	_, err = parseFlags([]string{"-baseline", t.TempDir()})
	require.NoError(t, err)
	opts.Baseline, opts.Out = t.TempDir(), t.TempDir()
	require.ErrorContains(t, runMatrix(opts, io.Discard, io.Discard), "none of the locks' drivers is there")
}

// -baseline with a revision exports that commit's tree, builds its drivers
// in a temporary directory, runs them beside this build's and removes the
// directory afterwards. It builds shmctl from scratch (a minute on two
// CPUs), so it runs with SHMLOCK_LONG=1; a name that is neither a
// directory nor a revision is refused at once.
func TestQuickMatrixBaselineRevision(t *testing.T) {
	buildDrivers(t)
	root, err := findRoot(".")
	require.NoError(t, err)
	opts, err := parseFlags([]string{"-quick", "-cells", "counter:2", "-locks", "shmlock_spin", "-out", t.TempDir(), "-bin", testBin,
		"-baseline", "no-such-revision-" + t.Name()})
	require.NoError(t, err)
	require.ErrorContains(t, runMatrix(opts, io.Discard, io.Discard), "neither a directory nor a revision")

	if os.Getenv("SHMLOCK_LONG") == "" {
		t.Skip("builds a baseline from scratch: set SHMLOCK_LONG=1")
	}
	if _, err := gitOutput(root, "rev-parse", "--verify", "HEAD"); err != nil {
		t.Skip("not a git checkout")
	}
	opts.Baseline = "HEAD"
	var stdout, log bytes.Buffer
	require.NoError(t, runMatrix(opts, &stdout, &log))
	require.Regexp(t, `^HEAD \([0-9a-f]{12}\)$`, jsonOf(t, opts.Out).Settings.Baseline)
	require.Contains(t, stdout.String(), "| counter P=2 | shmlock_spin | ")
	tmp := regexp.MustCompile(`building the baseline HEAD \([0-9a-f]+\) in (\S+)`).FindStringSubmatch(log.String())
	require.Len(t, tmp, 2, log.String())
	require.NoDirExists(t, tmp[1], "the baseline's build is removed")
}

func jsonOf(t *testing.T, dir string) Results {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, jsonFile))
	require.NoError(t, err)
	var res Results
	require.NoError(t, json.Unmarshal(b, &res))
	return res
}
