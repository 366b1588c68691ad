package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

func TestRmFlags(t *testing.T) {
	t.Parallel()
	ios, _, _ := testIOStreams(false)
	var got *rmOptions
	cmd := newCmdRm(ios, func(o *rmOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"a", "/dev/shm/b"})
	require.NoError(t, cmd.Execute())
	assert.Equal(t, &rmOptions{IO: ios, Segments: []string{"a", "/dev/shm/b"}}, got)
}

func TestRm(t *testing.T) {
	t.Parallel()
	a, b := newSegment(t, layout.Options{}), newSegment(t, layout.Options{})
	// A bare name means a file in /dev/shm.
	r := shmctl(t, false, "rm", a.Path(), strings.TrimPrefix(b.Path(), shm.DefaultDir+"/"))
	assert.Equal(t, result{code: exitOK}, r)
	for _, p := range []string{a.Path(), b.Path()} {
		_, err := os.Stat(p)
		assert.ErrorIs(t, err, os.ErrNotExist, "%s after rm", p)
	}
}

// A segment made with a table left out removes like any other: one with
// transaction records but no arena (create --txn-arena=-1) was refused,
// "txn: segment has no room for transactions", asking for --force.
func TestRmTablesLeftOut(t *testing.T) {
	t.Parallel()
	for _, opts := range []layout.Options{{TxnArenaBytes: -1}, {TxnRecords: -1}, {TxnRecords: -1, TxnArenaBytes: -1},
		{LockMgrEntries: -1}, {Upgrades: -1}, {DataBytes: -1}} {
		seg := newSegment(t, opts)
		r := shmctl(t, false, "rm", seg.Path())
		assert.Equal(t, result{code: exitOK}, r, "%+v", opts)
		_, err := os.Stat(seg.Path())
		assert.ErrorIs(t, err, os.ErrNotExist, "%+v", opts)
	}
}

func TestRmRefusesNonSegment(t *testing.T) {
	t.Parallel()
	notSeg := writeFile(t, []byte("not a segment\n"))
	line := requireOneLineError(t, shmctl(t, false, "rm", notSeg), exitError)
	assert.Contains(t, line, notSeg)
	_, err := os.Stat(notSeg)
	assert.NoError(t, err, "rm removed a file that is not a segment")

	missing := testproc.SegmentPath(t)
	requireOneLineError(t, shmctl(t, false, "rm", missing), exitError)
}

// With several arguments, each failure is one line and the rest are removed.
func TestRmSeveral(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	notSeg := writeFile(t, []byte("not a segment\n"))
	missing := testproc.SegmentPath(t)

	r := shmctl(t, false, "rm", notSeg, seg.Path(), missing)
	assert.Equal(t, exitError, r.code)
	assert.Empty(t, r.stdout)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.Len(t, lines, 2, "stderr: %q", r.stderr)
	assert.True(t, strings.HasPrefix(lines[0], "shmctl: ") && strings.Contains(lines[0], notSeg), "line %q", lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "shmctl: ") && strings.Contains(lines[1], missing), "line %q", lines[1])
	_, err := os.Stat(seg.Path())
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(notSeg)
	assert.NoError(t, err)
}

// A segment in use is refused, with what was found, and left byte for
// byte; --force removes it. Here a live process (this one) holds an owner
// slot, an upgrade mutex and a lock-manager resource.
func TestRmRefusesSegmentInUse(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	defer g.Release()
	m, err := upgrade.Open(seg, 0)
	require.NoError(t, err)
	require.NoError(t, m.LockShared())
	defer m.UnlockShared()
	lm, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	_, err = lm.Acquire(t.Context(), "job", "me", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	before, err := os.ReadFile(seg.Path())
	require.NoError(t, err)

	line := requireOneLineError(t, shmctl(t, false, "rm", seg.Path()), exitError)
	for _, want := range []string{"is in use", "owner slot 0 held by live process", "upgrade mutex 0: 1 shared holds of live process",
		`resource "job" held by "me" of live process`, "--force"} {
		assert.Contains(t, line, want)
	}
	after, err := os.ReadFile(seg.Path())
	require.NoError(t, err)
	assert.Equal(t, before, after, "a refused rm changes nothing")

	assert.Equal(t, result{code: exitOK}, shmctl(t, false, "rm", "--force", seg.Path()))
	_, err = os.Stat(seg.Path())
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// A segment of a format this build does not read (an older release's) is
// still removed when nobody maps it: its locks cannot be read, but its
// users would map it.
func TestRmOlderFormat(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	path := seg.Path()
	require.NoError(t, seg.Close())
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{3, 0, 0, 0}, layout.OffVersion)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = shm.Open(path, shm.Options{})
	require.ErrorIs(t, err, layout.ErrVersion)

	assert.Equal(t, result{code: exitOK}, shmctl(t, false, "rm", path))
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// A segment put in the place of one rm found unused is not removed: rm
// checked one file and removed whatever the path named next. (Not
// parallel: the hook is global.)
func TestRmLeavesAReplacement(t *testing.T) {
	checked, inUse := newSegment(t, layout.Options{}), newSegment(t, layout.Options{})
	path := checked.Path()
	require.NoError(t, checked.Close())
	old := testHookAfterCheck
	testHookAfterCheck = func() { require.NoError(t, os.Rename(inUse.Path(), path)) }
	defer func() { testHookAfterCheck = old }()
	r := shmctl(t, false, "rm", path)
	assert.Equal(t, exitError, r.code, "stderr: %q", r.stderr)
	_, err := os.Stat(path)
	require.NoError(t, err, "rm removed a segment it never checked")
}

// openedBy starts a process that has the file at path open (as its
// stdin) and does not map it, as a process between the open and the map
// of shm.Open; it ends with the test.
func openedBy(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	cmd := exec.Command("sleep", "60")
	cmd.Stdin = f
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// A segment another process has open, not yet mapped, is in use: rm
// refuses it (it looked at the mappings only and removed it).
func TestRmRefusesSegmentOpenElsewhere(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	openedBy(t, seg.Path())
	line := requireOneLineError(t, shmctl(t, false, "rm", seg.Path()), exitError)
	assert.Contains(t, line, "open in process")
	_, err := os.Stat(seg.Path())
	require.NoError(t, err, "rm removed a segment another process has open")
}

// A process that opens the segment after rm found it unused, before its
// name goes, is found by the second look, made once the name is moved
// aside where nobody can open it any more: the name goes back. (It removed
// the file, and the process went on with one nobody else could reach.)
// Not parallel: the hook is global.
func TestRmLooksAgainOnceTheNameIsAside(t *testing.T) {
	seg := newSegment(t, layout.Options{})
	path := seg.Path()
	old := testHookAfterCheck
	testHookAfterCheck = func() { openedBy(t, path) }
	defer func() { testHookAfterCheck = old }()
	line := requireOneLineError(t, shmctl(t, false, "rm", path), exitError)
	assert.Contains(t, line, "came into use")
	_, err := os.Stat(path)
	require.NoError(t, err, "the segment's name is not back")
}

// Another user's segment is refused as what it is, not as one in use: the
// message names its owner and says who may remove it (that user, or root
// with --force), and the error stays errRefused. It said "is in use:
// owned by uid N, not you", though nothing used it. Its owner removes it.
func TestRmRefusesAnotherUsersSegment(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: gives the segment to another user")
	}
	const owner = 64721
	path := createdByShmctl(t)
	require.NoError(t, os.Chown(path, owner, owner))

	line := requireOneLineError(t, shmctl(t, false, "rm", path), exitError)
	assert.Equal(t, "shmctl: refused: "+path+" is owned by another user (uid 64721): run rm as that user, or as root with --force (which removes it even while in use)", line)
	ios, _, _ := testIOStreams(false)
	assert.ErrorIs(t, removeSegment(ios, path, false), errRefused)
	_, err := os.Stat(path)
	require.NoError(t, err, "a refused rm leaves the segment")
	// In use as well: said too, in the same refusal. (The subtest's end
	// ends the process that has it open.)
	t.Run("in use", func(t *testing.T) {
		openedBy(t, path)
		line := requireOneLineError(t, shmctl(t, false, "rm", path), exitError)
		assert.Regexp(t, ` is owned by another user \(uid 64721\) and in use \(open in process \d+\): run rm as that user`, line)
	})

	out, err := testproc.CommandAs(t, testproc.User{UID: owner, GID: owner}, "shmctl", "rm", path).CombinedOutput()
	require.NoError(t, err, "rm as the segment's owner; output:\n%s", out)
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "the segment after its owner's rm")
}

// rm --force by a user who may not remove another user's segment (here
// root's, in a sticky directory: only its owner or root may unlink it)
// says so, and that only that user or root may, instead of the system
// call's bare "permission denied"; the segment stays.
func TestRmForceOfAnotherUsersSegmentSaysWhose(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs rm as another user")
	}
	const user = 64723
	path := createdByShmctl(t)
	for _, mode := range []os.FileMode{0o600, 0o666} {
		require.NoError(t, os.Chmod(path, mode))
		out, err := testproc.CommandAs(t, testproc.User{UID: user, GID: user}, "shmctl", "rm", "--force", path).CombinedOutput()
		require.Error(t, err, "mode %04o: output:\n%s", mode, out)
		assert.Contains(t, string(out), path+" is owned by another user (uid 0): only that user or root may remove it", "mode %04o", mode)
		_, err = os.Stat(path)
		require.NoError(t, err, "mode %04o: a refused rm leaves the segment", mode)
	}
	require.NoError(t, os.Remove(path))
}

// createdByShmctl is the path of a new segment made by shmctl create, as a
// user makes one; the caller removes it.
func createdByShmctl(t *testing.T) string {
	t.Helper()
	path := testproc.SegmentPath(t)
	r := shmctl(t, false, "create", path)
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	return path
}
