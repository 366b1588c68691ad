package clib_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
)

// A C remover killed with the segment's name aside leaves a hidden name
// that Go reads as its own (one format, FORMAT.md): the C process's
// identity and PID namespace, and the name, or the digest of a name too
// long to keep. Go
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
		assert.Equal(t, ownNamespace(t), l.PIDNamespace, "%s: the remover's namespace", tc.name)
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

// A C creator killed between making the segment under a hidden name (as
// on a file system without O_TMPFILE) and linking it leaves a name that
// Go reads as its own (fsys.PendingName): the C process's identity and
// PID namespace, so Go proves it dead and removes the file. libshmlock's name held its pid and
// a random number only, and nothing ever removed it.
func TestGoRecoversCPending(t *testing.T) {
	t.Parallel()
	dir := testproc.SegmentPath(t)
	require.NoError(t, os.Mkdir(dir, 0o700))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "seg")
	creator := startC(t, "segment", "create-dies", path)
	creator.WaitKilled(t)
	pending, err := filepath.Glob(filepath.Join(dir, fsys.PendingPrefix+"*"))
	require.NoError(t, err)
	require.Len(t, pending, 1, "the killed creator's pending file")
	id, ok := fsys.ParsePendingName(filepath.Base(pending[0]))
	require.True(t, ok, "Go reads its name: %s", pending[0])
	require.EqualValues(t, creator.PID(), id.PID)
	require.Equal(t, ownNamespace(t), id.PIDNamespace, "its name says its PID namespace")

	found, err := shm.RecoverLeftoversOf(path, false)
	require.NoError(t, err)
	require.Equal(t, []shm.Leftover{{Path: pending[0], Remover: id.Pack(), PIDNamespace: id.PIDNamespace, Pending: true, Users: []int{},
		Action: shm.LeftoverRemoved}}, found)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

// ownNamespace is the inode of this process's PID namespace.
func ownNamespace(t *testing.T) uint64 {
	t.Helper()
	ns, err := proc.PIDNamespace()
	require.NoError(t, err)
	return ns
}
