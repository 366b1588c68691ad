package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
)

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string // the line on stderr
	}{
		{[]string{"info"}, "shmctl: info takes one segment, got 0 arguments (see 'shmctl info --help')"},
		{[]string{"slots", "a", "b"}, "shmctl: slots takes one segment, got 2 arguments (see 'shmctl slots --help')"},
		{[]string{"rm"}, "shmctl: rm takes at least one segment (see 'shmctl rm --help')"},
		{[]string{"create", "x", "--slots", "many"}, `shmctl: --slots: "many" is not a whole number (see 'shmctl create --help')`},
		{[]string{"info", "--bogus", "x"}, "shmctl: unknown flag: --bogus (see 'shmctl info --help')"},
		{[]string{"inof", "x"}, `shmctl: unknown command "inof"; did you mean info? (see 'shmctl --help')`},
		{[]string{"frobnicate"}, `shmctl: unknown command "frobnicate" (see 'shmctl --help')`},
	}
	for _, tt := range tests {
		line := requireOneLineError(t, shmctl(t, false, tt.args...), exitUsage)
		assert.Equal(t, tt.want, line, "args %q", tt.args)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"--help"}, {"slots", "--help"}} {
		r := shmctl(t, false, args...)
		assert.Equal(t, exitOK, r.code, "args %q", args)
		assert.Empty(t, r.stderr, "args %q", args)
		assert.Contains(t, r.stdout, "Usage:", "args %q", args)
	}
}

// A panic anywhere under a command is one line on stderr and exit status 1.
func TestPanicIsOneLine(t *testing.T) {
	t.Parallel()
	ios, stdout, stderr := testIOStreams(false)
	root := newCmdRoot(ios)
	root.AddCommand(&cobra.Command{
		Use: "boom",
		RunE: func(*cobra.Command, []string) error {
			panic("kaboom\nsecond line")
		},
	})
	code := execute(root, []string{"boom"}, ios)
	r := result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	line := requireOneLineError(t, r, exitError)
	assert.Equal(t, "shmctl: internal error (a bug in shmctl, please report it): kaboom; second line", line)
}

// The real program on real pipes: no terminal, so rows without a header.
func TestProcessPipe(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	cmd := testproc.Command("shmctl", "create", path, "--slots", "2")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
	assert.True(t, strings.HasPrefix(stdout.String(), "path\t"+path+"\n"), "stdout: %q", stdout.String())
	assert.Contains(t, stdout.String(), "\nowner_slots\t32\t2\t2\t1024\t64\t0\n")
	assert.Contains(t, stdout.String(), "\nKIND\t", "a table keeps its header in a pipe")

	cmd = testproc.Command("shmctl", "info", "--no-header", path)
	stdout.Reset()
	cmd.Stdout = &stdout
	require.NoError(t, cmd.Run())
	assert.NotContains(t, stdout.String(), "KIND", "--no-header")

	cmd = testproc.Command("shmctl", "info", path+"-missing")
	stdout.Reset()
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.Error(t, err)
	assert.Equal(t, exitError, cmd.ProcessState.ExitCode())
	requireOneLineError(t, result{code: exitError, stdout: stdout.String(), stderr: stderr.String()}, exitError)
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	assert.False(t, isTerminal(w), "pipe")
	assert.False(t, isTerminal(&bytes.Buffer{}), "buffer")
	devNull, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer devNull.Close()
	assert.False(t, isTerminal(devNull), "a character device, but no terminal")
	assert.False(t, newIOStreams(devNull, devNull).IsStdoutTTY())
}

func TestTablePrinter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tty, noHeader bool
		want          string
	}{
		{false, false, "NAME\tN\na\t1\n\"tab\\there\"\t22\n\t3\n"},
		{false, true, "a\t1\n\"tab\\there\"\t22\n\t3\n"},
		{true, false, "NAME         N\n" +
			"a            1\n" +
			"\"tab\\there\"  22\n" +
			"             3\n"},
		{true, true, "a            1\n" +
			"\"tab\\there\"  22\n" +
			"             3\n"},
	} {
		ios, stdout, _ := testIOStreams(tc.tty)
		ios.noHeader = tc.noHeader
		tp := newTablePrinter(ios, "NAME", "N")
		tp.AddRow("a", 1)
		tp.AddRow("tab\there", 22)
		tp.AddRow("", 3)
		require.NoError(t, tp.Render())
		assert.Equal(t, tc.want, stdout.String(), "tty=%v no-header=%v", tc.tty, tc.noHeader)
	}
}

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, writeJSON(&b, map[string]any{"name": "a<b", "n": 1}))
	assert.Equal(t, "{\n  \"n\": 1,\n  \"name\": \"a<b\"\n}\n", b.String())
}

// A segment file truncated under a reader faults (SIGBUS); that too is one
// line and exit status 1, not a runtime crash.
func TestFaultIsOneLine(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 1024})
	ios, stdout, stderr := testIOStreams(false)
	root := newCmdRoot(ios)
	root.AddCommand(&cobra.Command{
		Use: "shrink",
		RunE: func(*cobra.Command, []string) error {
			if err := os.Truncate(seg.Path(), 0); err != nil {
				return err
			}
			s, err := seg.Slot(1023)
			if err != nil {
				return err
			}
			_ = s.PID.Load()
			return errors.New("the load did not fault")
		},
	})
	code := execute(root, []string{"shrink"}, ios)
	line := requireOneLineError(t, result{code: code, stdout: stdout.String(), stderr: stderr.String()}, exitError)
	assert.True(t, strings.HasPrefix(line, "shmctl: memory fault at 0x"), "line %q", line)
}

// An error quotes what the user typed or a segment holds: its control
// characters and invalid bytes are written as escapes, never raw (an
// escape sequence in a path reached the terminal and acted there).
func TestErrorEscapesControls(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	printError(&b, errors.New("open /dev/shm/x-\x01\x1b[31mred\xff\u0085\uFFFDü: no such file"))
	assert.Equal(t, `shmctl: open /dev/shm/x-\x01\x1b[31mred\xff\u0085`+"\uFFFDü"+`: no such file`+"\n", b.String())
	r := shmctl(t, false, "info", "zzcli-\x1b[31mred")
	line := requireOneLineError(t, r, exitError)
	assert.NotContains(t, line, "\x1b", "no raw escape character")
	assert.Contains(t, line, `zzcli-\x1b[31mred`)
}

// Every command meets an unknown flag or a flag value it cannot parse
// with one line naming it and its help, and exit status exitUsage.
func TestBadFlagEveryCommand(t *testing.T) {
	t.Parallel()
	ios, _, _ := testIOStreams(false)
	var names []string
	for _, c := range newCmdRoot(ios).Commands() {
		if !c.Hidden && c.Name() != "help" && c.Name() != "completion" {
			names = append(names, c.Name())
		}
	}
	require.Subset(t, names, []string{"create", "info", "slots", "rwlocks", "txns", "locks", "stats", "lock", "reclaim", "rm", "demo", "bench"})
	for _, name := range names {
		line := requireOneLineError(t, shmctl(t, false, name, "--bogus", "x"), exitUsage)
		assert.Equal(t, "shmctl: unknown flag: --bogus (see 'shmctl "+name+" --help')", line)
	}
	for _, args := range [][]string{
		{"create", "x", "--upgrades", "some"}, {"lock", "x", "job", "--wait", "soon", "--", "true"},
		{"lock", "x", "job", "--ttl", "-1s", "--", "true"}, {"demo", "--workers", "many"},
		{"bench", "--procs", "two", "--workload", "counter", "--iters", "10", "--path", "x"},
		{"slots", "x", "--all=maybe"}, {"info", "x", "--json=2"},
	} {
		line := requireOneLineError(t, shmctl(t, false, args...), exitUsage)
		assert.True(t, strings.HasSuffix(line, "(see 'shmctl "+args[0]+" --help')"), "args %q: %q", args, line)
	}
}

// Every flag of every command refuses a value of the wrong type in one
// line that names the flag and what it accepts, with exit status 2, before
// it does anything. The flags are found by walking the command tree, so a
// new flag is covered without a new row.
func TestEveryFlagBadValue(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"int": "many", "int64": "many", "uint": "-1", "uint64": "many", "bool": "maybe",
		"duration": "soon", "seconds": "soon", "size": "1XB", "count": "many",
	}
	ios, _, _ := testIOStreams(false)
	root := newCmdRoot(ios)
	checked := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Hidden || !c.Runnable() || c == root {
			return
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			v, ok := bad[f.Value.Type()]
			if !ok || f.Name == "help" {
				return
			}
			path := strings.Fields(c.CommandPath())[1:]
			args := append(append(path, "--"+f.Name+"="+v), "seg", "res")
			line := requireOneLineError(t, shmctl(t, false, args...), exitUsage)
			assert.Contains(t, line, "--"+f.Name+": ", "%q", args)
			assert.Contains(t, line, accepts(f.Value.Type()), "%q", args)
			checked++
		})
	}
	walk(root)
	assert.Greater(t, checked, 15, "flags checked")
}
