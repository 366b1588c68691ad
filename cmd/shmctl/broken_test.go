package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
)

// Read commands on files that are not whole segments fail with one line
// and exit status 1, print nothing on stdout, and do not panic.
func TestReadBrokenSegment(t *testing.T) {
	t.Parallel()
	files := map[string]func(t *testing.T) string{
		"missing": func(t *testing.T) string { return testproc.SegmentPath(t) },
		"truncated": func(t *testing.T) string {
			seg := newSegment(t, layout.Options{})
			whole, err := os.ReadFile(seg.Path())
			require.NoError(t, err)
			return writeFile(t, whole[:100])
		},
		"garbage": func(t *testing.T) string {
			return writeFile(t, bytes.Repeat([]byte("garbage!"), layout.PageSize/8))
		},
		"empty":     func(t *testing.T) string { return writeFile(t, nil) },
		"directory": func(t *testing.T) string { return t.TempDir() },
	}
	for name, file := range files {
		for _, args := range [][]string{{"info"}, {"info", "--json"}, {"slots"}, {"slots", "--all", "--json"}, {"rwlocks"}, {"rwlocks", "--all", "--json"}} {
			t.Run(name+"/"+args[0]+"/"+args[len(args)-1], func(t *testing.T) {
				t.Parallel()
				path := file(t)
				for _, tty := range []bool{false, true} {
					line := requireOneLineError(t, shmctl(t, tty, append(args, path)...), exitError)
					assert.Contains(t, line, path)
				}
			})
		}
	}
}

// writeFile writes b to a fresh test segment path.
func writeFile(tb testing.TB, b []byte) string {
	tb.Helper()
	path := testproc.SegmentPath(tb)
	require.NoError(tb, os.WriteFile(path, b, 0o600))
	return path
}
