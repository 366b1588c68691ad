package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

func TestDemoFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want demoOptions
	}{
		{nil, demoOptions{Path: demoDefaultPath, Workers: 4, Duration: 2 * time.Second}},
		{
			[]string{"--path", "x", "--workers", "3", "--duration", "1.5s", "--keep"},
			demoOptions{Path: "x", Workers: 3, Duration: 1500 * time.Millisecond, Keep: true},
		},
	}
	for _, tt := range tests {
		got, ios := parsedOptions(t, newCmdDemo, tt.args)
		tt.want.IO = ios
		assert.Equal(t, &tt.want, got, "args %q", tt.args)
	}
}

func TestDemoUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "1"}, "--workers must be 2 to 16, got 1"},
		{[]string{"--workers", "17"}, "--workers must be 2 to 16, got 17"},
		{[]string{"--duration", "10ms"}, "--duration must be at least 200ms, got 10ms"},
		{[]string{"now"}, "demo takes no arguments, got 1 arguments"},
	}
	for _, tt := range tests {
		line := requireOneLineError(t, shmctl(t, false, append([]string{"demo"}, tt.args...)...), exitUsage)
		assert.Contains(t, line, tt.want, "args %q", tt.args)
	}
}

// The whole demo, with its workers this test binary re-executed: it
// passes, kills one worker, relays the takeover and removes its segment.
func TestDemo(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	r := shmctl(t, false, "demo", "--path", path, "--workers", "3", "--duration", "1s")
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Empty(t, r.stderr)
	out := r.stdout
	assert.Contains(t, out, "shmlock demo: 3 worker processes share the segment "+path+"\n")
	for i := range 3 {
		assert.Regexp(t, fmt.Sprintf(`(?m)^started worker %d \(pid \d+\)$`, i), out)
	}
	victim := regexp.MustCompile(`(?m)^kill -9 (\d+) \(worker 2, holding beta\)$`).FindStringSubmatch(out)
	require.NotNil(t, victim, "no kill line in:\n%s", out)
	assert.Regexp(t, `(?m)^worker [01] \(pid \d+\) took over beta from dead pid `+victim[1]+` \(generation \d+\)$`, out)
	assert.Regexp(t, `(?m)^1 +beta +4 +pid/tid +`+victim[1]+` +alive `, out, "the slot table before the kill")
	assert.Regexp(t, `(?m)^INDEX +NAME +REFS +MODE +PID +LIVENESS +TID +TOKEN +GENERATION +RECURSION +WAITERS$`, out)
	assert.Regexp(t, `(?m)^2 +`+victim[1]+` +\d+ +\d+ +\d+ +killed while holding beta$`, out)
	assert.Contains(t, out, "\nPASS: ")
	assert.NotContains(t, out, "FAIL")
	assert.True(t, strings.HasSuffix(out, "\nremoved "+path+"\n"), "last line of:\n%s", out)
	_, err := os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "segment after the demo")
}

// --keep leaves the segment; a demo segment left at the path is replaced,
// and anything else there is refused.
func TestDemoKeepAndReplace(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	r := shmctl(t, false, "demo", "--path", path, "--workers", "2", "--duration", "200ms", "--keep")
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "\nkept "+path+": ")
	slots := shmctl(t, false, "slots", path)
	require.Equal(t, exitOK, slots.code, "stderr: %s", slots.stderr)
	// Claimed by the demo and its two workers (pid/tid, as Named recorded), and free.
	assert.Regexp(t, `(?m)^0\talpha\t3\tpid/tid\t-\t-\t-\t-\t\d+\t`, slots.stdout, "the kept segment's slots")

	// A demo segment left there, unused, is replaced.
	r = shmctl(t, false, "demo", "--path", path, "--workers", "2", "--duration", "200ms")
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, "removed "+path+", a demo segment left there by an earlier run\n"), "stdout:\n%s", r.stdout)

	// A segment the demo did not make, or a demo segment in use, is refused
	// and left byte for byte.
	other := newSegment(t, layout.Options{})
	before, err := os.ReadFile(other.Path())
	require.NoError(t, err)
	line := requireOneLineError(t, shmctl(t, false, "demo", "--path", other.Path()), exitError)
	assert.Contains(t, line, "is not a segment the demo made")
	after, err := os.ReadFile(other.Path())
	require.NoError(t, err)
	assert.Equal(t, before, after)

	r = shmctl(t, false, "demo", "--path", path, "--workers", "2", "--duration", "200ms", "--keep")
	require.Equal(t, exitOK, r.code, "stderr:\n%s", r.stderr)
	inUse, err := shm.Open(path, shm.Options{}) // this process maps it; a child process must see that
	require.NoError(t, err)
	defer inUse.Close()
	c := testproc.Start(t, "shmctl", "demo", "--path", path)
	require.Error(t, c.Wait(t))
	assert.Contains(t, c.Out.String(), "a demo segment, is in use: mapped by process ")
	_, err = os.Stat(path)
	require.NoError(t, err, "the demo segment in use is still there")

	notSeg := writeFile(t, []byte("precious\n"))
	line = requireOneLineError(t, shmctl(t, false, "demo", "--path", notSeg), exitError)
	assert.Contains(t, line, "choose another --path")
	b, err := os.ReadFile(notSeg)
	require.NoError(t, err)
	assert.Equal(t, "precious\n", string(b))
}

// startDemoWorkers starts the demo cmd and returns once it has started its
// second worker; the rest of its output is read and dropped (a full pipe
// would stop it), its standard error collected in what it returns, in
// full once cmd.Wait has returned.
func startDemoWorkers(t *testing.T, cmd *exec.Cmd) *strings.Builder {
	t.Helper()
	stderr := new(strings.Builder)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "started worker 1") {
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return stderr
}

// A demo stopped by a signal (Ctrl-C, timeout's SIGTERM, a closed
// terminal) removes its segment and exits 128+N: it died at once and left
// the segment behind.
func TestDemoStoppedBySignal(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		path := testproc.SegmentPath(t)
		cmd := testproc.Command("shmctl", "demo", "--path", path, "--workers", "2", "--duration", "1m")
		stderr := startDemoWorkers(t, cmd)
		_, err := os.Stat(path)
		require.NoError(t, err, "the demo's segment while it runs")
		require.NoError(t, cmd.Process.Signal(sig))
		err = cmd.Wait()
		require.Equal(t, exitSignalled+int(sig), cmd.ProcessState.ExitCode(), "%v: %v; stderr %q", sig, err, stderr.String())
		assert.Contains(t, stderr.String(), "shmctl: demo stopped by "+sig.String()+": removed "+path)
		_, err = os.Stat(path)
		assert.ErrorIs(t, err, os.ErrNotExist, "%v: the segment after the demo", sig)
	}
}

// A demo started with SIGHUP ignored (nohup) keeps it ignored, as it is
// without the demo's handler: a SIGHUP leaves it running, and the SIGTERM
// after it still removes the segment and exits 128+15. The demo caught
// SIGHUP whatever its start, so under nohup a hang-up stopped it (129).
// SIGHUP is sent first: had the demo caught it, it would be pending, and
// handled, before the SIGTERM.
func TestDemoKeepsIgnoredSIGHUP(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	cmd := exec.Command("sh", "-c", `trap '' HUP; exec "$0" "$@"`, testproc.Script(t, "shmctl"),
		"demo", "--path", path, "--workers", "2", "--duration", "1m")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr := startDemoWorkers(t, cmd)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	require.NoError(t, err)
	assert.NotZero(t, ignoredSignals(t, string(status))&(1<<(syscall.SIGHUP-1)), "SIGHUP stays ignored in the running demo")
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err = cmd.Wait()
	require.Equal(t, exitSignalled+int(syscall.SIGTERM), cmd.ProcessState.ExitCode(), "%v; stderr %q", err, stderr.String())
	assert.Contains(t, stderr.String(), "shmctl: demo stopped by "+syscall.SIGTERM.String()+": removed "+path)
	assert.NotContains(t, stderr.String(), syscall.SIGHUP.String())
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "the segment after the demo")
}

func init() {
	// demo-stalled-cleanup ARGS...: shmctl demo ARGS..., whose cleanup,
	// once the demo is over, prints "cleanup" and waits for a line on
	// stdin before it removes the segment.
	helpers["demo-stalled-cleanup"] = func(args []string) int {
		testHookCleanup = func() {
			fmt.Println("cleanup")
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		}
		return run(append([]string{"demo"}, args...), os.Stdout, os.Stderr)
	}
	// demo-stalled-created ARGS...: shmctl demo ARGS..., which prints
	// "created" once its segment is made and waits for a line on stdin
	// before it goes on.
	helpers["demo-stalled-created"] = func(args []string) int {
		testHookCreated = func() {
			fmt.Println("created")
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		}
		return run(append([]string{"demo"}, args...), os.Stdout, os.Stderr)
	}
}

// A signal that stops the demo as soon as it has made its segment, before
// it starts a worker, removes the segment and exits 128+N. The handler was
// put in place after the segment was made, so such a signal killed the
// demo and left the segment behind.
func TestDemoStoppedBySignalRightAfterCreate(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	demo := testproc.StartWithStdin(t, "demo-stalled-created", "--path", path, "--workers", "2", "--duration", "200ms")
	demo.WaitLine(t, "created")
	_, err := os.Stat(path)
	require.NoError(t, err, "the demo's segment once made")
	require.NoError(t, demo.Cmd.Process.Signal(syscall.SIGTERM))
	_ = demo.Wait(t)
	assert.Equal(t, exitSignalled+int(syscall.SIGTERM), demo.Cmd.ProcessState.ExitCode(), "output:\n%s", demo.Out)
	assert.Contains(t, demo.Out.String(), "shmctl: demo stopped by "+syscall.SIGTERM.String()+": removed "+path)
	_, err = os.Stat(path)
	if !assert.ErrorIs(t, err, os.ErrNotExist, "the segment after the demo") {
		_ = os.Remove(path)
	}
}

// A signal that stops the demo while it cleans up (Ctrl-C, or timeout's
// SIGTERM, just as the demo ends) still removes the segment, and the demo
// exits 128+N. The handler was stopped before the cleanup began, so the
// signal killed the demo there and left the segment behind.
func TestDemoStoppedBySignalDuringCleanup(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	demo := testproc.StartWithStdin(t, "demo-stalled-cleanup", "--path", path, "--workers", "2", "--duration", "200ms")
	demo.WaitLine(t, "cleanup")
	require.NoError(t, demo.Cmd.Process.Signal(syscall.SIGTERM))
	_ = demo.Wait(t)
	assert.Equal(t, exitSignalled+int(syscall.SIGTERM), demo.Cmd.ProcessState.ExitCode(), "output:\n%s", demo.Out)
	assert.Contains(t, demo.Out.String(), "shmctl: demo stopped by "+syscall.SIGTERM.String()+": removed "+path)
	_, err := os.Stat(path)
	if !assert.ErrorIs(t, err, os.ErrNotExist, "the segment after the demo") {
		_ = os.Remove(path)
	}
}
