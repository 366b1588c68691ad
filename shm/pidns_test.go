package shm_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
)

func init() {
	// aside-wait PATH: Remove PATH; once the name is moved aside, print
	// "aside" and wait for a line on stdin, then finish and print the
	// result.
	helpers["aside-wait"] = func(args []string) int {
		wait := waitForWord("aside")
		shm.SetTestHookAside(func(string) { wait() })
		fmt.Println("removed", shm.Remove(args[0]))
		return 0
	}
	// recover DIR: RecoverLeftovers(DIR) and print a line for each
	// leftover: "leftover BASE ACTION foreign=BOOL: ERROR".
	helpers["recover"] = func(args []string) int {
		found, err := shm.RecoverLeftovers(args[0], false)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		for _, l := range found {
			fmt.Printf("leftover %s %s foreign=%v: %v\n", filepath.Base(l.Path), l.Action, errors.Is(l.Err, shm.ErrForeignNamespace), l.Err)
		}
		fmt.Println("done")
		return 0
	}
}

// waitForWord is a hook that prints line and waits for a line on stdin.
func waitForWord(line string) func() {
	return func() {
		fmt.Println(line)
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
	}
}

// A hidden name says which PID namespace its maker is of, and a process of
// another namespace never judges it: there the maker's pid names another
// process or none, and its descriptors are not in /proc. Such a file, a
// pending file or a removed segment, is kept (ErrForeignNamespace),
// whether its maker's identity names a live process or, as here, none;
// those of this namespace are recovered as ever. A look for one segment's
// leftovers lists a foreign pending file no more than a live creator's.
func TestRecoverLeftoversKeepsForeignNamespaces(t *testing.T) {
	t.Parallel()
	dir := leftoverDir(t)
	dead := deadMaker(t)
	foreign := dead
	foreign.PIDNamespace++
	seg, err := shm.Create(filepath.Join(dir, "target"), shm.Options{})
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	segment := func(hidden string) string {
		p := filepath.Join(dir, hidden)
		require.NoError(t, os.Link(filepath.Join(dir, "target"), p))
		return p
	}
	pending := func(hidden string) string {
		p := filepath.Join(dir, hidden)
		require.NoError(t, os.WriteFile(p, []byte("part of a header"), 0o600))
		return p
	}
	keep := map[string]bool{
		pending(fsys.PendingName(foreign, 1)):                         true,
		pending(shm.AsideName(foreign, fsys.PendingName(dead, 2), 3)): true, // a foreign recovery's, killed
		segment(shm.AsideName(foreign, "target", 4)):                  true,
		pending(fsys.PendingName(dead, 5)):                            false,
		pending(shm.AsideName(dead, fsys.PendingName(foreign, 6), 7)): false, // a recovery of this namespace moved it: its own
		segment(shm.AsideName(dead, "target", 8)):                     false,
	}
	require.NoError(t, os.Remove(filepath.Join(dir, "target")))

	found, err := shm.RecoverLeftoversOf(filepath.Join(dir, "target"), true)
	require.NoError(t, err)
	var paths []string
	for _, l := range found {
		paths = append(paths, l.Path)
	}
	assert.ElementsMatch(t, []string{filepath.Join(dir, shm.AsideName(foreign, "target", 4)),
		filepath.Join(dir, fsys.PendingName(dead, 5)), filepath.Join(dir, shm.AsideName(dead, fsys.PendingName(foreign, 6), 7)),
		filepath.Join(dir, shm.AsideName(dead, "target", 8))}, paths)

	found, err = shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, len(keep))
	for _, l := range found {
		if keep[l.Path] {
			assert.Equal(t, shm.LeftoverKept, l.Action, l.Path)
			assert.ErrorIs(t, l.Err, shm.ErrForeignNamespace, l.Path)
			assert.Equal(t, foreign.PIDNamespace, l.PIDNamespace, l.Path)
		} else {
			assert.Equal(t, shm.LeftoverRemoved, l.Action, "%s: %v", l.Path, l.Err)
			assert.Equal(t, dead.PIDNamespace, l.PIDNamespace, l.Path)
		}
		assert.Equal(t, dead.Pack(), l.Remover, l.Path)
		_, err := os.Lstat(l.Path)
		assert.Equal(t, keep[l.Path], err == nil, "%s: %v", l.Path, err)
	}
}

// A creator of this namespace makes a segment under a hidden name (no
// O_TMPFILE) while a recovery runs in a container that shares the
// directory, a PID namespace of its own with its own /proc: there the
// creator's pid names no process, and its open descriptor is not shown.
// The recovery keeps the file, and the creator links it. Before, the
// recovery judged the creator dead and nobody using the file, removed it,
// and the creator's link failed (ENOENT). Not parallel, nor the two
// below: see StartInNewPIDNamespace.
func TestRecoverPendingOfAnotherNamespacesCreator(t *testing.T) {
	dir := leftoverDir(t)
	path := filepath.Join(dir, "seg")
	creator := testproc.StartWithStdin(t, "pending", path, "wait")
	creator.WaitLine(t, "pending")
	files := pendingFiles(t, dir)
	require.Len(t, files, 1)

	recovery := testproc.StartInNewPIDNamespace(t, "recover", dir)
	out := recovery.WaitOK(t)
	line, ok := testproc.Line(out, "leftover "+filepath.Base(files[0])+" ")
	require.True(t, ok, "the pending file is not reported; output:\n%s", out)
	assert.Contains(t, line, string(shm.LeftoverKept)+" foreign=true:", "output:\n%s", out)
	require.Equal(t, files, pendingFiles(t, dir), "the recovery removed the pending file")

	creator.Send(t, "link")
	assert.Contains(t, creator.WaitOK(t), "created")
	require.Empty(t, pendingFiles(t, dir))
	require.NoError(t, shm.Remove(path))
}

// The other way round: the creator runs in a container, and a recovery
// here keeps its pending file, as of another namespace; the creator links
// it. Before, the recovery took the creator's pid, pid 1 in its namespace,
// for this namespace's pid 1, another process: the creator dead. Only the
// creator's descriptor, which this namespace's /proc shows, kept the file
// (ErrLeftoverInUse), and a creator between its close and its link would
// have lost it.
func TestRecoverPendingOfCreatorInAnotherNamespace(t *testing.T) {
	dir := leftoverDir(t)
	path := filepath.Join(dir, "seg")
	creator := testproc.StartInNewPIDNamespace(t, "pending", path, "wait")
	creator.WaitLine(t, "pending")
	files := pendingFiles(t, dir)
	require.Len(t, files, 1)

	found, err := shm.RecoverLeftoversOf(path, false)
	require.NoError(t, err)
	require.Empty(t, found, "a look for one segment's leftovers lists a pending file of another namespace")
	found, err = shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, files[0], found[0].Path)
	assert.True(t, found[0].Pending)
	assert.Equal(t, shm.LeftoverKept, found[0].Action)
	assert.ErrorIs(t, found[0].Err, shm.ErrForeignNamespace)
	assert.NotEqual(t, ownNamespace(t), found[0].PIDNamespace)
	require.Equal(t, files, pendingFiles(t, dir), "the recovery removed the pending file")

	creator.Send(t, "link")
	assert.Contains(t, creator.WaitOK(t), "created")
	require.Empty(t, pendingFiles(t, dir))
	require.NoError(t, shm.Remove(path))
}

// A remover in a container, its segment's name moved aside, meets a
// recovery here: the leftover is kept, as of another namespace, and the
// remover finishes. Before, the recovery took the remover's pid 1 for
// this namespace's, another process, judged the remover dead and, since
// the remover's own descriptor shows the file in use, put it back under
// its name in the middle of the removal.
func TestRecoverLeftoverOfRemoverInAnotherNamespace(t *testing.T) {
	dir := leftoverDir(t)
	path := filepath.Join(dir, "seg")
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	remover := testproc.StartInNewPIDNamespace(t, "aside-wait", path)
	remover.WaitLine(t, "aside")
	asides, err := filepath.Glob(filepath.Join(dir, ".shmlock-rm-*"))
	require.NoError(t, err)
	require.Len(t, asides, 1)

	found, err := shm.RecoverLeftoversOf(path, false)
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, asides[0], found[0].Path)
	assert.Equal(t, shm.LeftoverKept, found[0].Action)
	assert.ErrorIs(t, found[0].Err, shm.ErrForeignNamespace)
	_, err = os.Lstat(asides[0])
	require.NoError(t, err, "the recovery touched a live remover's file")

	remover.Send(t, "unlink")
	assert.Contains(t, remover.WaitOK(t), "removed <nil>")
	requireEmptyDir(t, dir)
}
