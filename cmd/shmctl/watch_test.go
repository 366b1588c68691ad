package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
)

// In the tests a watch ends after two rounds.
func init() { watchRounds = 2 }

// --watch repeats a read command: in a pipe each round after a blank line,
// on a terminal redrawn in place (cursor home, lines cleared to their end,
// the rest of the screen cleared).
func TestWatch(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	r := shmctl(t, false, "info", "--watch", "100ms", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, 2, strings.Count(r.stdout, "path\t"+seg.Path()+"\n"), "two rounds")
	assert.Contains(t, r.stdout, "\n\npath\t", "a blank line between rounds")

	r = shmctl(t, true, "check", "--watch", "100ms", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, 2, strings.Count(r.stdout, "\x1b[H"), "redrawn from the top each round")
	assert.True(t, strings.HasSuffix(r.stdout, "\x1b[J"), "the rest of the screen cleared")

	line := requireOneLineError(t, shmctl(t, false, "slots", "--watch", "10ms", seg.Path()), exitUsage)
	assert.Contains(t, line, "--watch must be 0 or at least 100ms")
}
