package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/peerwork"
)

// contractKeys are the JSON line's keys, in the contract's order.
var contractKeys = []string{"peer", "workload", "procs", "iters", "seconds", "ops_per_sec", "ns_per_op", "cpu_seconds", "ok", "detail"}

// cpuSlack is what a run's cpu_seconds may exceed its seconds times the
// CPUs by: each worker reads its CPU time once more after its end time.
const cpuSlack = 0.01

// runDriver runs a built driver with the contract's flags and returns its
// stdout, exit status, and the shared file's path (which must be gone).
func runDriver(t *testing.T, bin, workload string, procs int, iters uint64) (stdout []byte, code int, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "shared")
	cmd := driverCommand(t, bin, "--workload", workload, "--procs", strconv.Itoa(procs),
		"--iters", strconv.FormatUint(iters, 10), "--path", path)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", bin, err)
	}
	if errOut.Len() > 0 {
		t.Logf("%s stderr: %s", filepath.Base(bin), errOut.String())
	}
	return out.Bytes(), cmd.ProcessState.ExitCode(), path
}

// driverCommand is a driver's command, killed if it has not ended within
// waitLimit: a hang fails its test instead of the whole run.
func driverCommand(t *testing.T, bin string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = time.Second
	return cmd
}

// parseLine checks that out is one line of JSON with the contract's keys
// in order, and decodes it.
func parseLine(t *testing.T, out []byte) driverLine {
	t.Helper()
	require.Equal(t, 1, bytes.Count(out, []byte("\n")), "want exactly one line, got %q", out)
	require.True(t, bytes.HasSuffix(out, []byte("\n")), "got %q, want a line", out)
	dec := json.NewDecoder(bytes.NewReader(out))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok)
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		require.NoError(t, err)
		keys = append(keys, k.(string))
		var v json.RawMessage
		require.NoError(t, dec.Decode(&v))
	}
	require.Equal(t, contractKeys, keys, "keys and their order")
	var line driverLine
	require.NoError(t, json.Unmarshal(out, &line))
	return line
}

// expectedWrites is rw90's count of writes for procs workers of iters
// operations: worker i draws from splitmix64 seeded i+1, and one draw in
// ten (mod 10 == 0) is a write. Every harness must make the same draws.
func expectedWrites(procs int, iters uint64) uint64 {
	var writes uint64
	for me := range procs {
		seed := uint64(me) + 1
		for range iters {
			if peerwork.SplitMix64(&seed)%10 == 0 {
				writes++
			}
		}
	}
	return writes
}

var detailNums = regexp.MustCompile(`(\w+(?:/\w+)?)=([0-9.]+)`)

// detailFields reads the key=number pairs of a detail.
func detailFields(detail string) map[string]string {
	m := map[string]string{}
	for _, s := range detailNums.FindAllStringSubmatch(detail, -1) {
		m[s[1]] = s[2]
	}
	return m
}

// Every driver runs every workload it has on a few iterations, prints the
// contract's line, passes validation, removes its file, and says
// "unsupported" (status 3) for the shared workloads when it has no shared
// mode.
func TestDrivers(t *testing.T) {
	buildDrivers(t)
	drivers := slices.Clone(cDrivers)
	if built.boost {
		drivers = append(drivers, boostDrivers...)
	} else {
		t.Logf("the Boost drivers are not tested: %s", built.boostNo)
	}
	shared := map[string]bool{"pthread_rwlock": true, "boost_upgradable": true, "flock": true, "ofd": true, "shmlock_upgrade_c": true, "shmlock_lockmgr_c": true}
	cells := []struct {
		workload string
		procs    int
		iters    uint64
	}{
		{"uncontended", 1, 2000},
		{"counter", 3, 3000},
		{"pingpong", 2, 300},
		{"pingpong_retry", 2, 300},
		{"rw90", 3, 3000},
		{"uncontended_shared", 1, 2000},
	}
	for _, d := range drivers {
		t.Run(d, func(t *testing.T) {
			for _, c := range cells {
				out, code, path := runDriver(t, filepath.Join(testBin, d), c.workload, c.procs, c.iters)
				line := parseLine(t, out)
				_, err := os.Stat(path)
				require.ErrorIs(t, err, fs.ErrNotExist, "%s: the shared file must be removed", c.workload)
				require.Equal(t, d, line.Peer)
				require.Equal(t, c.workload, line.Workload)
				require.Equal(t, c.procs, line.Procs)
				require.Equal(t, c.iters, line.Iters)
				if (c.workload == "rw90" || c.workload == "uncontended_shared") && !shared[d] {
					require.Equal(t, exitUnsupported, code, "%s without a shared mode: %s", c.workload, out)
					require.False(t, line.OK)
					require.Equal(t, "unsupported workload", line.Detail)
					continue
				}
				require.Equal(t, exitOK, code, "%s: %s", c.workload, out)
				require.True(t, line.OK, "%s: %s", c.workload, out)
				require.Positive(t, line.Seconds)
				ops := float64(c.iters) * float64(c.procs)
				if c.workload == "pingpong" || c.workload == "pingpong_retry" {
					ops = float64(c.iters) // round trips
				}
				require.InEpsilon(t, ops/line.Seconds, line.OpsPerSec, 1e-3, "ops_per_sec = ops / seconds")
				require.InEpsilon(t, line.Seconds*1e9/ops, line.NsPerOp, 1e-2, "ns_per_op = 1e9 seconds / ops")
				// The workers' CPU time, each from its start to its end,
				// both within the run: never more than every CPU for the
				// whole run.
				require.Positive(t, line.CPUSeconds, "cpu_seconds")
				require.LessOrEqual(t, line.CPUSeconds, line.Seconds*float64(runtime.NumCPU())+cpuSlack, "cpu_seconds")
				f := detailFields(line.Detail)
				switch c.workload {
				case "counter":
					want := strconv.FormatUint(c.iters*uint64(c.procs), 10)
					require.Equal(t, want, f["counter"], line.Detail)
					require.Equal(t, want, f["want"], line.Detail)
				case "pingpong", "pingpong_retry":
					require.Equal(t, strconv.FormatUint(2*c.iters, 10), f["turns"], line.Detail)
					require.Contains(t, f, "retries/turn", line.Detail)
				case "rw90":
					writes := expectedWrites(c.procs, c.iters)
					require.Equal(t, "0", f["torn"], line.Detail)
					require.Equal(t, strconv.FormatUint(writes, 10), f["writes"], "the same op sequence as every harness: %s", line.Detail)
					require.Equal(t, strconv.FormatUint(writes, 10), f["record"], line.Detail)
					require.Equal(t, strconv.FormatUint(c.iters*uint64(c.procs)-writes, 10), f["reads"], line.Detail)
				}
			}
		})
	}
}

// Bad arguments exit with status 2; an unknown workload with 3 and the
// line that says so.
func TestDriverArguments(t *testing.T) {
	buildDrivers(t)
	bin := filepath.Join(testBin, "pthread_mutex")
	out, code, _ := runDriver(t, bin, "uncontended", 2, 10)
	require.Equal(t, 2, code)
	require.Equal(t, "uncontended requires procs=1", parseLine(t, out).Detail)
	out, code, _ = runDriver(t, filepath.Join(testBin, "pthread_rwlock"), "uncontended_shared", 2, 10)
	require.Equal(t, 2, code)
	require.Equal(t, "uncontended requires procs=1", parseLine(t, out).Detail)
	out, code, _ = runDriver(t, bin, "pingpong", 3, 10)
	require.Equal(t, 2, code)
	require.Equal(t, "pingpong requires procs=2", parseLine(t, out).Detail)
	out, code, _ = runDriver(t, bin, "juggle", 1, 10)
	require.Equal(t, exitUnsupported, code)
	require.Equal(t, "unsupported workload", parseLine(t, out).Detail)

	for _, args := range [][]string{
		{"--workload", "counter", "--procs", "2", "--iters", "10"},                           // no --path
		{"--workload", "counter", "--procs", "0", "--iters", "10", "--path", "/dev/null/x"},  // procs < 1
		{"--workload", "counter", "--procs", "65", "--iters", "10", "--path", "/dev/null/x"}, // procs > 64
		{"--workload", "counter", "--procs", "2", "--iters", "ten", "--path", "/dev/null/x"},
		{"--workload", "counter", "--procs", "2", "--iters", "10", "--path", "/dev/null/x", "--color", "red"},
	} {
		out, err := driverCommand(t, bin, args...).Output()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		require.Equal(t, 2, ee.ExitCode(), "%v", args)
		require.Empty(t, out, "%v: bad usage prints no line", args)
	}
	// --flag=value and 3e3 are the same as --flag value and 3000.
	path := filepath.Join(t.TempDir(), "shared")
	out, err := driverCommand(t, bin, "--workload=counter", "--procs=2", "--iters=3e3", "--path="+path).Output()
	require.NoError(t, err)
	line := parseLine(t, out)
	require.Equal(t, uint64(3000), line.Iters)
	require.True(t, line.OK)
}

// The harness fails a run whose lock let a stray write in: the counter is
// off, a reader saw a torn record.
func TestHarnessCatchesABrokenLock(t *testing.T) {
	buildDrivers(t)
	bin := filepath.Join(t.TempDir(), "broken")
	out, err := exec.Command("cc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", filepath.Join("..", "c"),
		"-o", bin, filepath.Join("testdata", "broken.c")).CombinedOutput()
	require.NoError(t, err, "%s", out)

	out, code, _ := runDriver(t, bin, "counter", 1, 100)
	line := parseLine(t, out)
	require.Equal(t, 1, code)
	require.False(t, line.OK)
	require.Equal(t, "1100", detailFields(line.Detail)["counter"], line.Detail)

	out, code, _ = runDriver(t, bin, "rw90", 1, 1000)
	line = parseLine(t, out)
	require.Equal(t, 1, code)
	require.False(t, line.OK)
	torn, err := strconv.Atoi(detailFields(line.Detail)["torn"])
	require.NoError(t, err, line.Detail)
	require.Positive(t, torn, "reads until the next write see the stray word: %s", line.Detail)
}

// A worker killed during the run fails it (or, killed before the start,
// aborts it): the driver reports ok:false with status 1. The mutex is the
// robust one: a non-robust mutex whose holder is killed wedges the other
// worker for good.
func TestDriverWorkerKilled(t *testing.T) {
	buildDrivers(t)
	path := filepath.Join(t.TempDir(), "shared")
	cmd := driverCommand(t, filepath.Join(testBin, "pthread_mutex_robust"), "--workload", "counter", "--procs", "2",
		"--iters", "3e7", "--path", path) // the survivor's 3e7 increments alone take a fraction of a second
	var out bytes.Buffer
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	kids := waitForChildren(t, cmd.Process.Pid, 2)
	require.NoError(t, syscall.Kill(kids[0], syscall.SIGKILL))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.ExitCode())
	line := parseLine(t, out.Bytes())
	require.False(t, line.OK)
	require.Regexp(t, `failed_workers=1|worker exited before start`, line.Detail)
}

// Workers die with their driver (PR_SET_PDEATHSIG): a driver killed in a
// pingpong, whose workers would otherwise wait for a turn forever, leaves
// no process behind.
func TestDriverKilled(t *testing.T) {
	buildDrivers(t)
	path := filepath.Join(t.TempDir(), "shared")
	cmd := driverCommand(t, filepath.Join(testBin, "pthread_mutex"), "--workload", "pingpong", "--procs", "2",
		"--iters", "1e12", "--path", path)
	require.NoError(t, cmd.Start())
	kids := waitForChildren(t, cmd.Process.Pid, 2)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	for _, k := range kids {
		waitGone(t, k)
	}
}

// children lists the pids whose parent is pid.
func children(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range bytes.Fields(b) {
		if n, err := strconv.Atoi(string(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// Waits in tests: long enough for a loaded machine, never a measurement.
const (
	waitLimit = time.Minute
	waitPoll  = 5 * time.Millisecond
)

// waitForChildren waits until pid has n children and returns them.
func waitForChildren(t *testing.T, pid, n int) []int {
	t.Helper()
	var kids []int
	require.Eventually(t, func() bool { kids = children(pid); return len(kids) == n }, waitLimit, waitPoll, "%d workers of %d", n, pid)
	return kids
}

// waitGone waits until pid is no process (or a zombie, which is gone but
// for its parent's wait).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		i := bytes.LastIndexByte(b, ')')
		return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
	}, waitLimit, waitPoll, "worker %d outlived its driver", pid)
}

// A driver that SIGINT, SIGTERM or SIGHUP stops mid-run (Ctrl-C,
// timeout(1), a closed terminal) removes what it made, the shared file and
// its lock's segment, kills its workers and dies of the signal (the
// shell's 128+N). Before, it left both files in /dev/shm.
func TestDriverStoppedBySignal(t *testing.T) {
	buildDrivers(t)
	drivers := map[string][]string{ // the files each makes beside the shared file
		"pthread_mutex_robust": nil,
		"flock":                nil,
		"shmlock_spin_c":       {".shm"},
		"shmlock_upgrade_c":    {".shmlock"},
		"shmlock_lockmgr_c":    {".shmlock"},
	}
	if built.boost {
		drivers["boost_mutex"] = nil
	}
	sigs := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
	if signal.Ignored(syscall.SIGINT) { // a background job's: the drivers inherit it, and keep it
		t.Log("SIGINT is ignored here: not sent")
		sigs = sigs[1:]
	}
	for _, d := range slices.Sorted(maps.Keys(drivers)) {
		for _, sig := range sigs {
			t.Run(d+"/"+unix.SignalName(sig), func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "shared")
				cmd := driverCommand(t, filepath.Join(testBin, d), "--workload", "pingpong_retry", "--procs", "2",
					"--iters", "1e12", "--path", path)
				var out bytes.Buffer
				cmd.Stdout = &out
				require.NoError(t, cmd.Start())
				kids := waitForChildren(t, cmd.Process.Pid, 2) // forked after setup: every file is there
				for _, f := range append([]string{path}, withSuffixes(path, drivers[d])...) {
					require.FileExists(t, f)
				}
				require.NoError(t, cmd.Process.Signal(sig))
				err := cmd.Wait()
				var ee *exec.ExitError
				require.ErrorAs(t, err, &ee)
				ws := ee.Sys().(syscall.WaitStatus)
				require.True(t, ws.Signaled(), "%s: %v", d, err)
				require.Equal(t, sig, ws.Signal())
				require.Empty(t, out.String(), "no line for a run that did not end")
				left, err := os.ReadDir(dir)
				require.NoError(t, err)
				require.Empty(t, left, "files left by %s", d)
				for _, k := range kids {
					waitGone(t, k)
				}
			})
		}
	}
}

func withSuffixes(path string, suffixes []string) []string {
	var out []string
	for _, s := range suffixes {
		out = append(out, path+s)
	}
	return out
}
