package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/mono"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

func TestMain(m *testing.M) {
	// The workers of bench and demo run this test binary's "shmctl"
	// helper, which is the real program.
	selfCommand = func(args ...string) (*exec.Cmd, error) { return testproc.Command("shmctl", args...), nil }
	testproc.MainWith(m, helpers, func() (func(), error) { return stopEtcd, nil })
}

var helpers = map[string]func(args []string) int{
	// shmctl ARGS...: the real program, on the process's own stdout and stderr.
	"shmctl": func(args []string) int { return run(args, os.Stdout, os.Stderr) },
	// txn-owner PATH pins|barrier: begin a transaction, allocate an
	// object, print its ref and sleep until killed.
	"txn-owner": txnOwnerHelper,
	// entry-lock PATH ENTRY: take lock-manager entry ENTRY's lock word
	// and stop (SIGSTOP) holding it (unlock_test.go).
	"entry-lock": entryLockHelper,
}

// result is what one run of shmctl left behind.
type result struct {
	code           int
	stdout, stderr string
}

// shmctl runs the command line args against buffers, with stdout looking
// like a terminal if tty.
func shmctl(tb testing.TB, tty bool, args ...string) result {
	tb.Helper()
	ios, stdout, stderr := testIOStreams(tty)
	code := execute(newCmdRoot(ios), args, ios)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// parsedOptions runs the command newCmd makes on args, with a runF that
// keeps its options, and returns them and the streams given to newCmd. The
// command runs under a root with the flags of every command (--group).
func parsedOptions[O any](tb testing.TB, newCmd func(*IOStreams, func(*O) error) *cobra.Command, args []string) (*O, *IOStreams) {
	tb.Helper()
	ios, _, _ := testIOStreams(false)
	var got *O
	cmd := newCmd(ios, func(o *O) error { got = o; return nil })
	root := &cobra.Command{Use: "shmctl", SilenceErrors: true, SilenceUsage: true}
	addGroupFlag(root)
	root.AddCommand(cmd)
	root.SetArgs(append([]string{cmd.Name()}, args...))
	require.NoError(tb, root.Execute(), "args %q", args)
	return got, ios
}

// testIOStreams returns streams on buffers; terminal times are in UTC.
func testIOStreams(tty bool) (*IOStreams, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	ios := newIOStreams(&stdout, &stderr)
	ios.SetStdoutTTY(tty)
	ios.location = time.UTC
	return ios, &stdout, &stderr
}

// requireOneLineError checks that r is a failure with exit status code,
// nothing on stdout and exactly one "shmctl: " line on stderr, and returns
// that line.
func requireOneLineError(tb testing.TB, r result, code int) string {
	tb.Helper()
	require.Equal(tb, code, r.code, "exit status; stderr: %q", r.stderr)
	require.Empty(tb, r.stdout, "stdout")
	require.True(tb, strings.HasPrefix(r.stderr, "shmctl: "), "stderr %q does not start with \"shmctl: \"", r.stderr)
	require.Equal(tb, 1, strings.Count(r.stderr, "\n"), "stderr %q is not one line", r.stderr)
	require.True(tb, strings.HasSuffix(r.stderr, "\n"), "stderr %q does not end in a newline", r.stderr)
	require.NotContains(tb, r.stderr, "goroutine", "stderr holds a stack trace")
	return strings.TrimSuffix(r.stderr, "\n")
}

// newSegment creates a segment at a fresh test path and closes it at cleanup.
func newSegment(tb testing.TB, sizes layout.Options) *shm.Segment {
	tb.Helper()
	seg, err := shm.Create(testproc.SegmentPath(tb), shm.Options{Options: sizes})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = seg.Close() })
	return seg
}

// shmctl version and shmctl --version print one line: the module version
// and the segment format version.
func TestVersion(t *testing.T) {
	t.Parallel()
	want := fmt.Sprintf(", segment format version %d\n", layout.Version)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := shmctl(t, false, args...)
		require.Equal(t, exitOK, r.code, "%q: %s", args, r.stderr)
		require.True(t, strings.HasPrefix(r.stdout, "shmctl "), "%q: %q", args, r.stdout)
		require.True(t, strings.HasSuffix(r.stdout, want), "%q: %q", args, r.stdout)
		require.Equal(t, 1, strings.Count(r.stdout, "\n"))
	}
	requireOneLineError(t, shmctl(t, false, "version", "extra"), exitUsage)

	r := shmctl(t, false, "version", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var doc versionJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.Equal(t, versionJSON{docHeader: docHeader{Schema: schemaVersion, Command: "version"},
		ShmctlVersion: moduleVersion(), FormatVersion: layout.Version}, doc)
}

// cobra's own help and completion commands report bad usage like every
// other command: one line, exit status 2.
func TestBuiltinsUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"help", "nosuch"},
		{"help", "slots", "extra"},
		{"completion"},
		{"completion", "tcsh"},
		{"completion", "bash", "extra"},
	} {
		requireOneLineError(t, shmctl(t, false, args...), exitUsage)
	}
	for _, args := range [][]string{{"help"}, {"help", "slots"}, {"completion", "bash"}, {"completion", "zsh"}} {
		r := shmctl(t, false, args...)
		require.Equal(t, exitOK, r.code, "%q: %s", args, r.stderr)
		require.NotEmpty(t, r.stdout, "%q", args)
	}
}

// A value of SHMLOCK_CLOCK that names no clock is ignored by the library
// (it is read at start); every command warns of it, and still runs. Not
// parallel: it sets the environment.
func TestClockEnvWarning(t *testing.T) {
	t.Setenv(mono.ClockEnv, "hpet")
	r := shmctl(t, false, "version")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "shmctl: warning: mono: unknown clock: SHMLOCK_CLOCK=\"hpet\" (want vdso or tsc); the default clock is in use\n", r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, "shmctl "), r.stdout)
	// Once for shmctl lock: its guard process, shmctl again, says nothing.
	seg := newSegment(t, layout.Options{Slots: 1, LockMgrEntries: 8})
	warning := r.stderr
	r = shmctl(t, false, "lock", seg.Path(), "r", "--", "true")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, warning, r.stderr)

	t.Setenv(mono.ClockEnv, "vdso")
	r = shmctl(t, false, "version")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Empty(t, r.stderr)
}
