package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
)

// ignoredSignals reads the SigIgn line of a /proc/PID/status.
func ignoredSignals(tb testing.TB, status string) uint64 {
	tb.Helper()
	for line := range strings.Lines(status) {
		if rest, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			require.NoError(tb, err, "%q", line)
			return mask
		}
	}
	tb.Fatalf("no SigIgn line in %q", status)
	return 0
}

// A signal ignored when shmctl lock starts stays ignored, for shmctl and
// for the command, as with flock(1): nohup's SIGHUP, the SIGINT a shell
// ignores for a command it runs with & without job control. shmctl
// caught them to pass them on, which undid the ignore: the command ran
// with their default action, and the hang-up nohup was meant to survive
// killed it.
func TestLockKeepsIgnoredSignals(t *testing.T) {
	t.Parallel()
	seg, _ := lockSegment(t)
	out, err := shellScript(t, seg.Path(), `trap '' HUP INT; exec "$SHMCTL" lock "$SEG" r -- cat /proc/self/status`)
	require.NoError(t, err, out)
	ign := ignoredSignals(t, out)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		require.NotZero(t, ign&(1<<(sig-1)), "%v: got SigIgn %x, want it ignored", sig, ign)
	}
}

// requireDiedOf checks that a helper's exit error says it died of sig.
func requireDiedOf(tb testing.TB, c *testproc.Child, sig syscall.Signal) {
	tb.Helper()
	err := c.Wait(tb)
	var exit *exec.ExitError
	require.True(tb, errors.As(err, &exit), "got exit %v, want death by %v; output %q", err, sig, c.Out)
	ws := exit.Sys().(syscall.WaitStatus)
	require.True(tb, ws.Signaled() && ws.Signal() == sig, "got exit %v, want death by %v; output %q", err, sig, c.Out)
}

// When SIGINT kills the command, or ends the wait for the lock, shmctl
// lock dies of SIGINT too, once the lock is released, as flock(1) does on
// Ctrl-C. A shell stops its script on Ctrl-C only if the command it waits
// for dies of SIGINT; shmctl exited with status 130, which says the
// command handled it, so Ctrl-C did not stop a loop of shmctl lock
// commands.
func TestLockDiesOfSIGINT(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	c := startLock(t, seg.Path(), "job", "--", "sh", "-c", "kill -INT $$")
	requireDiedOf(t, c, syscall.SIGINT)
	ri, err := m.Inspect("job")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Unlocked, ri.State, "released first")

	// A command that exits 130 is not one SIGINT killed.
	c = startLock(t, seg.Path(), "job", "--", "sh", "-c", "exit 130")
	err = c.Wait(t)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 130, exit.ExitCode())

	_, err = m.Acquire(context.Background(), "job", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	conflicts := m.Stats().ConflictsDetected
	c = startLock(t, seg.Path(), "job", "--", "sh", "-c", "echo ran")
	testproc.WaitFor(t, func() bool { return m.Stats().ConflictsDetected > conflicts }, "shmctl lock waiting")
	require.NoError(t, c.Cmd.Process.Signal(syscall.SIGINT))
	requireDiedOf(t, c, syscall.SIGINT)
	require.Contains(t, c.Out.String(), "interrupted by SIGINT while waiting for the lock; the command did not run")
	require.NotContains(t, c.Out.String(), "context canceled")
	require.NotContains(t, c.Out.String(), "ran")
	require.NoError(t, m.Release("job", "holder"))
}

func init() {
	// count-sigint: print "ready", then "SIGINT N" at each SIGINT, and at
	// SIGTERM "SIGINT N times" and exit 0.
	helpers["count-sigint"] = func([]string) int {
		sigs := make(chan os.Signal, 8)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		fmt.Println("ready")
		n := 0
		for s := range sigs {
			if s == syscall.SIGTERM {
				fmt.Printf("SIGINT %d times\n", n)
				return 0
			}
			n++
			fmt.Printf("SIGINT %d\n", n)
		}
		return 1
	}
}

// openPTY opens a pseudo-terminal: its master, and its slave for a child.
func openPTY(tb testing.TB) (master, slave *os.File) {
	tb.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	require.NoError(tb, err)
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	tb.Cleanup(func() { _ = master.Close() })
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	require.NoError(tb, err)
	require.NoError(tb, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0))
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(tb, err)
	return master, slave
}

// A ^C typed at the terminal reaches the command once, as with flock(1):
// the kernel sends it to the foreground process group, the command's and
// shmctl's, and shmctl passed its copy on as well, so the command got
// SIGINT twice (a program that takes a second ^C for "quit at once" did
// so on the first). A SIGTERM sent to shmctl is still passed on.
func TestLockTerminalSIGINTOnce(t *testing.T) {
	t.Parallel()
	seg, _ := lockSegment(t)
	master, slave := openPTY(t)
	cmd := testproc.Command("shmctl", "lock", seg.Path(), "r", "--", testproc.Script(t, "count-sigint"))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// A session of its own, with the terminal as its controlling one and
	// shmctl's process group in the foreground, as a shell starts a job.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	_ = slave.Close()
	var waitErr error
	done := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(master); sc.Scan(); {
			lines <- strings.TrimRight(sc.Text(), "\r")
		}
	}()
	waitLine := func(prefix string) string {
		t.Helper()
		for {
			select {
			case line, ok := <-lines:
				require.True(t, ok, "the terminal closed before %q", prefix)
				if i := strings.Index(line, prefix); i >= 0 {
					return line[i:]
				}
			case <-time.After(testproc.Timeout):
				t.Fatalf("no %q on the terminal after %v", prefix, testproc.Timeout)
			}
		}
	}
	waitLine("ready")
	_, err := master.Write([]byte{0x03}) // ^C
	require.NoError(t, err)
	waitLine("SIGINT 1")
	// The SIGTERM is passed on after any copy of the SIGINT shmctl had.
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, "SIGINT 1 times", waitLine("SIGINT "))
	select {
	case <-done:
	case <-time.After(testproc.Timeout):
		t.Fatalf("shmctl still running after %v", testproc.Timeout)
	}
	require.NoError(t, waitErr)
}

// A signal sent to shmctl lock's process group (kill -INT -PGID, GNU
// timeout(1), a service manager's stop) reaches the command once: the
// command has its own copy, and the guard, which had one too, does not
// pass on shmctl's. Before, the command got SIGINT twice. A signal sent
// to shmctl alone is still passed on, and a group signal to a command
// that left the group (setsid) is passed on too: it had no copy.
func TestLockGroupSignalOnce(t *testing.T) {
	t.Parallel()
	seg, _ := lockSegment(t)
	c := startLock(t, seg.Path(), "r", "--", testproc.Script(t, "count-sigint"))
	c.WaitLine(t, "ready")
	require.NoError(t, syscall.Kill(-c.PID(), syscall.SIGINT)) // the group: Setpgid made shmctl its leader
	c.WaitLine(t, "SIGINT 1")
	require.NoError(t, syscall.Kill(-c.PID(), syscall.SIGINT))
	c.WaitLine(t, "SIGINT 2")
	// To shmctl alone, and another signal than the SIGINTs: a SIGINT could
	// merge with shmctl's copy of the last one if that is still pending
	// (signals of one number do not queue). Passed on after any copy of
	// the SIGINTs shmctl had.
	require.NoError(t, c.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, c.Wait(t))
	require.Equal(t, "ready\nSIGINT 1\nSIGINT 2\nSIGINT 2 times\n", c.Out.String())

	c = startLock(t, seg.Path(), "r", "--", "setsid", "-w", testproc.Script(t, "count-sigint"))
	c.WaitLine(t, "ready")
	require.NoError(t, syscall.Kill(-c.PID(), syscall.SIGINT))
	c.WaitLine(t, "SIGINT 1")
	require.NoError(t, c.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, c.Wait(t))
	require.Equal(t, "ready\nSIGINT 1\nSIGINT 1 times\n", c.Out.String())
}

func init() {
	// shmctl-guard-stops ARGS...: shmctl, whose lock guards stop
	// themselves (SIGSTOP) just before they start the command, and once
	// continued, wait for a copy of a signal sent to the group.
	helpers["shmctl-guard-stops"] = func(args []string) int {
		selfCommand = func(args ...string) (*exec.Cmd, error) {
			return testproc.Command("guard-stops", args...), nil
		}
		return run(args, os.Stdout, os.Stderr)
	}
	helpers["guard-stops"] = func(args []string) int {
		testHookGuardStarting = func(copies <-chan os.Signal) {
			if err := testproc.StopSelf(); err != nil {
				panic(err)
			}
			for deadline := time.Now().Add(testproc.Timeout); len(copies) == 0; time.Sleep(testproc.PollEvery) {
				if time.Now().After(deadline) {
					panic("no copy of a group signal")
				}
			}
		}
		return run(args, os.Stdout, os.Stderr)
	}
}

// processStopped reports whether every thread of process pid is stopped.
func processStopped(tb testing.TB, pid int) bool {
	tb.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	require.NoError(tb, err)
	for _, task := range tasks {
		b, err := os.ReadFile(dir + "/" + task.Name() + "/stat")
		if err != nil {
			return false // a thread exiting as we look
		}
		i := bytes.LastIndexByte(b, ')')
		require.True(tb, i > 0 && i+2 < len(b), "malformed stat %q", b)
		if b[i+2] != 'T' && b[i+2] != 't' {
			return false
		}
	}
	return len(tasks) > 0
}

// A signal sent to shmctl's process group after the guard started but
// before the command did (a service manager's stop, timeout(1), a ^C)
// reaches the command once it starts: the command was not there to have
// its copy. The guard took its own copy for the command's, and dropped
// the one shmctl passed on (a ^C shmctl does not pass on at all), so the
// command never had it and ran on to its end (here: for ever).
func TestLockGroupSignalBeforeCommandStarts(t *testing.T) {
	t.Parallel()
	seg, m := lockSegment(t)
	c := testproc.Start(t, "shmctl-guard-stops", "lock", seg.Path(), "r", "--", "sleep", "600")
	var guard int
	testproc.WaitFor(t, func() bool {
		ri, err := m.Inspect("r")
		require.NoError(t, err)
		if len(ri.Holders) == 1 {
			guard = ri.Holders[0].Companion
		}
		return guard != 0
	}, "the guard recorded in the hold")
	testproc.WaitFor(t, func() bool { return processStopped(t, guard) }, "the guard to stop before the command starts")
	require.NoError(t, syscall.Kill(-c.PID(), syscall.SIGTERM)) // the group: Setpgid made shmctl its leader
	require.NoError(t, syscall.Kill(guard, syscall.SIGCONT))
	err := c.Wait(t)
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "got %v, want the command's death by SIGTERM; output %q", err, c.Out)
	require.Equal(t, exitSignalled+int(syscall.SIGTERM), exit.ExitCode(), "output %q", c.Out)
	requireUnlocked(t, m, "r")
}
