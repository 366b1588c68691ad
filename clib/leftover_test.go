package clib_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
)

// A C remover killed with the segment's name aside leaves a hidden name
// that Go reads as its own (one format, FORMAT.md): the C process's
// identity and the name, or the digest of a name too long to keep. Go
// puts the leftover of a segment in use back under its name and removes
// an unused one. Before, libshmlock's hidden name held its pid and the
// time only, and Go's held the pid and the time in another notation.
func TestGoRecoversCLeftovers(t *testing.T) {
	t.Parallel()
	dir := testproc.SegmentPath(t) // a directory: RecoverLeftovers meets no other test's files
	require.NoError(t, os.Mkdir(dir, 0o700))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	for _, tc := range []struct {
		name  string
		inUse bool
	}{{"unused", false}, {"in-use", true}, {strings.Repeat("long", 60), true}} {
		path := filepath.Join(dir, tc.name)
		seg, err := shm.Create(path, shm.Options{})
		require.NoError(t, err)
		if tc.inUse {
			defer seg.Close()
		} else {
			require.NoError(t, seg.Close())
		}
		remover := startCWithStdin(t, "segment", "remove-dies", path)
		remover.WaitLine(t, "ready")
		id := remover.Identity(t)
		remover.Send(t, "go")
		remover.WaitKilled(t)
		_, err = os.Lstat(path)
		require.ErrorIs(t, err, os.ErrNotExist, "%s: the name is not aside", tc.name)

		found, err := shm.RecoverLeftoversOf(path, false)
		require.NoError(t, err)
		require.Len(t, found, 1, tc.name)
		l := found[0]
		assert.Equal(t, id, l.Remover, "%s: the remover", tc.name)
		assert.Equal(t, path, l.Name)
		want := shm.LeftoverRemoved
		if tc.inUse {
			want = shm.LeftoverRestored
		}
		assert.Equal(t, want, l.Action, "%s: %v", tc.name, l.Err)
		_, err = os.Lstat(path)
		assert.Equal(t, tc.inUse, err == nil, "%s: back under its name: %v", tc.name, err)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, strings.HasPrefix(e.Name(), ".shmlock-rm-"), "left: %s", e.Name())
	}
}
