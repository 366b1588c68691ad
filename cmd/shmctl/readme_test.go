package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every shmctl command line in the README's shell blocks names a command,
// flags and arguments that the current CLI accepts, so the README cannot
// drift from it unnoticed. (The commands are parsed, not run.)
func TestReadmeCommandLines(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	var lines []string
	inShell := false
	for line := range strings.Lines(string(readme)) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "```"):
			inShell = line == "```sh"
		case inShell:
			line, _, _ = strings.Cut(line, " #")
			// As the shell expands it: the README holds locks for "$$".
			line = strings.ReplaceAll(strings.TrimSpace(line), "$$", "4242")
			for _, prefix := range []string{"./shmctl ", "go run ./cmd/shmctl "} {
				if rest, ok := strings.CutPrefix(line, prefix); ok {
					lines = append(lines, rest)
				}
			}
		}
	}
	require.GreaterOrEqual(t, len(lines), 10, "shmctl lines found in README.md")
	seen := map[string]bool{}
	for _, line := range lines {
		ios, _, _ := testIOStreams(false)
		cmd, rest, err := newCmdRoot(ios).Find(strings.Fields(line))
		if !assert.NoError(t, err, "README: shmctl %s", line) ||
			!assert.True(t, cmd.HasParent(), "README: shmctl %s: no such command", line) {
			continue
		}
		seen[cmd.Name()] = true
		if !assert.NoError(t, cmd.ParseFlags(rest), "README: shmctl %s", line) {
			continue
		}
		assert.NoError(t, cmd.ValidateArgs(cmd.Flags().Args()), "README: shmctl %s", line)
	}
	for _, name := range []string{"create", "info", "slots", "rwlocks", "txns", "locks", "stats", "lock", "reclaim", "rm", "demo", "bench"} {
		assert.True(t, seen[name], "README shows no 'shmctl %s' line", name)
	}
}
