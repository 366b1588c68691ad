package main

import (
	"bufio"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// shellScript runs script with sh, with SHMCTL naming a shmctl program
// (this test binary's helper) and SEG the segment, and returns its output.
func shellScript(t *testing.T, seg string, script string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), append([]string{"SHMCTL=" + testproc.Script(t, "shmctl"), "SEG=" + seg}, env...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// As flock(1) is used: concurrent shmctl lock calls without flags wait
// for each other, so read-modify-write sequences of a file never overlap.
func TestLockSerializesShellCommands(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	counter := filepath.Join(t.TempDir(), "counter")
	require.NoError(t, os.WriteFile(counter, []byte("0\n"), 0o600))
	const workers, rounds = 20, 3
	out, err := shellScript(t, seg.Path(), `
pids=
for w in $(seq `+strconv.Itoa(workers)+`); do
	(for i in $(seq `+strconv.Itoa(rounds)+`); do
		"$SHMCTL" lock "$SEG" counter sh -c 'n=$(cat "$COUNTER"); sleep 0.001; echo $((n+1)) > "$COUNTER"' || exit 1
	done) &
	pids="$pids $!"
done
for p in $pids; do wait $p || { echo "a worker failed"; exit 1; }; done`, "COUNTER="+counter)
	require.NoError(t, err, out)
	got, err := os.ReadFile(counter)
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(workers*rounds), strings.TrimSpace(string(got)))
	st := m.Stats()
	require.EqualValues(t, workers*rounds, st.Released)
	require.Zero(t, st.Reclaimed)
}

// -n gives the conflict status, which -E changes, and a lock that is free
// runs the command with the hold's facts in its environment.
func TestLockNonblockAndEnvironment(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	held, err := m.Acquire(context.Background(), "r", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	out, err := shellScript(t, seg.Path(), `
"$SHMCTL" lock -n "$SEG" r echo ran 2>/dev/null; echo "status $?"
"$SHMCTL" lock -n -E 3 "$SEG" r echo ran 2>/dev/null; echo "status $?"
"$SHMCTL" lock -w 0.05 "$SEG" r echo ran 2>/dev/null; echo "status $?"`)
	require.NoError(t, err, out)
	require.Equal(t, "status 75\nstatus 3\nstatus 75\n", out)
	require.NoError(t, m.Release("r", "holder"))

	// The version the command is told is its hold's: CheckVersion says it
	// is current while the hold lasts.
	r := shmctl(t, false, "lock", seg.Path(), "r", "sh", "-c",
		`echo "$SHMLOCK_VERSION $SHMLOCK_RECLAIMED $SHMLOCK_RESOURCE $SHMLOCK_SEGMENT"; "$0" lock -n "$1" r true 2>/dev/null; echo "$?"`,
		testproc.Script(t, "shmctl"), seg.Path())
	require.Equal(t, exitOK, r.code, r.stderr)
	fields := strings.Fields(r.stdout)
	require.Len(t, fields, 5, r.stdout)
	require.Equal(t, []string{"0", "r", seg.Path(), "75"}, fields[1:], "told, and the lock held while it ran")
	v, err := strconv.ParseUint(fields[0], 10, 64)
	require.NoError(t, err)
	ri, err := m.Inspect("r")
	require.NoError(t, err)
	require.Greater(t, v, held.Version, "after the earlier holder's")
	require.LessOrEqual(t, v, ri.Version)
}

// A holder that died leaves the next command SHMLOCK_RECLAIMED=1; the
// command's success marks the resource consistent, so the one after is
// told 0.
func TestLockTellsReclaimed(t *testing.T) {
	t.Parallel()
	seg, _ := lockSegment(t)
	sleeper := exec.Command("sleep", "60")
	require.NoError(t, sleeper.Start())
	// In a process of its own: the hold outlives shmctl, as it does for
	// a user (shmctl run by this test would be this test process).
	out, err := testproc.Command("shmctl", "lock", "--hold-for", strconv.Itoa(sleeper.Process.Pid), seg.Path(), "r").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "SHMLOCK_VERSION=1\nSHMLOCK_RECLAIMED=0\n", string(out))
	require.NoError(t, sleeper.Process.Kill())
	_ = sleeper.Wait()

	show := []string{"lock", seg.Path(), "r", "sh", "-c", `echo "$SHMLOCK_RECLAIMED"`}
	r := shmctl(t, false, show...)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "1\n", r.stdout)
	r = shmctl(t, false, show...)
	require.Equal(t, "0\n", r.stdout, "the command that was told exited 0: consistent again")
}

// --hold-for keeps a lock for a shell across a block of its script, until
// 'shmctl unlock --hold-for', and no longer than the shell lives (kill -9
// included).
func TestLockHoldForShell(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	out, err := shellScript(t, seg.Path(), `
out=$("$SHMCTL" lock --hold-for $$ "$SEG" block) || exit 1
eval "$out"
echo "version $SHMLOCK_VERSION reclaimed $SHMLOCK_RECLAIMED"
"$SHMCTL" lock -n "$SEG" block true 2>/dev/null; echo "inside $?"
"$SHMCTL" unlock "$SEG" block --hold-for $$ || exit 1
"$SHMCTL" lock -n "$SEG" block true; echo "after $?"
"$SHMCTL" unlock "$SEG" block --hold-for $$ 2>/dev/null; echo "again $?"`)
	require.NoError(t, err, out)
	require.Equal(t, "version 1 reclaimed 0\ninside 75\nafter 0\nagain 1\n", out)

	// kill -9 of the shell inside its block: the next taker reclaims.
	sh := exec.Command("sh", "-c", `"$SHMCTL" lock --hold-for $$ "$SEG" block >/dev/null || exit 1; echo held; sleep 60`)
	sh.Env = append(os.Environ(), "SHMCTL="+testproc.Script(t, "shmctl"), "SEG="+seg.Path())
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the sleep dies with it
	stdout, err := sh.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, sh.Start())
	t.Cleanup(func() { _ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL); _ = sh.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", line)
	ri, err := m.Inspect("block")
	require.NoError(t, err)
	require.Len(t, ri.Holders, 1)
	require.Equal(t, sh.Process.Pid, ri.Holders[0].Companion)
	require.True(t, ri.Holders[0].Alive, "shmctl has exited; the shell keeps the hold")
	_, err = m.Acquire(context.Background(), "block", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrResourceLocked)

	require.NoError(t, syscall.Kill(-sh.Process.Pid, syscall.SIGKILL))
	_ = sh.Wait()
	info, err := m.Acquire(context.Background(), "block", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: testproc.Timeout})
	require.NoError(t, err)
	require.True(t, info.Reclaimed)
}

func TestUnlockHoldErrors(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	_, err := m.Acquire(context.Background(), "r", "someone", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	self := strconv.Itoa(os.Getpid())
	line := requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "r", "--hold-for", self), exitError)
	require.Contains(t, line, "LOCK_NOT_HELD")
	line = requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "r", "--owner", "other"), exitError)
	require.Contains(t, line, "LOCK_NOT_HELD")
	line = requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "r", "--hold-for", "4194303"), exitError)
	require.Contains(t, line, "no such process")
	line = requireOneLineError(t, shmctl(t, false, "lock", "--hold-for", "4194303", seg.Path(), "r"), exitError)
	require.Contains(t, line, "no such process")
	for _, args := range [][]string{
		{"unlock", seg.Path(), "r", "--hold-for", self, "--force"},
		{"unlock", seg.Path(), "r", "--hold-for", self, "--owner", "x"},
		{"unlock", seg.Path(), "r", "--hold-for", "0"},
		{"unlock", seg.Path(), "r", "--owner", "x", "--json"},
		{"unlock", seg.Path(), "r"},
	} {
		requireOneLineError(t, shmctl(t, false, args...), exitUsage)
	}
	ri, err := m.Inspect("r")
	require.NoError(t, err)
	require.Equal(t, "someone", ri.Holders[0].Owner, "no refusal changed the hold")
	r := shmctl(t, false, "unlock", seg.Path(), "r", "--owner", "someone")
	require.Equal(t, exitOK, r.code, r.stderr)
	requireUnlocked(t, m, "r")
}

// shmctl lock creates the segment it is given if there is none: private
// to its user, or its group's with --group.
func TestLockCreatesSegment(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		flags []string
		perm  fs.FileMode
	}{{nil, 0o600}, {[]string{"--group"}, 0o660}} {
		path := testproc.SegmentPath(t)
		t.Cleanup(func() { _ = os.Remove(path) })
		args := append(append([]string{"lock"}, tt.flags...), path, "r", "true")
		r := shmctl(t, false, args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, tt.perm, fi.Mode().Perm())
		seg, err := shm.Open(path, shm.Options{GroupAccess: tt.perm != 0o600, ReadOnly: true})
		require.NoError(t, err)
		m, err := lockmgr.Open(seg, lockmgr.Options{})
		require.NoError(t, err)
		require.EqualValues(t, 1, m.Stats().Released)
		require.NoError(t, seg.Close())
	}
}

// A command that gains privileges when it is exec'd (here: a set-user-ID
// file), whose Pdeathsig the kernel may clear, runs under the guard like
// any other: the guard is recorded in the hold before the command runs,
// and kills it when shmctl dies.
func TestLockGuardsPrivilegedCommand(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	prog := filepath.Join(dir, "setuid-script")
	testproc.WriteExecutable(t, prog, "#!/bin/sh\necho $$ $PPID > "+pidFile+"\nexec sleep 60\n")
	require.NoError(t, os.Chmod(prog, 0o755|fs.ModeSetuid))
	c := startLock(t, seg.Path(), "r", prog)
	var pid, guard int
	testproc.WaitFor(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		f := strings.Fields(string(b))
		require.Len(t, f, 2, "%q", b)
		pid, err = strconv.Atoi(f[0])
		require.NoError(t, err)
		guard, err = strconv.Atoi(f[1])
		require.NoError(t, err)
		return true
	}, "the command's pid (output %q)", c.Out.String())
	ri, err := m.Inspect("r")
	require.NoError(t, err)
	require.Len(t, ri.Holders, 1)
	require.Equal(t, guard, ri.Holders[0].Companion, "the guard recorded before the command ran")
	require.Equal(t, c.PID(), parentPID(t, guard), "the guard is shmctl's child")
	c.Kill(t)
	testproc.WaitFor(t, func() bool { return !processExists(pid) }, "the command to die with shmctl")
}

// The descriptors a script opens for shmctl lock reach its command at
// their numbers, as flock(1)'s do: exec 3>>log; shmctl lock ... sh -c
// 'echo >&3'. The guard's pipes took descriptors 3 and 4 in its
// process, and the command found them closed (sh: 3: Bad file
// descriptor), while 5 and up came through.
func TestLockPassesDescriptors(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	dir := t.TempDir()
	out, err := shellScript(t, seg.Path(), `cd "$DIR" &&
"$SHMCTL" lock "$SEG" r sh -c 'echo three >&3 && echo four >&4 && echo five >&5 && cat <&6' 3>f3 4>f4 5>f5 6<f5`,
		"DIR="+dir)
	require.NoError(t, err, out)
	require.Equal(t, "five\n", out, "the command read fd 6")
	for fd, want := range map[string]string{"f3": "three\n", "f4": "four\n", "f5": "five\n"} {
		got, err := os.ReadFile(filepath.Join(dir, fd))
		require.NoError(t, err)
		require.Equal(t, want, string(got), "written to %s by the command", fd)
	}
	requireUnlocked(t, m, "r")
}

// A command found through a relative directory of PATH (".", an empty
// entry, bin) runs, as under flock(1) and sh(1): the user put that
// directory there and named the command. Go's exec.LookPath refuses it
// (exec.ErrDot), and shmctl lock exited 127 for a command the shell
// itself would have run.
func TestLockRunsCommandFoundInRelativePATH(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "bin"), 0o700))
	testproc.WriteExecutable(t, filepath.Join(dir, "here"), "#!/bin/sh\necho here $1\n")
	testproc.WriteExecutable(t, filepath.Join(dir, "bin", "there"), "#!/bin/sh\necho there $1\n")
	out, err := shellScript(t, seg.Path(), `cd "$DIR" &&
PATH=".:$PATH" "$SHMCTL" lock "$SEG" r here 1 &&
PATH=":$PATH" "$SHMCTL" lock "$SEG" r here 2 &&
PATH="bin:$PATH" "$SHMCTL" lock "$SEG" r there 3`, "DIR="+dir)
	require.NoError(t, err, out)
	require.Equal(t, "here 1\nhere 2\nthere 3\n", out)
	requireUnlocked(t, m, "r")
}

// With PATH unset (env -i), a command is looked for where execvp(3), and
// so flock(1), looks for it: /bin and /usr/bin. shmctl lock found nothing
// and exited 127.
func TestLockRunsCommandWithoutPATH(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	out, err := shellScript(t, seg.Path(), `unset PATH; "$SHMCTL" lock "$SEG" r echo ran`)
	require.NoError(t, err, out)
	require.Equal(t, "ran\n", out)
	requireUnlocked(t, m, "r")
}
