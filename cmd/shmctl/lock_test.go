package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
	"github.com/shmlock/shmlock/shm"
)

func lockSegment(t *testing.T) (*shm.Segment, *lockmgr.Manager) {
	t.Helper()
	seg := newSegment(t, layout.Options{Slots: 1, LockMgrEntries: 8})
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	return seg, m
}

func TestLockFlags(t *testing.T) {
	t.Parallel()
	pid := "shmctl-" + strconv.Itoa(os.Getpid())
	shell := os.Getenv("SHELL")
	if shell == "" {
		shell = "/bin/sh"
	}
	base := lockOptions{Segment: "jobs", Resource: "r", Owner: pid, Mode: "exclusive", Block: true, ConflictExit: exitConflict,
		Etcd: etcdOptions{Prefix: etcdlock.DefaultPrefix}}
	with := func(f func(o *lockOptions)) lockOptions {
		o := base
		f(&o)
		return o
	}
	tests := []struct {
		args []string
		want lockOptions
	}{
		{[]string{"jobs", "r", "--", "true"}, with(func(o *lockOptions) { o.Command = []string{"true"} })},
		{[]string{"jobs", "r", "--owner", "ci", "--mode", "collaborative", "--ttl", "1m", "--wait", "5s", "--", "sh", "-c", "x --y"},
			with(func(o *lockOptions) {
				o.Owner, o.Mode, o.TTL, o.Timeout, o.Command = "ci", "collaborative", time.Minute, 5*time.Second, []string{"sh", "-c", "x --y"}
			})},
		{[]string{"jobs", "r", "--group", "--", "true"}, with(func(o *lockOptions) { o.Group, o.Command = true, []string{"true"} })},
		// flock(1)'s order: flags first, no "--"; the command's own flags are its own.
		{[]string{"-n", "-s", "jobs", "r", "ls", "-l", "--all"}, with(func(o *lockOptions) {
			o.Block, o.Mode, o.Command = false, "collaborative", []string{"ls", "-l", "--all"}
		})},
		{[]string{"-w", "2.5", "-E", "3", "jobs", "r", "-c", "echo hi"}, with(func(o *lockOptions) {
			o.Timeout, o.ConflictExit, o.Command = 2500*time.Millisecond, 3, []string{shell, "-c", "echo hi"}
		})},
		{[]string{"jobs", "r", "-w", "0", "true"}, with(func(o *lockOptions) { o.Block, o.Command = false, []string{"true"} })},
		{[]string{"jobs", "-x", "r", "--timeout", "250ms", "--", "true"}, with(func(o *lockOptions) {
			o.Timeout, o.Command = 250*time.Millisecond, []string{"true"}
		})},
		{[]string{"jobs", "r", "--mode", "SHARED", "-o", "--verbose", "true"}, with(func(o *lockOptions) {
			o.Mode, o.Verbose, o.Command = "collaborative", true, []string{"true"}
		})},
		{[]string{"-e", "--nb", "jobs", "r", "true"}, with(func(o *lockOptions) { o.Block, o.Command = false, []string{"true"} })},
		{[]string{"--hold-for", "123", "jobs", "r"}, with(func(o *lockOptions) { o.Owner, o.HoldFor = "", 123 })},
		{[]string{"--", "jobs", "-r", "-n"}, with(func(o *lockOptions) { o.Resource, o.Command = "-r", []string{"-n"} })},
		// With --etcd, no segment: the resource comes first.
		{[]string{"--etcd", "h:1,h:2", "r", "--", "true"}, with(func(o *lockOptions) {
			o.Segment, o.Etcd.Endpoints, o.Command = "", "h:1,h:2", []string{"true"}
		})},
		{[]string{"r", "--etcd", "h:1", "--etcd-prefix", "p/", "ls", "-l"}, with(func(o *lockOptions) {
			o.Segment, o.Etcd, o.Command = "", etcdOptions{Endpoints: "h:1", Prefix: "p/"}, []string{"ls", "-l"}
		})},
	}
	for _, tt := range tests {
		got, ios := parsedOptions(t, newCmdLock, tt.args)
		tt.want.IO = ios
		assert.Equal(t, &tt.want, got, "args %q", tt.args)
	}
	for _, args := range [][]string{
		{"lock", "jobs", "r"},          // no command
		{"lock", "jobs", "r", "--"},    // no command
		{"lock", "jobs", "--", "true"}, // no command: true is the resource
		{"lock", "jobs"},
		{"lock", "jobs", "r", "--mode", "solo", "--", "true"},
		{"lock", "jobs", "r", "--ttl", "-1s", "--", "true"},
		{"lock", "jobs", "r", "--ttl", "1ns", "--", "true"}, // panicked in NewTicker, leaving a hold behind
		{"lock", "jobs", "r", "--ttl", "29ms", "--", "true"},
		{"lock", "-s", "-x", "jobs", "r", "true"},
		{"lock", "-s", "--mode", "exclusive", "jobs", "r", "true"},
		{"lock", "-n", "-w", "1", "jobs", "r", "true"},
		{"lock", "-w", "-1", "jobs", "r", "true"},
		{"lock", "-E", "256", "jobs", "r", "true"},
		{"lock", "-F", "jobs", "r", "true"},
		{"lock", "-u", "jobs", "r"},
		{"lock", "jobs", "r", "-c", "echo", "extra"},
		{"lock", "-c", "", "jobs", "r", "ls"}, // ran ls, as if there were no -c
		{"lock", "-c", "", "jobs", "r"},       // said that -c was missing
		{"lock", "--hold-for", "1", "jobs", "r", "true"},
		{"lock", "--hold-for", "-1", "jobs", "r"},
		{"lock", "--hold-for", "5", "--ttl", "1m", "jobs", "r"},
		{"lock", "jobs", "r", "--no-such-flag", "true"},
		{"lock", "--owner", "", "jobs", "r", "true"},                   // ran as the default owner
		{"lock", "--etcd", "h:1", "r"},                                 // no command
		{"lock", "--etcd", "h:1", "--hold-for", "1", "r"},              // the session ends with shmctl
		{"lock", "--etcd", "h:1", "--ttl", "500ms", "r", "--", "true"}, // below etcd's lease
	} {
		line := requireOneLineError(t, shmctl(t, false, args...), exitUsage)
		assert.Contains(t, line, "shmctl lock --help", "args %q", args)
	}
	line := requireOneLineError(t, shmctl(t, false, "lock", "-c", "", "jobs", "r"), exitUsage)
	assert.Contains(t, line, "-c: the command is empty")
	r := shmctl(t, false, "lock", "jobs", "r", "--help")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "--conflict-exit-code")
}

func TestLockRunsCommand(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	out := filepath.Join(t.TempDir(), "out")
	// The command sees the lock held, by shmctl with the command as companion.
	script := fmt.Sprintf(`echo "$$" > %s; exit 7`, out)
	r := shmctl(t, false, "lock", seg.Path(), "job", "--owner", "script", "--", "sh", "-c", script)
	require.Equal(t, 7, r.code, "stderr %q", r.stderr)
	require.Empty(t, r.stderr)
	st := m.Stats()
	require.EqualValues(t, 1, st.TotalLocks)
	require.EqualValues(t, 1, st.Released)
	requireUnlocked(t, m, "job")
	pid, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NotEmpty(t, strings.TrimSpace(string(pid)))

	r = shmctl(t, false, "lock", seg.Path(), "job", "--", "true")
	require.Equal(t, exitOK, r.code, "stderr %q", r.stderr)
	r = shmctl(t, false, "lock", seg.Path(), "job", "--", "sh", "-c", "kill -TERM $$")
	require.Equal(t, exitSignalled+int(syscall.SIGTERM), r.code)

	line := requireOneLineError(t, shmctl(t, false, "lock", seg.Path(), "job", "--", "no-such-command-xyz"), exitCannotRun)
	require.Contains(t, line, "no-such-command-xyz")
	require.EqualValues(t, 3, m.Stats().TotalLocks, "a command that cannot run takes no lock")

	// Found but not runnable is 126, as in sh(1): a directory (it was
	// 127) and a file that is no executable format.
	dir := t.TempDir()
	notExe := filepath.Join(dir, "not-exe")
	require.NoError(t, os.WriteFile(notExe, []byte("\x00\x01garbage"), 0o700))
	for _, c := range []string{dir, notExe} {
		line = requireOneLineError(t, shmctl(t, false, "lock", seg.Path(), "job", "--", c), exitNotRunnable)
		require.Contains(t, line, c)
	}
}

// A script without a #! line, which the kernel cannot run (ENOEXEC),
// runs with /bin/sh, as execvp(3) runs it for flock(1) and as sh(1) runs
// it: it was refused with status 126 ("exec format error"). A binary file
// (a NUL in its first line, as bash(1) tells) is still refused.
func TestLockRunsScriptWithoutInterpreterLine(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	script := filepath.Join(t.TempDir(), "no-interpreter-line")
	testproc.WriteExecutable(t, script, `echo "ran $# $1 $2 $SHMLOCK_RESOURCE"; exit 3`+"\n")
	r := shmctl(t, false, "lock", seg.Path(), "job", "--", script, "a", "b c")
	require.Equal(t, 3, r.code, "stderr %q", r.stderr)
	require.Empty(t, r.stderr)
	require.Equal(t, "ran 2 a b c job\n", r.stdout)
	requireUnlocked(t, m, "job")

	binary := filepath.Join(t.TempDir(), "binary")
	testproc.WriteExecutable(t, binary, "\x7fELF\x02\x01\x01\x00\necho ran\n")
	line := requireOneLineError(t, shmctl(t, false, "lock", seg.Path(), "job", "--", binary), exitNotRunnable)
	require.Contains(t, line, binary)
	requireUnlocked(t, m, "job")
}

func TestLockConflict(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	_, err := m.Acquire(context.Background(), "job", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	line := requireOneLineError(t, shmctl(t, false, "lock", "-n", seg.Path(), "job", "--", "true"), exitConflict)
	require.Contains(t, line, "RESOURCE_LOCKED")
	line = requireOneLineError(t, shmctl(t, false, "lock", seg.Path(), "job", "--wait", "30ms", "--", "true"), exitConflict)
	require.Contains(t, line, "WAIT_TIMEOUT")
	line = requireOneLineError(t, shmctl(t, false, "lock", "-w", "0.03", "-E", "9", seg.Path(), "job", "true"), 9)
	require.Contains(t, line, "WAIT_TIMEOUT")
	line = requireOneLineError(t, shmctl(t, false, "lock", "-w", "0", "-s", seg.Path(), "job", "true"), exitConflict)
	require.Contains(t, line, "RESOURCE_LOCKED")
	require.NoError(t, m.Release("job", "holder"))
}

// kill -9 of shmctl lock: the command dies with it, and the lock is
// reclaimed, as a dead holder's, by the next acquisition.
func TestLockKilled(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	c := startLock(t, seg.Path(), "job", "--owner", "doomed", "--ttl", "1h",
		"--", "sh", "-c", "echo running; exec sleep 60")
	c.WaitLine(t, "running")
	// The command may print before shmctl records it in the hold (while
	// shmctl lives, its own record keeps the hold).
	var h lockmgr.HolderInfo
	testproc.WaitFor(t, func() bool {
		ri, err := m.Inspect("job")
		require.NoError(t, err)
		require.Len(t, ri.Holders, 1)
		h = ri.Holders[0]
		return h.Companion != 0
	}, "the command recorded in the hold")
	require.Equal(t, c.PID(), h.PID)
	require.NotZero(t, h.Companion)
	require.True(t, h.Alive)
	require.False(t, h.ExpiresAt.IsZero())

	c.Kill(t)
	// The command dies of Pdeathsig; until it has, the hold stands.
	testproc.WaitFor(t, func() bool { return !processExists(h.Companion) }, "the command to die with shmctl")
	// Liveness answers are cached for a moment: wait rather than try once.
	info, err := m.Acquire(context.Background(), "job", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: 30 * time.Second})
	require.NoError(t, err)
	require.True(t, info.Reclaimed)
}

// requireUnlocked requires that nobody holds resource in m.
func requireUnlocked(t *testing.T, m *lockmgr.Manager, resource string) {
	t.Helper()
	ri, err := m.Inspect(resource)
	require.NoError(t, err)
	require.Equal(t, lockmgr.Unlocked, ri.State, "%s is held", resource)
}

// processExists reports whether pid names a process that is not a zombie.
func processExists(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestLocksAndStats(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	ctx := context.Background()
	_, err := m.Acquire(ctx, "db", "agent-1", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Hour})
	require.NoError(t, err)
	for _, o := range []string{"a", "b"} {
		_, err = m.Acquire(ctx, "doc", o, lockmgr.Collaborative, lockmgr.AcquireOptions{})
		require.NoError(t, err)
	}
	_, err = m.Acquire(ctx, "free", "x", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.NoError(t, m.Release("free", "x"))
	_, err = m.Acquire(ctx, "db", "agent-2", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrResourceLocked)
	pid := os.Getpid()

	r := shmctl(t, false, "--no-header", "locks", seg.Path())
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 3, r.stdout)
	// One row per holder; the version is the resource's (2 after two grants).
	for _, want := range []string{"db\texclusive\tacquired\t1\tagent-1\t" + strconv.Itoa(pid) + "\talive\t",
		"doc\tcollaborative\tacquired\t2\ta\t", "doc\tcollaborative\tacquired\t2\tb\t"} {
		require.True(t, slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, want) }),
			"no line starts with %q in\n%s", want, r.stdout)
	}
	require.True(t, strings.HasSuffix(lines[slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "doc") })], "\t-"),
		"a hold without TTL has no time left")
	r = shmctl(t, false, "--no-header", "locks", seg.Path(), "--all")
	require.Contains(t, r.stdout, "free\t-\tunlocked\t2\t-\t-\t-\t-\t-\t-\n")

	r = shmctl(t, false, "--no-header", "locks", seg.Path(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.ElementsMatch(t, []string{"schema", "command", "path", "declared_only", "capacity", "resources"}, keys(doc))
	res := doc["resources"].([]any)
	require.Len(t, res, 2)
	db := res[0].(map[string]any)
	if db["resource"] != "db" {
		db = res[1].(map[string]any)
	}
	require.ElementsMatch(t, []string{"resource", "mode", "state", "generation", "declared", "inconsistent", "holders"}, keys(db))
	h := db["holders"].([]any)[0].(map[string]any)
	require.ElementsMatch(t, []string{"owner", "process", "host", "companion", "state", "acquired", "expires",
		"age_seconds", "left_seconds"}, keys(h))
	require.Equal(t, "agent-1", h["owner"])
	require.EqualValues(t, pid, h["process"].(map[string]any)["pid"])
	require.Equal(t, "alive", h["process"].(map[string]any)["liveness"])
	require.Nil(t, h["companion"])
	require.Greater(t, h["left_seconds"].(float64), 3500.0)

	r = shmctl(t, false, "--no-header", "stats", seg.Path(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var st statsJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, statsJSON{docHeader: docHeader{Schema: 1, Command: "stats"}, Path: seg.Path(), TotalLocks: 4, ActiveLocks: 3, ConflictsDetected: 1,
		AverageHoldSeconds: st.AverageHoldSeconds, Released: 1, Resources: 3, Capacity: ptr(7)}, st)
	doc = nil
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.ElementsMatch(t, []string{"schema", "command", "path", "total_locks", "active_locks", "expired_locks", "conflicts_detected",
		"average_hold_seconds", "released", "reclaimed", "resources", "capacity", "declared_only"}, keys(doc))
	r = shmctl(t, true, "stats", seg.Path())
	require.Contains(t, r.stdout, "total_locks")

	noTable := newSegment(t, layout.Options{Slots: 1, LockMgrEntries: -1})
	line := requireOneLineError(t, shmctl(t, false, "--no-header", "locks", noTable.Path()), exitError)
	require.Contains(t, line, "NO_LOCK_TABLE")
}

// SIGTERM to shmctl lock goes to the command; shmctl then releases the
// lock and exits with the command's status.
func TestLockForwardsSignals(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	c := startLock(t, seg.Path(), "job", "--",
		"sh", "-c", `trap 'exit 9' TERM; echo ready; while :; do sleep 0.01; done`)
	c.WaitLine(t, "ready")
	require.NoError(t, c.Cmd.Process.Signal(syscall.SIGTERM))
	err := c.Wait(t)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "output %q", c.Out.String())
	require.Equal(t, 9, exit.ExitCode(), "output %q", c.Out.String())
	requireUnlocked(t, m, "job")
	require.EqualValues(t, 1, m.Stats().Released)
}

// A signal while shmctl lock waits for the lock ends the wait: the command
// does not run, the holder keeps the lock.
func TestLockInterruptedWait(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	_, err := m.Acquire(context.Background(), "job", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	c := startLock(t, seg.Path(), "job", "--wait", "1h", "--", "sh", "-c", "echo ran")
	for deadline := time.Now().Add(30 * time.Second); m.Stats().ConflictsDetected == 0; time.Sleep(time.Millisecond) {
		require.False(t, time.Now().After(deadline), "shmctl lock did not meet the conflict")
	}
	require.NoError(t, c.Cmd.Process.Signal(syscall.SIGTERM))
	err = c.Wait(t)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, exitSignalled+int(syscall.SIGTERM), exit.ExitCode(), "as a shell's status after SIGTERM")
	got := c.Out.String()
	require.Contains(t, got, "interrupted by SIGTERM while waiting for the lock; the command did not run")
	require.NotContains(t, got, "context canceled", "the signal's own cancel, no news")
	require.NotContains(t, got, "ran")
	ri, err := m.Inspect("job")
	require.NoError(t, err)
	require.Equal(t, "holder", ri.Holders[0].Owner)
}

// startLock starts 'shmctl lock args...' in a process of its own (the
// test binary's shmctl helper), killed at cleanup if still running.
func startLock(tb testing.TB, args ...string) *testproc.Child {
	tb.Helper()
	return testproc.Start(tb, "shmctl", append([]string{"lock"}, args...)...)
}

// Names and addresses are arguments: a bad one is a usage error (status
// 2), found before any segment is opened; an over-long owner and a port
// out of range exited 1.
func TestBadNamesAreUsageErrors(t *testing.T) {
	t.Parallel()
	seg, _ := lockSegment(t)
	for _, args := range [][]string{
		{"lock", "--owner", strings.Repeat("o", 5000), seg.Path(), "job", "--", "true"},
		{"lock", seg.Path(), "bad\x01name", "--", "true"},
		{"lock", seg.Path(), strings.Repeat("r", 41), "--", "true"},
		{"serve", seg.Path(), "--listen", "127.0.0.1:99999"},
		{"serve", seg.Path(), "--listen", "127.0.0.1:-1"},
	} {
		requireOneLineError(t, shmctl(t, false, args...), exitUsage)
	}
}
