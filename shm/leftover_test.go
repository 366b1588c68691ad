package shm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

func init() {
	// die-aside PATH: Remove PATH and kill -9 itself once the name is
	// moved aside, before the file is unlinked.
	helpers["die-aside"] = func(args []string) int {
		shm.SetTestHookAside(func(string) { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
		fmt.Println("error", shm.Remove(args[0]))
		return 3 // not reached
	}
	// stop-aside PATH: Remove PATH, stopping itself (SIGSTOP) once the
	// name is moved aside; continued, it finishes and prints the result.
	helpers["stop-aside"] = func(args []string) int {
		shm.SetTestHookAside(func(string) {
			if err := testproc.StopSelf(); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
		})
		fmt.Println("removed", shm.Remove(args[0]))
		return 0
	}
	// hold PATH: open the segment, print "ready" and sleep until killed.
	helpers["hold"] = func(args []string) int {
		seg, err := shm.Open(args[0], shm.Options{})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		defer seg.Close()
		fmt.Println("ready")
		select {}
	}
}

// leftoverDir makes a directory of the test's own for segments and their
// leftovers: RecoverLeftovers of it meets no other test's files.
func leftoverDir(t *testing.T) string {
	t.Helper()
	dir := testproc.SegmentPath(t)
	require.NoError(t, os.Mkdir(dir, 0o700))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// killedRemover makes a segment at path, lets use use it (nil: nobody
// does), and removes it in a helper that is killed with the name aside. It
// returns the segment's file as it was and its hidden path.
func killedRemover(t *testing.T, path string, use func(t *testing.T, path string)) (os.FileInfo, string) {
	t.Helper()
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	if use != nil {
		use(t, path)
	}
	fi, err := os.Stat(path)
	require.NoError(t, err)
	remover := testproc.Start(t, "die-aside", path)
	remover.WaitKilled(t)
	_, err = os.Lstat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "the name is not aside")
	asides, err := filepath.Glob(filepath.Join(filepath.Dir(path), fmt.Sprintf(".shmlock-rm-%d-*", remover.PID())))
	require.NoError(t, err)
	require.Len(t, asides, 1, "the remover's hidden names")
	return fi, asides[0]
}

// usedHere keeps the segment at path open in this process until the test
// ends.
func usedHere(t *testing.T, path string) {
	t.Helper()
	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
}

// A remover killed with the segment's name aside left a hidden file. The
// leftover of an unused segment is removed (its memory freed), the one of a
// segment in use put back under its name, where the processes that open
// it find the one the others use. Before, the hidden name told nothing of
// the segment's name nor of its remover, and nothing looked for such files:
// they stayed for ever, and a segment in use was lost from its name.
func TestRecoverLeftovers(t *testing.T) {
	t.Parallel()
	t.Run("unused", func(t *testing.T) {
		t.Parallel()
		dir := leftoverDir(t)
		_, aside := killedRemover(t, filepath.Join(dir, "jobs"), nil)
		id, name, ok := shm.ParseAside(filepath.Base(aside))
		require.True(t, ok, "hidden name %s", aside)
		assert.Equal(t, "jobs", name)

		found, err := shm.RecoverLeftovers(dir, true)
		require.NoError(t, err)
		require.Equal(t, []shm.Leftover{{Path: aside, Name: filepath.Join(dir, "jobs"), Remover: id.Pack(), PIDNamespace: ownNamespace(t), Users: []int{},
			Action: shm.LeftoverRemoved}}, nilUsers(found))
		_, err = os.Lstat(aside)
		require.NoError(t, err, "a dry run removed the leftover")

		found, err = shm.RecoverLeftovers(dir, false)
		require.NoError(t, err)
		require.Len(t, found, 1)
		assert.Equal(t, shm.LeftoverRemoved, found[0].Action, "%v", found[0].Err)
		requireEmptyDir(t, dir)
	})
	t.Run("in use elsewhere", func(t *testing.T) {
		t.Parallel()
		dir := leftoverDir(t)
		path := filepath.Join(dir, "jobs")
		var holder *testproc.Child
		fi, aside := killedRemover(t, path, func(t *testing.T, path string) {
			holder = testproc.Start(t, "hold", path)
			holder.WaitLine(t, "ready")
		})

		found, err := shm.RecoverLeftovers(dir, false)
		require.NoError(t, err)
		require.Len(t, found, 1)
		assert.Equal(t, shm.LeftoverRestored, found[0].Action, "%v", found[0].Err)
		assert.Equal(t, []int{holder.PID()}, found[0].Users)
		assert.Equal(t, aside, found[0].Path)
		now, err := os.Lstat(path)
		require.NoError(t, err)
		assert.True(t, os.SameFile(fi, now), "another file is back under the name")
	})
	t.Run("in use here", func(t *testing.T) {
		t.Parallel()
		dir := leftoverDir(t)
		path := filepath.Join(dir, "jobs")
		fi, _ := killedRemover(t, path, usedHere)
		found, err := shm.RecoverLeftoversOf(path, false)
		require.NoError(t, err)
		require.Len(t, found, 1)
		assert.Equal(t, shm.LeftoverRestored, found[0].Action, "%v", found[0].Err)
		assert.Equal(t, []int{os.Getpid()}, found[0].Users)
		now, err := os.Lstat(path)
		require.NoError(t, err)
		assert.True(t, os.SameFile(fi, now))
	})
	t.Run("name taken", func(t *testing.T) {
		t.Parallel()
		dir := leftoverDir(t)
		path := filepath.Join(dir, "jobs")
		_, aside := killedRemover(t, path, usedHere)
		newer, err := shm.Create(path, shm.Options{})
		require.NoError(t, err)
		defer newer.Close()
		found, err := shm.RecoverLeftoversOf(path, false)
		require.NoError(t, err)
		require.Len(t, found, 1)
		assert.Equal(t, shm.LeftoverKept, found[0].Action)
		assert.ErrorIs(t, found[0].Err, shm.ErrExists)
		_, err = os.Lstat(aside)
		require.NoError(t, err, "the leftover in use is gone")
	})
	t.Run("long name", func(t *testing.T) {
		t.Parallel()
		dir := leftoverDir(t)
		path := filepath.Join(dir, strings.Repeat("j", 240))
		fi, aside := killedRemover(t, path, usedHere)
		require.Contains(t, filepath.Base(aside), "#", "a name too long is kept as its digest")
		found, err := shm.RecoverLeftovers(dir, false)
		require.NoError(t, err)
		require.Len(t, found, 1)
		assert.Equal(t, shm.LeftoverKept, found[0].Action)
		assert.ErrorIs(t, found[0].Err, shm.ErrNameNotKept)
		assert.Empty(t, found[0].Name)

		found, err = shm.RecoverLeftoversOf(path, false)
		require.NoError(t, err)
		require.Len(t, found, 1)
		assert.Equal(t, shm.LeftoverRestored, found[0].Action, "%v", found[0].Err)
		now, err := os.Lstat(path)
		require.NoError(t, err)
		assert.True(t, os.SameFile(fi, now))
	})
}

// nilUsers is found with its leftovers' empty Users made non-nil, for
// comparison.
func nilUsers(found []shm.Leftover) []shm.Leftover {
	for i := range found {
		if len(found[i].Users) == 0 {
			found[i].Users = []int{}
		}
	}
	return found
}

func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "left in %s", dir)
}

// A leftover whose remover runs is kept: it may be in the middle of its
// removal. Once the remover is dead, the leftover is recovered.
func TestRecoverLeftoversKeepsALiveRemovers(t *testing.T) {
	t.Parallel()
	dir := leftoverDir(t)
	path := filepath.Join(dir, "jobs")
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	remover := testproc.Start(t, "stop-aside", path)
	remover.WaitStopped(t)
	asides, err := filepath.Glob(filepath.Join(dir, ".shmlock-rm-*"))
	require.NoError(t, err)
	require.Len(t, asides, 1)

	found, err := shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, shm.LeftoverKept, found[0].Action)
	assert.ErrorIs(t, found[0].Err, shm.ErrRemoverAlive)
	assert.Equal(t, remover.Identity(t), found[0].Remover)
	_, err = os.Lstat(asides[0])
	require.NoError(t, err, "a live remover's file was touched")

	remover.Kill(t)
	found, err = shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, shm.LeftoverRemoved, found[0].Action, "%v", found[0].Err)
	requireEmptyDir(t, dir)
}

// What has a hidden name of a remover, dead, but is no segment of this
// user is kept as it is: not followed, not opened (but to read its type),
// not removed.
func TestRecoverLeftoversKeepsOtherFiles(t *testing.T) {
	t.Parallel()
	dir := leftoverDir(t)
	// An identity no process has: this pid, started at another time.
	dead := deadMaker(t)
	hidden := func(name string) string { return filepath.Join(dir, shm.AsideName(dead, name, 1)) }
	seg, err := shm.Create(filepath.Join(dir, "target"), shm.Options{})
	require.NoError(t, err)
	require.NoError(t, seg.Close())

	want := map[string]error{}
	garbage := hidden("garbage")
	require.NoError(t, os.WriteFile(garbage, []byte("precious data, not a segment"), 0o600))
	want[garbage] = layout.ErrBadMagic
	link := hidden("link")
	require.NoError(t, os.Symlink(filepath.Join(dir, "target"), link))
	want[link] = shm.ErrSymlink
	fifo := hidden("fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	want[fifo] = shm.ErrNotRegular
	sub := hidden("dir")
	require.NoError(t, os.Mkdir(sub, 0o700))
	want[sub] = shm.ErrNotRegular
	foreign := hidden("foreign")
	require.NoError(t, os.Link(filepath.Join(dir, "target"), foreign))
	if err := os.Chown(foreign, 4242, 4242); err == nil {
		want[foreign] = shm.ErrForeignOwner
	} else {
		require.NoError(t, os.Remove(foreign))
		t.Logf("no file of another user (chown: %v)", err)
	}

	found, err := shm.RecoverLeftovers(dir, false)
	require.NoError(t, err)
	require.Len(t, found, len(want))
	for _, l := range found {
		assert.Equal(t, shm.LeftoverKept, l.Action, l.Path)
		assert.ErrorIs(t, l.Err, want[l.Path], l.Path)
		assert.Equal(t, dead.Pack(), l.Remover)
		_, err := os.Lstat(l.Path)
		assert.NoError(t, err, "%s is gone", l.Path)
	}
	_, err = os.Stat(filepath.Join(dir, "target"))
	assert.NoError(t, err, "the symlink's target is gone")
}

// Hidden names round-trip, and nothing else reads as one. They say the
// remover's PID namespace; the previous release's, which do not, read as
// a remover of none, whatever name they keep (one that begins with
// ns<digits>- too).
func TestAsideNames(t *testing.T) {
	t.Parallel()
	id := fsys.Maker{Identity: proc.Identity{PID: 4242, StartTicks: 123456}, PIDNamespace: 4026531836}
	longest := fsys.Maker{Identity: proc.Identity{PID: proc.MaxPID, StartTicks: proc.MaxStart}, PIDNamespace: 1<<64 - 1}
	for _, m := range []fsys.Maker{id, longest} {
		for _, name := range []string{"jobs", "a-b-c", "x#y", "ns5-jobs", strings.Repeat("n", 181)} {
			base := shm.AsideName(m, name, 1<<64-1)
			assert.LessOrEqual(t, len(base), 255, name)
			gotID, gotName, ok := shm.ParseAside(base)
			assert.True(t, ok, base)
			assert.Equal(t, m, gotID, base)
			assert.Equal(t, name, gotName, base)
		}
	}
	assert.Equal(t, ".shmlock-rm-4242-123456-ns4026531836-abc-jobs", shm.AsideName(id, "jobs", 0xabc))
	long := shm.AsideName(longest, strings.Repeat("n", 182), 1<<64-1)
	_, gotName, ok := shm.ParseAside(long)
	assert.True(t, ok, long)
	assert.Empty(t, gotName, "a long name is kept as its digest")
	assert.LessOrEqual(t, len(long), 255)
	assert.Regexp(t, `^\.shmlock-rm-4194303-2199023255551-ns18446744073709551615-ffffffffffffffff#[0-9a-f]{16}$`, long)
	for base, want := range map[string]string{
		".shmlock-rm-4242-123456-abc-jobs":             "jobs", // the previous release's
		".shmlock-rm-4242-123456-abc-ns5-jobs":         "ns5-jobs",
		".shmlock-rm-4242-123456-abc#0123456789abcdef": "",
	} {
		gotID, gotName, ok := shm.ParseAside(base)
		assert.True(t, ok, base)
		assert.Equal(t, fsys.Maker{Identity: id.Identity}, gotID, base)
		assert.Equal(t, want, gotName, base)
	}
	for _, base := range []string{"jobs", ".shmlock-rm-", ".shmlock-rm-4242-1a2b3c", ".shmlock-rm-4242-5-abc-",
		".shmlock-rm-0-5-abc-jobs", ".shmlock-rm-4242-5-xyz-jobs", ".shmlock-rm-4242-5-abc#12", ".shmlock-rm-x-5-abc-jobs",
		".shmlock-rm--5-abc-jobs", ".shmlock-rm-4242-5--jobs", ".shmlock-rm-4242-5-ns-abc-jobs", ".shmlock-rm-4242-5-ns0-abc-jobs",
		".shmlock-rm-4242-5-ns7-jobs", ".shmlock-rm-4242-5-ns7-abc-", ".shmlock-rm-4242-5-ns7x-abc-jobs",
		".shmlock-rm-4242-5-ns18446744073709551616-abc-jobs", ".shmlock-rm-4242-5-ns7-abc#12"} {
		_, _, ok := shm.ParseAside(base)
		assert.False(t, ok, base)
	}
}

// A hidden name reads back as the remover and name it was made of; what
// reads as one names a process that could be, and the same name made anew
// reads the same.
func FuzzParseAside(f *testing.F) {
	f.Add(".shmlock-rm-4242-123456-ns4026531836-abc-jobs", uint32(4242), uint64(123456), uint64(4026531836), uint64(0xabc), "jobs")
	f.Add(".shmlock-rm-4242-123456-abc-ns5-jobs", uint32(1), uint64(0), uint64(0), uint64(0), "ns5-jobs")
	f.Add(".shmlock-rm-4242-123456-abc#0123456789abcdef", uint32(proc.MaxPID), uint64(proc.MaxStart), uint64(1<<64-1), uint64(1<<64-1), strings.Repeat("n", 250))
	f.Fuzz(func(t *testing.T, base string, pid uint32, start, ns, nonce uint64, name string) {
		if m, kept, ok := shm.ParseAside(base); ok {
			if m.PID == 0 || m.PID > proc.MaxPID || m.StartTicks > proc.MaxStart {
				t.Fatalf("%q reads as %+v", base, m)
			}
			if kept != "" {
				again, gotName, ok := shm.ParseAside(shm.AsideName(m, kept, nonce))
				if !ok || again != m || gotName != kept && (gotName != "" || len(kept) <= 181) {
					t.Fatalf("%q reads as %+v %q, made anew as %+v %q (%v)", base, m, kept, again, gotName, ok)
				}
			}
		}
		if pid == 0 || pid > proc.MaxPID || name == "" || strings.ContainsAny(name, "/\x00") {
			return
		}
		m := fsys.Maker{Identity: proc.Identity{PID: pid, StartTicks: start & proc.MaxStart}, PIDNamespace: ns}
		made := shm.AsideName(m, name, nonce)
		got, gotName, ok := shm.ParseAside(made)
		if !ok || got != m || gotName != name && (gotName != "" || len(name) <= 181) {
			t.Fatalf("%q reads as %+v %q (%v), made of %+v %q", made, got, gotName, ok, m, name)
		}
		if len(made) > 255 {
			t.Fatalf("%q is longer than NAME_MAX", made)
		}
	})
}

// ownNamespace is the inode of this process's PID namespace.
func ownNamespace(t *testing.T) uint64 {
	t.Helper()
	ns, err := proc.PIDNamespace()
	require.NoError(t, err)
	return ns
}

// deadMaker is a maker of hidden names in this PID namespace that no
// process is: this pid, started at another time.
func deadMaker(t *testing.T) fsys.Maker {
	t.Helper()
	self := proc.Self()
	return fsys.Maker{Identity: proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}, PIDNamespace: ownNamespace(t)}
}
