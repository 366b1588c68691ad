package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// manDir holds the man pages 'go generate ./cmd/shmctl' writes.
const manDir = "../../docs/man"

// The man pages in docs/man are those of the command tree as it is: a
// command, flag or help text changed without 'go generate ./cmd/shmctl'
// fails here.
func TestManPages(t *testing.T) {
	t.Parallel()
	ios, _, _ := testIOStreams(false)
	dir := t.TempDir()
	require.NoError(t, writeManPages(newCmdRoot(ios), dir))
	got, err := filepath.Glob(filepath.Join(dir, "*.1"))
	require.NoError(t, err)
	want, err := filepath.Glob(filepath.Join(manDir, "*.1"))
	require.NoError(t, err)
	names := func(paths []string) []string {
		out := make([]string, len(paths))
		for i, p := range paths {
			out[i] = filepath.Base(p)
		}
		slices.Sort(out)
		return out
	}
	require.Equal(t, names(want), names(got), "the pages of docs/man: run go generate ./cmd/shmctl")
	assert.Contains(t, names(got), "shmctl-slots.1")
	for _, p := range got {
		g, err := os.ReadFile(p)
		require.NoError(t, err)
		w, err := os.ReadFile(filepath.Join(manDir, filepath.Base(p)))
		require.NoError(t, err)
		assert.Equal(t, string(w), string(g), "docs/man/%s is out of date: run go generate ./cmd/shmctl", filepath.Base(p))
	}
	// The usage lines keep their <segment> (Markdown would take it for a tag).
	slots, err := os.ReadFile(filepath.Join(dir, "shmctl-slots.1"))
	require.NoError(t, err)
	assert.Contains(t, string(slots), `shmctl slots <segment> [flags]`)
}

// gen-man is hidden, and takes one directory.
func TestGenManCommand(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "man")
	r := shmctl(t, false, "gen-man", dir)
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	_, err := os.Stat(filepath.Join(dir, "shmctl.1"))
	assert.NoError(t, err)
	assert.NotContains(t, shmctl(t, false, "--help").stdout, "gen-man")
	requireOneLineError(t, shmctl(t, false, "gen-man"), exitUsage)
}
