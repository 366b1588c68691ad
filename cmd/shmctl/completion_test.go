package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// completions runs the shell's completion request and returns the words.
func completions(t *testing.T, args ...string) []string {
	t.Helper()
	r := shmctl(t, false, append([]string{"__complete"}, args...)...)
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	var words []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !strings.HasPrefix(l, ":") {
			words = append(words, l)
		}
	}
	return words
}

// Segment names come from /dev/shm (segments only, by their magic); lock
// names from the segment; flag values from their few words.
func TestCompletion(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	name := filepath.Base(seg.Path())
	assert.Equal(t, []string{name}, completions(t, "slots", name))
	assert.Contains(t, completions(t, "rm", name[:len(name)-1]), name)
	assert.Empty(t, completions(t, "slots", name, ""), "one segment only")

	_, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	_, err = m.Acquire(t.Context(), "quota", "me", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"queue", "quota"}, completions(t, "unlock", seg.Path(), "qu"))

	assert.Equal(t, []string{"exclusive", "collaborative", "shared"}, completions(t, "lock", "--mode", ""))
	assert.Equal(t, []string{"slot", "upgrade", "resource"}, completions(t, "unlock", "--kind", ""))
	assert.Contains(t, completions(t, "bench", "--workload", ""), "pingpong_retry")
}

// The lock names of a group segment complete when the command line says
// --group, as the command then opens it: the completion opened every
// segment without it, and a group segment's mode (0660) refused that open,
// its owner's too.
func TestCompletionOfAGroupSegmentsLockNames(t *testing.T) {
	t.Parallel()
	seg, err := shm.Create(testproc.SegmentPath(t), shm.Options{GroupAccess: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	_, err = spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	for _, cmd := range []string{"unlock", "lock"} {
		assert.Equal(t, []string{"queue"}, completions(t, "--group", cmd, seg.Path(), "q"), cmd)
		assert.Equal(t, []string{"queue"}, completions(t, cmd, "--group", seg.Path(), "q"), cmd)
		assert.Empty(t, completions(t, cmd, seg.Path(), "q"), "%s without --group", cmd)
	}
}

// unlock takes a segment and a name, nothing more: past them the shell
// offers nothing (directive 4, no file completion), where lock's command
// is completed as files (directive 0). unlock shared lock's case and was
// offered the files of the working directory.
func TestCompletionPastUnlocksArguments(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	for _, tc := range []struct {
		cmd, directive string
	}{{"unlock", ":4"}, {"lock", ":0"}} {
		r := shmctl(t, false, "__complete", tc.cmd, seg.Path(), "name", "")
		require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
		assert.Equal(t, tc.directive+"\n", r.stdout, tc.cmd)
	}
}

// A hidden file is offered only for a prefix that starts with a dot, as
// the shells complete files: the directory's hidden segments are a
// killed remover's (.shmlock-rm-...), which no name should lead to by
// default, and were offered with every segment for an empty prefix.
func TestCompletionHidesHiddenSegments(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	name := filepath.Base(seg.Path())
	hidden := filepath.Join(filepath.Dir(seg.Path()), "."+name)
	require.NoError(t, os.Link(seg.Path(), hidden))
	t.Cleanup(func() { _ = os.Remove(hidden) })

	assert.Contains(t, completions(t, "info", ""), name)
	assert.NotContains(t, completions(t, "info", ""), "."+name)
	assert.NotContains(t, completions(t, "rm", ""), "."+name)
	assert.Equal(t, []string{"." + name}, completions(t, "info", "."+name[:len(name)-1]))
}

// The directory's entry types are read before the files are opened: a
// name that became a FIFO in between is looked into without blocking
// (hasMagic waited for a writer forever, and the shell with it).
func TestHasMagicDoesNotBlockOnAFIFO(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	done := make(chan bool, 1)
	go func() { done <- hasMagic(fifo) }()
	select {
	case got := <-done:
		assert.False(t, got)
	case <-time.After(testproc.Timeout): // a bound on a hang, not a measurement
		// Unblock the open so that the goroutine ends.
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			_ = f.Close()
		}
		t.Fatal("hasMagic blocked on a FIFO")
	}
}
