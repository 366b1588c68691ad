package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
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

// A round that fails after the first (the segment removed, or made again
// and not ready yet) is shown in place of the frame on a terminal, and on
// stderr in a pipe (where a script reads the rows of stdout: an error line
// there was read as a row), and the watch goes on; a failing first round
// ends it with the error. Before, any failing round ended the watch with
// status 1, so 'shmctl top' did not follow a segment made again under its
// path if a frame fell between the removal and the new segment.
func TestWatchOutlivesAFailedRound(t *testing.T) {
	t.Parallel()
	gone := errors.New("the segment is gone\x1b[2J") // an escape sequence, as a damaged name may hold
	for _, tty := range []bool{false, true} {
		ios, stdout, stderr := testIOStreams(tty)
		round := 0
		err := watch(ios, minWatch, func() error {
			round++
			if round == 1 {
				_, err := ios.Out.Write([]byte("frame 1\n"))
				return err
			}
			return gone
		})
		require.NoError(t, err, "tty %v", tty)
		require.Equal(t, watchRounds, round, "tty %v", tty)
		assert.Contains(t, stdout.String(), "frame 1", "tty %v", tty)
		shown := stdout
		if !tty {
			shown = stderr
			assert.Equal(t, "frame 1\n", stdout.String(), "in a pipe, no error among the rows")
		}
		assert.Contains(t, shown.String(), `shmctl: the segment is gone\x1b[2J`, "tty %v: the error, escaped", tty)
		assert.NotContains(t, shown.String(), "\x1b[2J", "tty %v: no raw escape sequence", tty)

		ios, _, _ = testIOStreams(tty)
		err = watch(ios, minWatch, func() error { return gone })
		require.ErrorIs(t, err, gone, "tty %v: the first round", tty)
	}
}

// In a pipe, --json's rounds are a stream of documents that jq reads: a
// later round that fails says so on stderr, as every error, and prints no
// document. Its error line used to go into the stream, and jq stopped
// there (parse error: Invalid numeric literal). On a terminal the error
// still takes the frame's place.
func TestWatchJSONStreamStaysJSON(t *testing.T) {
	t.Parallel()
	gone := errors.New("the segment is gone")
	for _, tty := range []bool{false, true} {
		ios, stdout, stderr := testIOStreams(tty)
		root := &cobra.Command{Use: "shmctl"}
		round := 0
		info := &cobra.Command{Use: "info", RunE: func(cmd *cobra.Command, args []string) error {
			round++
			if round == 1 {
				return writeJSON(ios.Out, header("info"))
			}
			return gone
		}}
		var doc bool
		addJSONFlag(info, &doc)
		root.AddCommand(info)
		addWatch(root, ios)
		root.SetArgs([]string{"info", "--json", "--watch", "100ms"})
		require.NoError(t, root.Execute(), "tty %v", tty)
		require.Equal(t, watchRounds, round, "tty %v", tty)
		if tty {
			assert.Contains(t, stdout.String(), "shmctl: the segment is gone", "on a terminal, in place of the frame")
			continue
		}
		out := stdout.String()
		dec := json.NewDecoder(strings.NewReader(out))
		for dec.More() {
			var v map[string]any
			require.NoError(t, dec.Decode(&v), "stdout %q", out)
			assert.Equal(t, "info", v["command"])
		}
		assert.Equal(t, "shmctl: the segment is gone\n", stderr.String())
	}

}
