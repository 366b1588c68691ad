package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
)

// tickerScript writes a script that appends a line to the file $2 every
// hundredth of a second, for ever, having recorded its pid in the file $1
// after the first: a process of a command's subtree whose life the test
// can see.
func tickerScript(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ticker")
	testproc.WriteExecutable(t, path, `#!/bin/sh
exec >/dev/null 2>&1
echo x >> "$2"
echo $$ > "$1.tmp" && mv "$1.tmp" "$1"
while :; do sleep 0.01; echo x >> "$2"; done
`)
	return path
}

// readPIDFile waits until path holds a pid and returns the identity of
// its process; the process is killed at cleanup if it still runs.
func readPIDFile(t *testing.T, path string) proc.Identity {
	t.Helper()
	var pid int
	testproc.WaitFor(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err, "%q", b)
		return true
	}, "a pid in %s", path)
	id, err := proc.Lookup(uint32(pid))
	require.NoError(t, err)
	t.Cleanup(func() {
		if proc.Alive(id) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return id
}

// subtree is a command line for sh -c whose shell starts a ticker in the
// background and one in the foreground, then says step2: a command with
// processes of its own, whose lives (pid files) and counts (count files)
// a test can see.
type subtree struct {
	script                         string
	bgPID, bgCount, fgPID, fgCount string
}

func newSubtree(t *testing.T) subtree {
	t.Helper()
	dir := t.TempDir()
	s := subtree{
		bgPID: filepath.Join(dir, "bg.pid"), bgCount: filepath.Join(dir, "bg.count"),
		fgPID: filepath.Join(dir, "fg.pid"), fgCount: filepath.Join(dir, "fg.count"),
	}
	s.script = fmt.Sprintf(`%[1]s %[2]s %[3]s & %[1]s %[4]s %[5]s; echo step2`, tickerScript(t), s.bgPID, s.bgCount, s.fgPID, s.fgCount)
	return s
}

// ids waits until both tickers run and returns their identities.
func (s subtree) ids(t *testing.T) []proc.Identity {
	t.Helper()
	return []proc.Identity{readPIDFile(t, s.bgPID), readPIDFile(t, s.fgPID)}
}

// kill -9 of shmctl lock ends the command's whole subtree, not only the
// command: a process the command started in the background, and one it
// waits for in the foreground (the first step of 'step1; step2'). Until
// they are all gone the hold stands, so the next holder never runs beside
// them. Before, Pdeathsig killed only the command (the shell); its
// children lived on, out of the lock, while the next holder was granted
// it at once.
func TestLockKilledEndsSubtree(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	sub := newSubtree(t)
	c := startLock(t, seg.Path(), "job", "--", "sh", "-c", sub.script)
	ids := sub.ids(t)
	testproc.WaitFor(t, func() bool {
		ri, err := m.Inspect("job")
		require.NoError(t, err)
		return len(ri.Holders) == 1 && ri.Holders[0].Companion != 0
	}, "the companion recorded in the hold")

	c.Kill(t)
	// The next holder looks, as soon as it is granted the lock, whether a
	// process of the killed command's subtree still runs, and how far the
	// counters went; nothing may run or count from then on.
	check := fmt.Sprintf(`for p in %d %d; do
	if [ -e /proc/$p ] && ! grep -q '^State:.*zombie' /proc/$p/status; then echo "alive $p"; fi
done
wc -c < %s; wc -c < %s`, ids[0].PID, ids[1].PID, sub.bgCount, sub.fgCount)
	r := shmctl(t, false, "lock", seg.Path(), "job", "--", "sh", "-c", check)
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Fields(r.stdout)
	require.Len(t, lines, 2, "a process of the killed command's subtree ran under the next holder: %q", r.stdout)
	for _, id := range ids {
		require.False(t, proc.Alive(id), "process %d outlived shmctl lock", id.PID)
	}
	for i, f := range []string{sub.bgCount, sub.fgCount} {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		require.Equal(t, lines[i], strconv.FormatInt(fi.Size(), 10), "%s grew after the next holder took the lock", f)
	}
	requireUnlocked(t, m, "job")
}

// parentPID reads the parent pid of process pid from /proc.
func parentPID(tb testing.TB, pid int) int {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(tb, err)
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ppid, err := strconv.Atoi(f[1])
	require.NoError(tb, err, "%q", s)
	return ppid
}

// guardCheck is a shell command line that prints "guard-parent N", N the
// parent's pid of its own parent: for the command shmctl lock runs, the
// pid of shmctl, whose child the guard is.
const guardCheck = `set -- $(sed 's/.*) //' /proc/$PPID/stat); echo "guard-parent $2"`

// The command runs under the guard, and its exit status, or the signal
// that killed it, is shmctl's exactly as when shmctl ran it itself: a
// status of 130 is not a death by SIGINT, and SIGINT is died of.
func TestLockGuardReportsStatus(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	self := fmt.Sprintf("guard-parent %d\n", os.Getpid())
	for _, tt := range []struct {
		action string
		code   int
	}{
		{"exit 0", exitOK},
		{"exit 7", 7},
		{"exit 130", 130},
		{"exit 255", 255},
		{"kill -TERM $$", exitSignalled + int(syscall.SIGTERM)},
		{"kill -HUP $$", exitSignalled + int(syscall.SIGHUP)},
		{"kill -KILL $$", exitSignalled + int(syscall.SIGKILL)},
	} {
		r := shmctl(t, false, "lock", seg.Path(), "job", "--", "sh", "-c", guardCheck+"; "+tt.action)
		require.Equal(t, tt.code, r.code, "%s: stderr %q", tt.action, r.stderr)
		require.Equal(t, self, r.stdout, "%s: the command's parent is the guard, shmctl's child", tt.action)
		require.Empty(t, r.stderr, tt.action)
	}
	c := startLock(t, seg.Path(), "job", "--", "sh", "-c", guardCheck+"; kill -INT $$")
	requireDiedOf(t, c, syscall.SIGINT)
	require.Equal(t, fmt.Sprintf("guard-parent %d\n", c.PID()), c.Out.String())
	requireUnlocked(t, m, "job")
	require.EqualValues(t, 8, m.Stats().Released)
}

// kill -9 of the guard alone (the OOM killer may pick it): the command
// dies too (its own Pdeathsig), and so does every process it started:
// shmctl lock, their subreaper once the guard is gone, kills them before
// it releases the lock, reports the guard's death as the command's and
// exits 137. Before, a process the command started in the background and
// one it waited for ran on, out of the lock.
func TestLockGuardKilled(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	sub := newSubtree(t)
	c := startLock(t, seg.Path(), "job", "--", "sh", "-c", `echo "pids $PPID $$"; `+sub.script)
	f := strings.Fields(c.WaitLine(t, "pids "))
	require.Len(t, f, 2)
	guard, err := strconv.Atoi(f[0])
	require.NoError(t, err)
	command, err := strconv.Atoi(f[1])
	require.NoError(t, err)
	ids := sub.ids(t)
	require.NoError(t, syscall.Kill(guard, syscall.SIGKILL))
	err = c.Wait(t)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "output %q", c.Out.String())
	require.Equal(t, exitSignalled+int(syscall.SIGKILL), exit.ExitCode(), "output %q", c.Out.String())
	require.False(t, processExists(command), "the command outlived shmctl lock")
	for _, id := range ids {
		require.False(t, proc.Alive(id), "process %d of the subtree outlived shmctl lock", id.PID)
	}
	requireUnlocked(t, m, "job")
	require.EqualValues(t, 1, m.Stats().Released)
}

// On etcd too, kill -9 of shmctl lock ends the command's whole subtree:
// the guard kills it at once, while the hold waits for the lease of
// shmctl's session to lapse.
func TestLockEtcdKilledEndsSubtree(t *testing.T) {
	t.Parallel()
	ep, prefix, _ := etcdTable(t)
	sub := newSubtree(t)
	c := startLock(t, "--etcd", ep, "--etcd-prefix", prefix, "job", "--", "sh", "-c", sub.script)
	ids := sub.ids(t)
	c.Kill(t)
	for _, id := range ids {
		testproc.WaitFor(t, func() bool { return !proc.Alive(id) }, "process %d of the subtree to die", id.PID)
	}
}

// A process the command leaves running in the background when it exits
// is not the lock's (flock(1)'s -o): shmctl lock releases the lock and
// exits, and the guard leaves the process alone.
func TestLockLeavesBackgroundAlone(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	r := shmctl(t, false, "lock", seg.Path(), "job", "--", "sh", "-c",
		fmt.Sprintf(`sleep 1000 >/dev/null 2>&1 & echo $! > %s`, pidFile))
	require.Equal(t, exitOK, r.code, r.stderr)
	id := readPIDFile(t, pidFile)
	require.True(t, proc.Alive(id), "the background process was killed")
	requireUnlocked(t, m, "job")
}
