// Package testproc runs a test binary's helper functions as separate
// processes (the os/exec re-execution pattern) and checks that tests leave
// no segment behind.
//
// A package's TestMain calls Main with its helpers; a test starts one with
// Command and reads its exit status and output, or with Start, which
// collects them for the waits of Child (for a line, an exit, a SIGSTOP):
//
//	func TestMain(m *testing.M) { testproc.Main(m, helpers) }
//	var helpers = map[string]func(args []string) int{"counter": counterHelper}
//	cmd := testproc.Command("counter", path, "1000")
package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

const (
	envHelper = "SHMLOCK_TEST_HELPER"
	envArgs   = "SHMLOCK_TEST_ARGS"
	argSep    = "\x1f" // ASCII unit separator: never in a path or a number
	segDir    = "/dev/shm"
)

// Main runs the helper named by the environment, if any, and exits with its
// status; otherwise it runs the tests and then fails the binary if any
// segment made by SegmentPath is still in /dev/shm, or if one of checks
// (run after passing tests, such as a goroutine-leak check) fails.
func Main(m *testing.M, helpers map[string]func(args []string) int, checks ...func() error) {
	MainWith(m, helpers, nil, checks...)
}

// MainWith is Main with setup, which runs before the tests (not in a
// helper process); the teardown it returns runs after them, before the
// checks. A setup that fails fails the binary without running the tests.
func MainWith(m *testing.M, helpers map[string]func(args []string) int, setup func() (teardown func(), err error), checks ...func() error) {
	if name := os.Getenv(envHelper); name != "" {
		h, ok := helpers[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "testproc: no helper %q\n", name)
			os.Exit(2)
		}
		// A helper started by Script has its arguments on its command
		// line (and no envArgs); one started by Command, in envArgs.
		args := os.Args[1:]
		if a, ok := os.LookupEnv(envArgs); ok {
			args = nil
			if a != "" {
				args = strings.Split(a, argSep)
			}
		}
		ownProcIfAsked()
		os.Exit(h(args))
	}
	if removed := sweepDead(segDir); len(removed) > 0 {
		fmt.Fprintf(os.Stderr, "testproc: removed segments of test processes now gone: %v\n", removed)
	}
	teardown := func() {}
	if setup != nil {
		var err error
		if teardown, err = setup(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	teardown()
	removeSharedBinary()
	for _, check := range checks {
		if code != 0 {
			break
		}
		if err := check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if leaked, _ := filepath.Glob(filepath.Join(segDir, prefix()+"*")); len(leaked) > 0 {
		fmt.Fprintf(os.Stderr, "testproc: tests left segments behind: %v\n", leaked)
		for _, p := range leaked {
			_ = os.Remove(p)
		}
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Long reports whether the long torture runs were asked for
// (SHMLOCK_LONG=1); the default run stays short.
func Long() bool { return os.Getenv("SHMLOCK_LONG") == "1" }

// Command returns a command that runs helper name with args in a new
// process of this test binary. The child is killed if the test process dies.
//
// The child leads a process group of its own, whose parent (this process)
// is in another group of the session: so the group is never orphaned
// while the test runs. A stopped helper (the crash tests stop one at a
// named step) in the test binary's group was continued by the kernel
// (SIGHUP and SIGCONT to an orphaned group with stopped members) when that
// group was orphaned, as it is under a shell that has exited (a
// background job), and some process of the group exited: it ran past its
// step and the test failed.
func Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"="+name, envArgs+"="+strings.Join(args, argSep),
		// A race-detector build sleeps a second at exit by default;
		// helpers have nothing to wait for.
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd
}

// Script writes, in a temporary directory of tb's, an executable shell
// script that runs helper name with the script's own arguments, and
// returns its path: for tests that drive a helper from a shell, as a user
// drives a program ("$SHMCTL" lock ... &).
func Script(tb testing.TB, name string) string {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatalf("finding the test binary: %v", err)
	}
	path := filepath.Join(tb.TempDir(), name)
	body := fmt.Sprintf("#!/bin/sh\nunset %s\n%s=%s GORACE=atexit_sleep_ms=0 exec %s \"$@\"\n",
		envArgs, envHelper, shellQuote(name), shellQuote(exe))
	WriteExecutable(tb, path, body)
	return path
}

// WriteExecutable writes an executable file (mode 0700) with content body.
// A child of sh writes it, not this process: a file this process had open
// for writing could be inherited, for the instant between fork and exec,
// by a child another goroutine starts, and exec of the file would then
// fail with ETXTBSY ("Text file busy").
func WriteExecutable(tb testing.TB, path, body string) {
	tb.Helper()
	write := exec.Command("/bin/sh", "-c", `umask 077 && cat > "$1" && chmod 700 "$1"`, "sh", path)
	write.Stdin = strings.NewReader(body)
	if out, err := write.CombinedOutput(); err != nil {
		tb.Fatalf("writing %s: %v\n%s", path, err, out)
	}
}

// shellQuote quotes s for sh(1).
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

var seq atomic.Uint64

// segStem begins the name of every segment SegmentPath makes; the
// creator's PID and a dash follow (prefix).
const segStem = "shmlock-test-"

func prefix() string { return fmt.Sprintf("%s%d-", segStem, os.Getpid()) }

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// SegmentPath returns a new, unused path in /dev/shm for one test's segment
// and removes whatever is at that path when the test ends.
func SegmentPath(tb testing.TB) string {
	tb.Helper()
	name := unsafeChars.ReplaceAllString(tb.Name(), "_")
	if len(name) > 60 {
		name = name[:60]
	}
	path := filepath.Join(segDir, fmt.Sprintf("%s%s-%d", prefix(), name, seq.Add(1)))
	tb.Cleanup(func() { _ = os.Remove(path) })
	return path
}

// The processes the tests start get the default action of SIGHUP and
// SIGINT even where go test's caller ignored them (nohup; a script's
// background job, whose SIGINT the shell ignores), as they have when go
// test runs from a terminal. The tests expect it: a command of shmctl
// lock dies of a kill -HUP $$, for instance, which an inherited ignore
// turns into exit status 0. Go keeps an ignored SIGHUP or SIGINT ignored,
// and a child inherits that through exec; a signal this process catches
// instead starts a child with the default action. The catch here drops
// what it catches, so this process still ignores them. A test of an
// ignored signal ignores it in its child itself
// (TestLockKeepsIgnoredSignals).
//
// This runs at init, before a TestMain counts goroutines for a leak check
// (the catch starts os/signal's own), and never in a helper process: one
// started with a signal ignored must keep it so.
func init() {
	if os.Getenv(envHelper) != "" {
		return
	}
	for _, sig := range []os.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if signal.Ignored(sig) {
			signal.Notify(make(chan os.Signal, 1), sig)
		}
	}
}
