package main

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
)

func TestBenchFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want benchOptions
	}{
		{
			[]string{"--workload", "counter", "--procs", "2", "--iters", "1000", "--path", "/dev/shm/x"},
			benchOptions{Workload: "counter", Procs: 2, Iters: 1000, Path: "/dev/shm/x", Lock: "spin"},
		},
		{
			[]string{"--workload=uncontended", "--procs=1", "--iters=2e6", "--path=/tmp/f", "--lock=spin-token"},
			benchOptions{Workload: "uncontended", Procs: 1, Iters: 2000000, Path: "/tmp/f", Lock: "spin-token"},
		},
		{ // like the harness, the whole part of a fraction
			[]string{"--lock", "spin", "--iters", "1.5e1", "--procs", "64", "--path", "p", "--workload", "rw90"},
			benchOptions{Workload: "rw90", Procs: 64, Iters: 15, Path: "/dev/shm/p", Lock: "spin"},
		},
		{ // rw90 with no --lock runs on the upgrade mutex
			[]string{"--workload", "rw90", "--procs", "4", "--iters", "100", "--path", "p"},
			benchOptions{Workload: "rw90", Procs: 4, Iters: 100, Path: "/dev/shm/p", Lock: "upgrade"},
		},
		{
			[]string{"--workload", "counter", "--procs", "2", "--iters", "100", "--path", "p", "--lock", "upgrade"},
			benchOptions{Workload: "counter", Procs: 2, Iters: 100, Path: "/dev/shm/p", Lock: "upgrade"},
		},
		{ // no --path: the driver picks a private file
			[]string{"--workload", "counter", "--procs", "2", "--iters", "100"},
			benchOptions{Workload: "counter", Procs: 2, Iters: 100, Lock: "spin"},
		},
	}
	for _, tt := range tests {
		got, ios := parsedOptions(t, newCmdBench, tt.args)
		tt.want.IO = ios
		assert.Equal(t, &tt.want, got, "args %q", tt.args)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	ok := []string{"--workload", "counter", "--procs", "2", "--iters", "10", "--path", "/nonexistent/x"}
	tests := []struct {
		args []string
		want string // part of the line on stderr
	}{
		{ok[2:], "bench needs --workload, --procs and --iters"},
		{append(ok[:4:4], ok[6:]...), "bench needs --workload, --procs and --iters"},
		{append(ok, "--path", ""), "--path: "},
		{append(ok, "--procs", "0"), "--procs must be 1 to 64, got 0"},
		{append(ok, "--procs", "65"), "--procs must be 1 to 64, got 65"},
		{append(ok, "--iters", "0"), `--iters: "0" is not a count of 1 or more (2e6 is accepted)`},
		{append(ok, "--iters", "many"), `--iters: "many" is not a count of 1 or more (2e6 is accepted)`},
		{append(ok, "--iters", "NaN"), `--iters: "NaN" is not a count of 1 or more (2e6 is accepted)`},
		{append(ok, "--lock", "mutex"), `--lock must be spin, spin-token, upgrade, lockmgr or lockmgr-eager, got "mutex"`},
		{append(ok, "extra"), "bench takes no arguments, got 1 arguments"},
	}
	for _, tt := range tests {
		line := requireOneLineError(t, shmctl(t, false, append([]string{"bench"}, tt.args...)...), exitUsage)
		assert.Contains(t, line, tt.want, "args %q", tt.args)
	}
}

// cpuSlack is what a run's cpu_seconds may exceed its seconds times the
// CPUs by: each worker reads its CPU time once more after its end time.
const cpuSlack = 0.01

// benchKeys are the contract's keys, in its order.
var benchKeys = []string{"peer", "workload", "procs", "iters", "seconds", "ops_per_sec", "ns_per_op", "cpu_seconds", "ok", "detail"}

// benchLine checks that out is one line of JSON with the contract's keys
// in order, and decodes it.
func benchLine(tb testing.TB, out string) benchJSON {
	tb.Helper()
	require.True(tb, strings.HasSuffix(out, "}\n") && strings.Count(out, "\n") == 1, "not one line of JSON: %q", out)
	dec := json.NewDecoder(strings.NewReader(out))
	tok, err := dec.Token()
	require.NoError(tb, err)
	require.Equal(tb, json.Delim('{'), tok)
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		require.NoError(tb, err)
		keys = append(keys, k.(string))
		var v any
		require.NoError(tb, dec.Decode(&v))
	}
	assert.Equal(tb, benchKeys, keys, "keys and their order")
	var res benchJSON
	require.NoError(tb, json.Unmarshal([]byte(out), &res))
	return res
}

// A real run of every workload with each lock that supports it: the
// driver in this process, its workers this test binary re-executed. The
// lock "" is no --lock option: the shared workloads then run on the
// upgrade mutex.
func TestBenchRun(t *testing.T) {
	t.Parallel()
	cells := []struct {
		workload, procs, iters string
		detail                 string
	}{
		{"uncontended", "1", "2000", "ns per lock+unlock pair"},
		{"counter", "2", "1000", "counter=2000 want=2000"},
		{"counter", "3", "1e3", "counter=3000 want=3000"},
		{"pingpong", "2", "300", "turns=600 want=600"},
		{"pingpong_retry", "2", "300", "turns=600 want=600"},
		{"rw90", "2", "2000", "torn=0"},
		{"rw90", "3", "2000", "torn=0"},
		{"uncontended_shared", "1", "2000", "ns per shared lock+unlock pair"},
	}
	peers := map[string]string{"spin": "shmlock_spin", "spin-token": "shmlock_spin_token", "upgrade": "shmlock_upgrade"}
	for _, lock := range []string{"spin", "spin-token", "upgrade", ""} {
		for _, c := range cells {
			shared := c.workload == "rw90" || c.workload == "uncontended_shared"
			if shared && (lock == "spin" || lock == "spin-token") || !shared && lock == "" {
				continue // not run (TestBenchNotRun), or the same as spin
			}
			peer := peers[lock]
			if lock == "" {
				peer = "shmlock_upgrade"
			}
			t.Run(lock+"/"+c.workload+"/"+c.procs, func(t *testing.T) {
				t.Parallel()
				path := testproc.SegmentPath(t)
				args := []string{"bench", "--workload", c.workload, "--procs", c.procs, "--iters", c.iters, "--path", path}
				if lock != "" {
					args = append(args, "--lock", lock)
				}
				r := shmctl(t, false, args...)
				require.Equal(t, exitOK, r.code, "stdout %q, stderr %q", r.stdout, r.stderr)
				assert.Empty(t, r.stderr)
				res := benchLine(t, r.stdout)
				assert.True(t, res.OK, "ok; detail %q", res.Detail)
				assert.Equal(t, peer, res.Peer)
				assert.Equal(t, c.workload, res.Workload)
				assert.Greater(t, res.Seconds, 0.0)
				assert.Greater(t, res.OpsPerSec, 0.0)
				assert.InDelta(t, 1e9/res.OpsPerSec, res.NsPerOp, res.NsPerOp*1e-9)
				// Each worker's CPU time is its process's, from its start
				// to its end, both within the run: the workers cannot use
				// more than every CPU for the whole run.
				assert.Greater(t, res.CPUSeconds, 0.0)
				assert.LessOrEqual(t, res.CPUSeconds, res.Seconds*float64(runtime.NumCPU())+cpuSlack)
				assert.Contains(t, res.Detail, c.detail)
				assert.Contains(t, res.Detail, "github.com/shmlock/shmlock")
				// The lock's contention counters: none for one process; a
				// handoff cell waits at every turn.
				var contended, over10us, over1ms, sleeps, wakeups int
				_, err := fmt.Sscanf(res.Detail[strings.LastIndex(res.Detail, "waits: "):],
					"waits: contended=%d over_10us=%d over_1ms=%d sleeps=%d wakeups=%d", &contended, &over10us, &over1ms, &sleeps, &wakeups)
				require.NoError(t, err, res.Detail)
				switch c.workload {
				case "uncontended", "uncontended_shared":
					assert.Zero(t, contended+over10us+over1ms+sleeps+wakeups, res.Detail)
				case "pingpong_retry":
					assert.Positive(t, contended, res.Detail)
				}
				assert.LessOrEqual(t, over1ms, over10us, res.Detail)
				for _, p := range []string{path, path + ".shm"} {
					_, err := os.Stat(p)
					assert.ErrorIs(t, err, os.ErrNotExist, "%s after the run", p)
				}
			})
		}
	}
}

// Cells the lock cannot run still print the JSON line, with the
// contract's exit status, and create no file.
func TestBenchNotRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		workload, procs, lock string
		code                  int
		peer, detail          string
	}{
		{"rw90", "2", "spin", exitUnsupported, "shmlock_spin", "unsupported workload"},
		{"rw90", "2", "spin-token", exitUnsupported, "shmlock_spin_token", "unsupported workload"},
		{"uncontended_shared", "1", "spin", exitUnsupported, "shmlock_spin", "unsupported workload"},
		{"uncontended_shared", "2", "upgrade", exitUsage, "shmlock_upgrade", "uncontended requires procs=1"},
		{"frobnicate", "2", "spin", exitUnsupported, "shmlock_spin", "unsupported workload"},
		{"frobnicate", "2", "upgrade", exitUnsupported, "shmlock_upgrade", "unsupported workload"},
		{"uncontended", "2", "spin", exitUsage, "shmlock_spin", "uncontended requires procs=1"},
		{"pingpong", "3", "upgrade", exitUsage, "shmlock_upgrade", "pingpong requires procs=2"},
		{"pingpong_retry", "1", "lockmgr", exitUsage, "shmlock_lockmgr", "pingpong requires procs=2"},
	}
	for _, tt := range tests {
		path := testproc.SegmentPath(t)
		r := shmctl(t, false, "bench", "--workload", tt.workload, "--procs", tt.procs, "--iters", "2e6", "--path", path, "--lock", tt.lock)
		assert.Equal(t, tt.code, r.code, "%s: stderr %q", tt.workload, r.stderr)
		assert.Empty(t, r.stderr)
		res := benchLine(t, r.stdout)
		assert.Equal(t, benchJSON{Peer: tt.peer, Workload: tt.workload, Procs: res.Procs, Iters: 2000000, Detail: tt.detail}, res)
		_, err := os.Stat(path)
		assert.ErrorIs(t, err, os.ErrNotExist)
	}
}

// The real program in a pipe: exit status 3 for rw90 on the spinlock and
// the JSON line on stdout, nothing on stderr.
func TestBenchProcessUnsupported(t *testing.T) {
	t.Parallel()
	cmd := testproc.Command("shmctl", "bench", "--workload", "rw90", "--procs", "4", "--iters", "10", "--path", testproc.SegmentPath(t), "--lock", "spin")
	cmd.Stderr = io.Discard
	out, err := cmd.Output()
	require.Error(t, err)
	assert.Equal(t, exitUnsupported, cmd.ProcessState.ExitCode())
	res := benchLine(t, string(out))
	assert.False(t, res.OK)
	assert.Equal(t, "unsupported workload", res.Detail)
}

// A FILE the driver cannot create, a FILE that exists (whatever it is),
// or a FILE.shm that exists fails the run as the contract wants: one JSON
// line with ok false and the cause, exit status 1, nothing on stderr; and
// what was there is left alone, byte for byte.
func TestBenchBadPath(t *testing.T) {
	t.Parallel()
	notSegPath := testproc.SegmentPath(t)
	notSeg := sidecarOf(t, notSegPath)
	precious := testproc.SegmentPath(t)
	require.NoError(t, os.WriteFile(precious, []byte("precious\n"), 0o600))
	segPath := testproc.SegmentPath(t)
	seg, err := shm.Create(segPath, shm.Options{})
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	segBytes, err := os.ReadFile(segPath)
	require.NoError(t, err)
	sideSegPath := testproc.SegmentPath(t)
	side, err := shm.Create(sideSegPath+".shm", shm.Options{})
	require.NoError(t, err)
	require.NoError(t, side.Close())
	t.Cleanup(func() { _ = os.Remove(sideSegPath + ".shm") })
	for _, tt := range []struct {
		path, detail string
	}{
		{"/nonexistent/dir/file", "map: open /nonexistent/dir/file: no such file or directory"},
		{t.TempDir(), "map: bench: file exists: "},
		{precious, "map: bench: file exists: " + precious + " exists"},
		{segPath, "map: bench: file exists: " + segPath + " exists"},
		{notSegPath, "setup: bench: file exists: " + notSeg + " exists"},
		{sideSegPath, "setup: bench: file exists: " + sideSegPath + ".shm exists"},
	} {
		r := shmctl(t, false, "bench", "--workload", "counter", "--procs", "2", "--iters", "10", "--path", tt.path)
		assert.Equal(t, exitError, r.code, "%s: stderr %q", tt.path, r.stderr)
		assert.Empty(t, r.stderr)
		res := benchLine(t, r.stdout)
		assert.False(t, res.OK, tt.path)
		assert.True(t, strings.HasPrefix(res.Detail, tt.detail), "%s: detail %q", tt.path, res.Detail)
	}
	for _, p := range []string{notSeg, precious} {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, "precious\n", string(b), p)
	}
	b, err := os.ReadFile(segPath)
	require.NoError(t, err)
	assert.Equal(t, segBytes, b, "a segment at --path is left alone")
	_, err = shm.Open(sideSegPath+".shm", shm.Options{})
	assert.NoError(t, err, "a segment at FILE.shm is left alone")
	_, err = os.Stat(sideSegPath)
	assert.ErrorIs(t, err, fs.ErrNotExist, "the FILE bench made is removed")
}

// sidecarOf writes a file that is not a segment at path's FILE.shm, removed
// at the end of the test, and returns its path.
func sidecarOf(t *testing.T, path string) string {
	t.Helper()
	side := path + ".shm"
	require.NoError(t, os.WriteFile(side, []byte("precious\n"), 0o600))
	t.Cleanup(func() { _ = os.Remove(side) })
	return side
}

// On a terminal, bench shows its progress on stderr (a line it redraws and
// clears at the end); stdout keeps exactly its one JSON line.
func TestBenchProgressOnTerminal(t *testing.T) {
	t.Parallel()
	ios, stdout, stderr := testIOStreams(false)
	ios.stderrTTY = true
	opts := &benchOptions{IO: ios, Workload: "counter", Procs: 2, Iters: 2000, Lock: "spin", Path: testproc.SegmentPath(t)}
	require.NoError(t, runBench(opts))
	assert.Contains(t, stderr.String(), "\rbench: counter, 2 procs x 2000 iters, spin lock: ")
	assert.True(t, strings.HasSuffix(stderr.String(), "\r\x1b[K"), "the line is cleared at the end")
	assert.Equal(t, 1, strings.Count(stdout.String(), "\n"), "one JSON line: %q", stdout.String())
	assert.True(t, benchLine(t, stdout.String()).OK)
}

// A bench run stopped by a signal (Ctrl-C, timeout's SIGTERM, a closed
// terminal) removes its two files and exits 128+N, and its workers die
// with it: it died at once and left both files in /dev/shm.
func TestBenchStoppedBySignal(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			t.Parallel()
			path := testproc.SegmentPath(t)
			cmd := testproc.Command("shmctl", "bench", "--workload", "pingpong_retry", "--procs", "2", "--iters", "1e12", "--path", path)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Start())
			var workers []int
			testproc.WaitFor(t, func() bool {
				workers = childrenOf(cmd.Process.Pid)
				return len(workers) == 2
			}, "the bench's two workers")
			for _, p := range []string{path, path + ".shm"} {
				_, err := os.Stat(p)
				require.NoError(t, err, "%s while the bench runs", p)
			}
			require.NoError(t, cmd.Process.Signal(sig))
			err := cmd.Wait()
			require.Equal(t, exitSignalled+int(sig), cmd.ProcessState.ExitCode(), "%v; stderr %q", err, stderr.String())
			assert.Equal(t, "shmctl: bench stopped by "+unix.SignalName(sig)+": removed "+path+" and "+path+".shm\n", stderr.String())
			assert.Empty(t, stdout.String(), "no JSON line for a run that did not end")
			for _, p := range []string{path, path + ".shm"} {
				_, err := os.Stat(p)
				assert.ErrorIs(t, err, os.ErrNotExist, "%s after the bench", p)
			}
			for _, w := range workers {
				testproc.WaitFor(t, func() bool { return !processRuns(w) }, "worker %d to die with its driver", w)
			}
		})
	}
}

// childrenOf lists the child processes of pid (every thread's).
func childrenOf(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var kids []int
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if k, err := strconv.Atoi(f); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}

// processRuns reports whether pid is a process that has not exited (a
// zombie has).
func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}
