package shm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
)

func init() {
	// pending PATH die|stop|wait: Create PATH as on a file system without
	// O_TMPFILE, and once the segment is complete under its hidden name,
	// before it is linked, kill -9 itself (die), stop itself (stop), or
	// print "pending" and wait for a line on stdin (wait: the init of a PID
	// namespace cannot stop itself, see testproc's StartInNewPIDNamespace);
	// let go on, it finishes and prints the result.
	helpers["pending"] = func(args []string) int {
		fsys.SetNoTmpfile(true)
		hook := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
		switch args[1] {
		case "stop":
			hook = func() { _ = testproc.StopSelf() } // see StopSelf: a SIGSTOP to the process may stop it late
		case "wait":
			hook = waitForWord("pending")
		}
		shm.SetTestHookBeforeLink(hook)
		seg, err := shm.Create(args[0], shm.Options{})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("created")
		_ = seg.Close()
		return 0
	}
	// recover-die DIR: RecoverLeftovers(DIR) and kill -9 itself once it
	// has moved a file it removes aside, before the unlink.
	helpers["recover-die"] = func(args []string) int {
		shm.SetTestHookAside(func(string) { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
		found, err := shm.RecoverLeftovers(args[0], false)
		fmt.Println("recovered", found, err)
		return 3 // not reached
	}
}

// pendingFiles lists the pending files (.shmlock-init-*) in dir.
func pendingFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, fsys.PendingPrefix+"*"))
	require.NoError(t, err)
	return names
}

// A creator killed between making the segment under a hidden name (a file
// system without O_TMPFILE) and linking it under its name leaves that
// file, which says who made it: once the creator is dead, RecoverLeftoversOf
// (shmctl rm and reclaim) removes it, and keeps a live creator's. The
// hidden name held the pid and the time only, so no process could prove
// its creator dead, and nothing ever removed it.
func TestRecoverPendingOfKilledCreator(t *testing.T) {
	t.Parallel()
	dir := leftoverDir(t)
	path := filepath.Join(dir, "seg")
	creator := testproc.Start(t, "pending", path, "die")
	creator.WaitKilled(t)
	_, err := os.Lstat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "never linked")
	files := pendingFiles(t, dir)
	require.Len(t, files, 1, "the killed creator's pending file")
	id, ok := fsys.ParsePendingName(filepath.Base(files[0]))
	require.True(t, ok, "its name says who made it: %s", files[0])
	require.EqualValues(t, creator.PID(), id.PID)

	found, err := shm.RecoverLeftoversOf(path, true)
	require.NoError(t, err)
	require.Equal(t, ownNamespace(t), id.PIDNamespace)
	require.Equal(t, []shm.Leftover{{Path: files[0], Remover: id.Pack(), PIDNamespace: id.PIDNamespace, Pending: true, Users: []int{}, Action: shm.LeftoverRemoved}}, found)
	require.Equal(t, files, pendingFiles(t, dir), "a dry run removes nothing")

	found, err = shm.RecoverLeftoversOf(path, false)
	require.NoError(t, err)
	require.Equal(t, []shm.Leftover{{Path: files[0], Remover: id.Pack(), PIDNamespace: id.PIDNamespace, Pending: true, Users: []int{}, Action: shm.LeftoverRemoved}}, found)
	require.Empty(t, pendingFiles(t, dir), "removed")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing left, not even a hidden name of the removal")

	found, err = shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Empty(t, found)
}

// A live creator's pending file is kept, whatever else is done: it is
// being made. Continued, the creator links it as usual.
func TestRecoverPendingKeepsLiveCreators(t *testing.T) {
	t.Parallel()
	dir := leftoverDir(t)
	path := filepath.Join(dir, "seg")
	creator := testproc.Start(t, "pending", path, "stop")
	creator.WaitStopped(t)
	files := pendingFiles(t, dir)
	require.Len(t, files, 1)
	found, err := shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, shm.LeftoverKept, found[0].Action)
	assert.True(t, found[0].Pending)
	assert.ErrorIs(t, found[0].Err, shm.ErrCreatorAlive)
	require.Equal(t, files, pendingFiles(t, dir), "kept")

	require.NoError(t, syscall.Kill(creator.PID(), syscall.SIGCONT))
	require.Equal(t, "created\n", creator.WaitOK(t))
	require.Empty(t, pendingFiles(t, dir), "linked, and its hidden name removed")
	require.NoError(t, shm.Remove(path))
}

// The name's start time proves a creator dead whose pid a live process
// has now (here, this one's), in the name of this release or of the
// previous one, which does not say the namespace; a name of an older
// release, which has no start time, is never taken for one, and neither
// is another user's file or anything but a regular file.
func TestRecoverPendingByIdentity(t *testing.T) {
	t.Parallel()
	dir := leftoverDir(t)
	self, err := fsys.SelfMaker()
	require.NoError(t, err)
	reused := deadMaker(t)
	dead := filepath.Join(dir, fsys.PendingName(reused, 0xabc))
	live := filepath.Join(dir, fsys.PendingName(self, 0xabc))
	old := filepath.Join(dir, fsys.PendingPrefix+strconv.Itoa(int(self.PID))+"-"+strconv.FormatInt(1e18, 36))
	previous := filepath.Join(dir, fsys.PendingName(fsys.Maker{Identity: reused.Identity}, 0x123))
	fifo := filepath.Join(dir, fsys.PendingName(reused, 0xdef))
	for _, p := range []string{dead, live, old, previous} {
		require.NoError(t, os.WriteFile(p, nil, 0o600))
	}
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))

	found, err := shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, 4, "the old name is none of its")
	byPath := map[string]shm.Leftover{}
	for _, l := range found {
		byPath[l.Path] = l
	}
	assert.Equal(t, shm.LeftoverRemoved, byPath[dead].Action, "%v", byPath[dead].Err)
	assert.ErrorIs(t, byPath[live].Err, shm.ErrCreatorAlive)
	assert.ErrorIs(t, byPath[fifo].Err, shm.ErrNotRegular)
	assert.Equal(t, shm.LeftoverRemoved, byPath[previous].Action, "%v", byPath[previous].Err)
	assert.Zero(t, byPath[previous].PIDNamespace)
	for p, want := range map[string]bool{dead: false, live: true, old: true, fifo: true, previous: false} {
		_, err := os.Lstat(p)
		assert.Equal(t, want, err == nil, "%s: %v", filepath.Base(p), err)
	}
}

// A recovery killed while it removes a dead creator's pending file, once
// it has moved the file aside (as every removal does, see Remove), leaves
// it under a remover's hidden name that keeps the pending name as its
// origin. The next recovery removes it as the pending file it is: its
// contents are no segment's (a creator killed early wrote no header, or
// part of one), and it never had a segment's name to be put back under.
// Before, it was taken for a removed segment and kept for good, for want
// of a header (layout's error).
func TestRecoverPendingOfKilledRecovery(t *testing.T) {
	t.Parallel()
	dir := leftoverDir(t)
	pending := filepath.Join(dir, fsys.PendingName(deadMaker(t), 0xabc))
	require.NoError(t, os.WriteFile(pending, []byte("part of a header"), 0o600))
	recoverer := testproc.Start(t, "recover-die", dir)
	recoverer.WaitKilled(t)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the file, under a hidden name of the killed recovery")
	aside := filepath.Join(dir, entries[0].Name())
	require.NotEqual(t, pending, aside, "moved aside")

	found, err := shm.RecoverLeftoversOf(filepath.Join(dir, "seg"), true)
	require.NoError(t, err)
	require.Len(t, found, 1, "a look for one segment's leftovers finds it too, as a dead creator's file")
	assert.Equal(t, shm.LeftoverRemoved, found[0].Action, "%v", found[0].Err)
	found, err = shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, aside, found[0].Path)
	assert.True(t, found[0].Pending)
	assert.Empty(t, found[0].Name)
	assert.EqualValues(t, recoverer.PID(), found[0].Remover&proc.MaxPID, "the killed recovery moved it")
	assert.Equal(t, shm.LeftoverRemoved, found[0].Action, "%v", found[0].Err)
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing left")
}

// Create refuses a name of the form leftover recovery gives the hidden
// files of segments being made or removed (ErrBadPath): a segment made
// under one would later be taken for a dead process's leftover, and
// RecoverLeftovers (shmctl leftovers --recover, rm, reclaim) would remove
// it, with its locks, at the first moment nobody had it open. The name
// here says a maker whose pid is this process's but whose start time is
// not, so a recovery proves it dead.
func TestCreateRefusesHiddenNames(t *testing.T) {
	t.Parallel()
	dir := leftoverDir(t)
	gone, err := fsys.SelfMaker()
	require.NoError(t, err)
	gone.StartTicks = (gone.StartTicks + 1) & proc.MaxStart
	for _, name := range []string{fsys.PendingName(gone, 1), shm.AsideName(gone, "seg", 1)} {
		path := filepath.Join(dir, name)
		seg, err := shm.Create(path, shm.Options{})
		if err == nil {
			require.NoError(t, seg.Close())
			found, rerr := shm.RecoverLeftovers(dir, false)
			t.Logf("made %s; RecoverLeftovers: %+v %v", name, found, rerr)
		}
		require.ErrorIs(t, err, shm.ErrBadPath, name)
		seg, err = shm.OpenOrCreate(path, shm.Options{})
		if err == nil {
			require.NoError(t, seg.Close())
		}
		require.ErrorIs(t, err, shm.ErrBadPath, name)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "nothing made")
	}
}
