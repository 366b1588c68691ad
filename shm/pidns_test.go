package shm_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/proc"
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
	// maker: print "maker " and this process as a hidden name says it
	// (fsys.FormatMaker), then wait for a line on stdin.
	helpers["maker"] = func([]string) int {
		self, err := fsys.SelfMaker()
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		waitForWord("maker " + fsys.FormatMaker(self))()
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

func init() {
	// recover-hidepid DIR: in a mount namespace of its own, mount on
	// /proc a proc of this PID namespace with hidepid=invisible, then do
	// what recover does; exit testproc.ExitCannotMount if the mount is
	// refused (EPERM, EACCES; EINVAL before Linux 5.8, where hidepid is no
	// mount's own but the whole namespace's, and has no "invisible").
	helpers["recover-hidepid"] = func(args []string) int {
		err := unix.Mount("none", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		if err == nil {
			err = unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible")
		}
		if err != nil {
			fmt.Println("mount:", err)
			if testproc.MountRefused(err) || errors.Is(err, syscall.EINVAL) {
				return testproc.ExitCannotMount
			}
			return 2
		}
		return helpers["recover"](args)
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

// goneNamespace is the PID namespace of makers whose namespace has no
// process: no namespace has inode 1 (theirs are the kernel's fixed ones
// of the initial namespaces, and from 0xF0000000 up).
const goneNamespace = 1

// A hidden name says which PID namespace its maker is of, and a process of
// another namespace judges it only where it can be sure: here, one whose
// namespace has no process (it ended) is dead if this is the initial
// namespace, which sees every process, and cannot be judged elsewhere,
// where that namespace may be out of sight (ErrForeignNamespace). Such a
// file, a pending file or a removed segment, is removed or kept
// accordingly; those of this namespace are recovered as ever. A look for
// one segment's leftovers lists a pending file it cannot judge no more
// than a live creator's. Before, a maker of another namespace was never
// judged, and a container's leftovers waited for an operator for good.
func TestRecoverLeftoversOfGoneNamespaces(t *testing.T) {
	t.Parallel()
	dir := leftoverDir(t)
	dead := deadMaker(t)
	foreign := dead
	foreign.PIDNamespace = goneNamespace
	judged := ownNamespace(t) == proc.InitialPIDNamespace
	t.Logf("this is the initial PID namespace: %v", judged)
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
	isForeign := map[string]bool{
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
	want := []string{filepath.Join(dir, shm.AsideName(foreign, "target", 4)),
		filepath.Join(dir, fsys.PendingName(dead, 5)), filepath.Join(dir, shm.AsideName(dead, fsys.PendingName(foreign, 6), 7)),
		filepath.Join(dir, shm.AsideName(dead, "target", 8))}
	if judged {
		want = append(want, filepath.Join(dir, fsys.PendingName(foreign, 1)),
			filepath.Join(dir, shm.AsideName(foreign, fsys.PendingName(dead, 2), 3)))
	}
	assert.ElementsMatch(t, want, paths)

	found, err = shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, len(isForeign))
	for _, l := range found {
		kept := isForeign[l.Path] && !judged
		if kept {
			assert.Equal(t, shm.LeftoverKept, l.Action, l.Path)
			assert.ErrorIs(t, l.Err, shm.ErrForeignNamespace, l.Path)
		} else {
			assert.Equal(t, shm.LeftoverRemoved, l.Action, "%s: %v", l.Path, l.Err)
		}
		if isForeign[l.Path] {
			assert.Equal(t, foreign.PIDNamespace, l.PIDNamespace, l.Path)
		} else {
			assert.Equal(t, dead.PIDNamespace, l.PIDNamespace, l.Path)
		}
		assert.Equal(t, dead.Pack(), l.Remover, l.Path)
		_, err := os.Lstat(l.Path)
		assert.Equal(t, kept, err == nil, "%s: %v", l.Path, err)
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
// here, its parent namespace, finds it by its pid in its own namespace
// and keeps its pending file, a live creator's (ErrCreatorAlive); the
// creator links it. This also shows that a start time that a process
// read in its PID namespace is the one its parent's /proc shows. Before
// the pid in its own namespace was looked for, the file was kept as of
// another namespace that no process here could judge
// (ErrForeignNamespace); and before names said the namespace, the
// recovery took the creator's pid, pid 1 in its namespace, for this
// namespace's pid 1, another process: the creator dead.
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
	assert.ErrorIs(t, found[0].Err, shm.ErrCreatorAlive)
	assert.NotErrorIs(t, found[0].Err, shm.ErrForeignNamespace)
	assert.NotEqual(t, ownNamespace(t), found[0].PIDNamespace)
	require.Equal(t, files, pendingFiles(t, dir), "the recovery removed the pending file")

	creator.Send(t, "link")
	assert.Contains(t, creator.WaitOK(t), "created")
	require.Empty(t, pendingFiles(t, dir))
	require.NoError(t, shm.Remove(path))
}

// A remover in a container, its segment's name moved aside, meets a
// recovery here, in its parent namespace: the leftover is kept, its
// remover found alive (ErrRemoverAlive; before the pid in its own
// namespace was looked for, ErrForeignNamespace), and the remover
// finishes. Before names said the namespace, the recovery took the
// remover's pid 1 for this namespace's, another process, judged the
// remover dead and, since the remover's own descriptor shows the file in
// use, put it back under its name in the middle of the removal.
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
	assert.ErrorIs(t, found[0].Err, shm.ErrRemoverAlive)
	assert.NotErrorIs(t, found[0].Err, shm.ErrForeignNamespace)
	_, err = os.Lstat(asides[0])
	require.NoError(t, err, "the recovery touched a live remover's file")

	remover.Send(t, "unlink")
	assert.Contains(t, remover.WaitOK(t), "removed <nil>")
	requireEmptyDir(t, dir)
}

// A creator in a container is killed before it links its segment, and
// its container ends with it (the creator was its namespace's init): a
// recovery here, in the parent namespace, finds no process of that
// namespace left, and removes the pending file, as a dead creator's of
// this namespace. Before, the file was kept as of another namespace
// (ErrForeignNamespace), for an operator to remove by hand.
func TestRecoverPendingOfKilledCreatorInChildNamespace(t *testing.T) {
	dir := leftoverDir(t)
	creator := testproc.StartInNewPIDNamespace(t, "pending", filepath.Join(dir, "seg"), "wait")
	creator.WaitLine(t, "pending")
	files := pendingFiles(t, dir)
	require.Len(t, files, 1)
	creator.Kill(t)

	found, err := shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, files[0], found[0].Path)
	assert.Equal(t, shm.LeftoverRemoved, found[0].Action, "%v", found[0].Err)
	requireEmptyDir(t, dir)
}

// Names of makers in a container that runs, which a recovery here, in its
// parent namespace, judges by their pids in the container's namespace:
// the container's process itself (pid 1 there) with its start time is
// alive (kept, ErrCreatorAlive); with another start time its pid names a
// later process, so that maker is dead (removed); and no process there
// has pid 2: dead too. The container's /proc says the same (its
// own recovery of the directory, run afterwards, finds the one file
// left, kept). Before, all three were kept as of another namespace
// (ErrForeignNamespace).
func TestRecoverJudgesMakersInChildNamespace(t *testing.T) {
	dir := leftoverDir(t)
	child := testproc.StartInNewPIDNamespace(t, "maker")
	m := childMaker(t, child)
	require.NotEqual(t, ownNamespace(t), m.PIDNamespace)
	reused, absent := m, m
	reused.StartTicks++
	absent.PID = 2
	live, dead1, dead2 := writePending(t, dir, m, 1), writePending(t, dir, reused, 2), writePending(t, dir, absent, 3)

	found, err := shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	got := map[string]shm.Leftover{}
	for _, l := range found {
		got[l.Path] = l
	}
	require.Len(t, got, 3)
	assert.Equal(t, shm.LeftoverKept, got[live].Action)
	assert.ErrorIs(t, got[live].Err, shm.ErrCreatorAlive)
	for _, p := range []string{dead1, dead2} {
		assert.Equal(t, shm.LeftoverRemoved, got[p].Action, "%s: %v", p, got[p].Err)
	}
	assert.Equal(t, []string{live}, pendingFiles(t, dir))

	recovery := testproc.StartInNewPIDNamespace(t, "recover", dir)
	out := recovery.WaitOK(t)
	line, ok := testproc.Line(out, "leftover "+filepath.Base(live)+" ")
	require.True(t, ok, "the pending file is not reported; output:\n%s", out)
	assert.Contains(t, line, string(shm.LeftoverKept)+" foreign=true:", "a sibling namespace's; output:\n%s", out)

	child.Send(t, "done")
	child.WaitOK(t)
	require.NoError(t, os.Remove(live))
}

// A recovery in a container cannot see its parent's processes, nor tell
// a namespace with no process left from one out of its sight: it keeps
// the files of a dead maker of its parent namespace and of one whose
// namespace is gone (ErrForeignNamespace). A recovery here removes the
// first, and the second too if this is the initial namespace, which sees
// every process. A recovery that took "no process of that namespace
// here" for "dead" would remove the file of a live maker of any
// namespace that is not below its own.
func TestRecoverInChildNamespaceKeepsUnseenNamespaces(t *testing.T) {
	dir := leftoverDir(t)
	parents := deadMaker(t)
	gone := parents
	gone.PIDNamespace = goneNamespace
	var files []string
	for i, m := range []fsys.Maker{parents, gone} {
		files = append(files, writePending(t, dir, m, uint64(i)))
	}

	recovery := testproc.StartInNewPIDNamespace(t, "recover", dir)
	out := recovery.WaitOK(t)
	for _, p := range files {
		line, ok := testproc.Line(out, "leftover "+filepath.Base(p)+" ")
		require.True(t, ok, "%s is not reported; output:\n%s", p, out)
		assert.Contains(t, line, string(shm.LeftoverKept)+" foreign=true:", "output:\n%s", out)
	}
	assert.ElementsMatch(t, files, pendingFiles(t, dir))

	found, err := shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, 2)
	initial := ownNamespace(t) == proc.InitialPIDNamespace
	for _, l := range found {
		if l.Path == files[1] && !initial {
			assert.ErrorIs(t, l.Err, shm.ErrForeignNamespace)
			require.NoError(t, os.Remove(l.Path))
			continue
		}
		assert.Equal(t, shm.LeftoverRemoved, l.Action, "%s: %v", l.Path, l.Err)
	}
	requireEmptyDir(t, dir)
}

// A maker in a container whose /proc is its host's (started with unshare
// --pid but no /proc of its own) reads its start time at its pid there,
// pid 1, this namespace's init: its hidden names carry that process's
// start. A recovery here finds the maker by its pid in its namespace, with
// another start time, but keeps its file (ErrForeignNamespace): the
// maker's /proc shows it the start its name has, so it may well run.
// Before, the start that differed judged it dead, and its file was
// removed under it.
func TestRecoverKeepsMakerWithAnotherNamespacesProc(t *testing.T) {
	dir := leftoverDir(t)
	child := testproc.StartInNewPIDNamespaceSharingProc(t, "maker")
	m := childMaker(t, child)
	hostInit, err := proc.Lookup(1)
	require.NoError(t, err)
	require.Equal(t, hostInit.StartTicks&proc.MaxStart, m.StartTicks, "the helper read this namespace's pid 1")
	pending := writePending(t, dir, m, 1)

	requireKeptForeign(t, dir, pending)

	child.Send(t, "done")
	child.WaitOK(t)
	require.NoError(t, os.Remove(pending))
}

// The same maker, its /proc its host's, but the process that /proc showed
// at its pid when it read its start has ended since, and a later one has
// that pid: its name's start is neither the maker's nor that of what its
// /proc shows at its pid now (made up here, as this namespace's pid 1
// never ends). A recovery here still keeps its file (ErrForeignNamespace):
// what the maker's /proc shows at its pid is not the maker, so nothing
// there says which start it read. Before, a start that differed from what
// the maker's /proc showed was taken for proof of a reused pid, and the
// live maker's file was removed under it.
func TestRecoverKeepsMakerWhoseProcShowsAnotherProcessNow(t *testing.T) {
	dir := leftoverDir(t)
	child := testproc.StartInNewPIDNamespaceSharingProc(t, "maker")
	m := childMaker(t, child)
	own, err := proc.Lookup(uint32(child.PID()))
	require.NoError(t, err)
	m.StartTicks = (m.StartTicks + 1) & proc.MaxStart
	require.NotEqual(t, own.StartTicks&proc.MaxStart, m.StartTicks)
	pending := writePending(t, dir, m, 1)

	requireKeptForeign(t, dir, pending)

	child.Send(t, "done")
	child.WaitOK(t)
	_ = os.Remove(pending)
}

// A recovery by another user than a container's, here in the container's
// host namespace, may not read the namespace (ns/pid) of the container's
// processes: where one of them has the maker's pid, in whatever
// namespace, that maker may be it and run. The recovery keeps the maker's
// file (ErrForeignNamespace). A scan that passed over such a process
// would find no process of the container's namespace, and, in the initial
// namespace, take the live maker for dead and remove its file.
func TestRecoverKeepsMakerWhoseNamespaceMayNotBeRead(t *testing.T) {
	const user = 64722
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the recovery as another user")
	}
	dir := leftoverDir(t)
	require.NoError(t, os.Chown(dir, user, user))
	child := testproc.StartInNewPIDNamespace(t, "maker")
	m := childMaker(t, child)
	pending := writePending(t, dir, m, 1)
	require.NoError(t, os.Chown(pending, user, user))

	out, err := testproc.CommandAs(t, testproc.User{UID: user, GID: user}, "recover", dir).CombinedOutput()
	require.NoError(t, err, "output:\n%s", out)
	line, ok := testproc.Line(string(out), "leftover "+filepath.Base(pending)+" ")
	require.True(t, ok, "the pending file is not reported; output:\n%s", out)
	assert.Contains(t, line, string(shm.LeftoverKept)+" foreign=true:", "output:\n%s", out)
	assert.Equal(t, []string{pending}, pendingFiles(t, dir), "the recovery removed a live maker's file")

	child.Send(t, "done")
	child.WaitOK(t)
}

// A recovery whose /proc is mounted with hidepid judges no maker of
// another namespace, though it is root and sees every process: /proc may
// hide the maker from it, or a process that has its pid. It keeps a live
// container's maker's file as of a namespace it cannot judge
// (ErrForeignNamespace). A scan that did not look at /proc's mount would
// judge it, and, where /proc hid it, take it for dead from the initial
// namespace (no test could make /proc hide a process from root).
func TestRecoverWithHidingProcJudgesNoOtherNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a /proc in the initial PID namespace")
	}
	dir := leftoverDir(t)
	child := testproc.StartInNewPIDNamespace(t, "maker")
	m := childMaker(t, child)
	pending := writePending(t, dir, m, 1)

	cmd := testproc.Command("recover-hidepid", dir)
	cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNS
	out, err := cmd.CombinedOutput()
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) && exit.ExitCode() == testproc.ExitCannotMount {
		t.Skipf("no /proc with hidepid=invisible: %s", out)
	}
	require.NoError(t, err, "output:\n%s", out)
	line, ok := testproc.Line(string(out), "leftover "+filepath.Base(pending)+" ")
	require.True(t, ok, "the pending file is not reported; output:\n%s", out)
	assert.Contains(t, line, string(shm.LeftoverKept)+" foreign=true:", "output:\n%s", out)
	assert.Contains(t, line, "hidepid", "output:\n%s", out)
	assert.Equal(t, []string{pending}, pendingFiles(t, dir))

	child.Send(t, "done")
	child.WaitOK(t)
}

// childMaker is the maker identity that a helper started in a PID
// namespace of its own says it is (its "maker" line): its namespace's
// init, pid 1 there.
func childMaker(t *testing.T, child *testproc.Child) fsys.Maker {
	t.Helper()
	m, rest, ok := fsys.CutMaker(child.WaitLine(t, "maker ") + "-")
	require.True(t, ok && rest == "", "helper's maker: %s", child.Out)
	require.EqualValues(t, 1, m.PID, "the helper is its namespace's init")
	return m
}

// writePending makes in dir the pending file that maker would have left,
// cut short: part of a header.
func writePending(t *testing.T, dir string, maker fsys.Maker, nonce uint64) string {
	t.Helper()
	p := filepath.Join(dir, fsys.PendingName(maker, nonce))
	require.NoError(t, os.WriteFile(p, []byte("part of a header"), 0o600))
	return p
}

// requireKeptForeign recovers dir's leftovers, in which pending, the one
// pending file, is of a maker that the recovery cannot judge: kept
// (ErrForeignNamespace).
func requireKeptForeign(t *testing.T, dir, pending string) {
	t.Helper()
	found, err := shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, shm.LeftoverKept, found[0].Action)
	assert.ErrorIs(t, found[0].Err, shm.ErrForeignNamespace)
	t.Log(found[0].Err)
	assert.Equal(t, []string{pending}, pendingFiles(t, dir))
}
