package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// maker: print "maker " and this process as a hidden name says it
	// (fsys.FormatMaker), then wait for a line on stdin.
	helpers["maker"] = func([]string) int {
		self, err := fsys.SelfMaker()
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("maker", fsys.FormatMaker(self))
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		return 0
	}
}

// leftoverInUse closes seg, has another process keep its file open and
// moves it aside as a killed remover leaves it: the killedRemoverLeft of a
// segment in use, with its path.
func leftoverInUse(t *testing.T, seg *shm.Segment) (path, hidden string, remover fsys.Maker) {
	t.Helper()
	path = seg.Path()
	require.NoError(t, seg.Close())
	openedBy(t, path)
	hidden, remover = killedRemoverLeft(t, path)
	return path, hidden, remover
}

// killedRemoverLeft moves the segment at path aside as a remover killed
// before it unlinked it leaves it (docs/FORMAT.md): under a hidden name
// naming a dead process of this PID namespace and the segment's name. It
// returns the hidden path.
func killedRemoverLeft(t *testing.T, path string) (hidden string, remover fsys.Maker) {
	t.Helper()
	remover = deadMaker(t)
	hidden = asidePath(path, remover)
	require.NoError(t, os.Rename(path, hidden))
	t.Cleanup(func() { _ = os.Remove(hidden) })
	return hidden, remover
}

// asidePath is the hidden path that remover gives the segment at path
// (docs/FORMAT.md).
func asidePath(path string, remover fsys.Maker) string {
	return filepath.Join(filepath.Dir(path), fmt.Sprintf(".shmlock-rm-%s-%x-%s", fsys.FormatMaker(remover), 1, filepath.Base(path)))
}

// deadMaker is a maker of hidden names in this PID namespace that no
// process is: this pid, started at another time.
func deadMaker(t *testing.T) fsys.Maker {
	t.Helper()
	self, err := fsys.SelfMaker()
	require.NoError(t, err)
	self.StartTicks++
	return self
}

// rm finishes what a killed remover began: the leftover nobody uses is
// removed, and the segment is gone without an error. Before, rm found no
// segment (the name was aside) and failed, and the file stayed for ever.
func TestRmRemovesAKilledRemoversLeftover(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	path := seg.Path()
	require.NoError(t, seg.Close())
	hidden, remover := killedRemoverLeft(t, path)

	r := shmctl(t, false, "rm", path)
	assert.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stdout)
	assert.Equal(t, fmt.Sprintf("removed %s (process %d moved it aside to remove it and was killed, was %s): nobody uses it\n",
		hidden, remover.PID, path), r.stderr)
	_, err := os.Lstat(hidden)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// The leftover of a segment another process still has open goes back under
// its name, where rm then finds it in use and refuses it. Before, the
// segment stayed lost from its name.
func TestRmPutsBackAKilledRemoversLeftoverInUse(t *testing.T) {
	t.Parallel()
	path, hidden, remover := leftoverInUse(t, newSegment(t, layout.Options{}))

	r := shmctl(t, false, "rm", path)
	assert.Equal(t, exitError, r.code)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.Len(t, lines, 2, "stderr: %q", r.stderr)
	assert.True(t, strings.HasPrefix(lines[0], fmt.Sprintf("restored %s as %s: process %d moved it aside to remove it and was killed, and it is in use (processes ",
		hidden, path, remover.PID)), lines[0])
	assert.Contains(t, lines[1], "is in use: open in process")
	_, err := os.Stat(path)
	require.NoError(t, err, "the segment is not back under its name")
}

// reclaim puts a segment in use back under its name before it reclaims
// its locks, and says so in its document; --dry-run only says it would.
func TestReclaimPutsBackAKilledRemoversLeftover(t *testing.T) {
	t.Parallel()
	path, hidden, remover := leftoverInUse(t, newSegment(t, layout.Options{}))

	r := shmctl(t, false, "reclaim", "--dry-run", path)
	assert.Equal(t, exitError, r.code, "the segment is not under its name yet")
	assert.Contains(t, r.stderr, fmt.Sprintf("would restore %s as %s: process %d moved it aside", hidden, path, remover.PID))
	_, err := os.Lstat(hidden)
	require.NoError(t, err, "--dry-run moved the leftover")

	l := reclaimOneLeftover(t, path)
	checkStarted(t, l.Process)
	assert.Equal(t, reclaimLeftoverJSON{Path: hidden, Name: &path, Process: process(remover.Identity, livenessDead),
		PIDNamespace: optID(remover.PIDNamespace), Users: l.Users, Action: "restored"}, l)
	assert.Len(t, l.Users, 1)
	_, err = os.Stat(path)
	require.NoError(t, err, "the segment is not back under its name")
}

// What reclaim did with a leftover is said also when it then fails: here
// the segment it put back under its name fails check, so reclaim refuses
// it without --force, but the file is back all the same. The refusal used
// to be the only line, and the restore went unsaid.
func TestReclaimSaysWhatItDidWithALeftoverWhenItThenFails(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	s, err := seg.Slot(7)
	require.NoError(t, err)
	s.TID.Store(9) // a free slot with a holder id: damage check finds
	path, hidden, remover := leftoverInUse(t, seg)

	r := shmctl(t, false, "reclaim", path)
	assert.Equal(t, exitError, r.code)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.Len(t, lines, 2, "stderr: %q", r.stderr)
	assert.True(t, strings.HasPrefix(lines[0], fmt.Sprintf("restored %s as %s: process %d moved it aside", hidden, path, remover.PID)), lines[0])
	assert.Contains(t, lines[1], "fails check")
	_, err = os.Stat(path)
	require.NoError(t, err, "the segment is not back under its name")
}

// A creator killed before its segment got its name (a file system without
// O_TMPFILE) leaves its pending file in the directory: rm removes it once
// the creator is dead, says so, and goes on with the segment. Removing it
// does not pass for removing the segment: a missing one is still an error.
// Before, nothing removed such a file.
func TestRmRemovesAKilledCreatorsPendingFile(t *testing.T) {
	t.Parallel()
	dir := testproc.SegmentPath(t) // a directory: no other test's files
	require.NoError(t, os.Mkdir(dir, 0o700))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "seg")
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	self, err := fsys.SelfMaker()
	require.NoError(t, err)
	creator := deadMaker(t)
	pending := filepath.Join(dir, fsys.PendingName(creator, 1))
	require.NoError(t, os.WriteFile(pending, nil, 0o600))
	live := filepath.Join(dir, fsys.PendingName(self, 1))
	require.NoError(t, os.WriteFile(live, nil, 0o600))

	r := shmctl(t, false, "rm", path)
	assert.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, fmt.Sprintf("removed %s (process %d was creating a segment there and was killed): nobody uses it\n", pending, creator.PID), r.stderr,
		"a live creator's file is not mentioned")
	for p, want := range map[string]bool{path: false, pending: false, live: true} {
		_, err := os.Lstat(p)
		assert.Equal(t, want, err == nil, "%s: %v", p, err)
	}

	require.NoError(t, os.WriteFile(pending, nil, 0o600))
	r = shmctl(t, false, "rm", path)
	assert.Equal(t, exitError, r.code, "the segment is gone: %+v", r)
	_, err = os.Lstat(pending)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// goneNamespace is the PID namespace of removers whose namespace has no
// process: no namespace has inode 1.
const goneNamespace = 1

// The leftover of a remover of another PID namespace (a container that
// shares the directory) whose namespace has no process left: the initial
// namespace, which sees every process, judges its remover dead and
// removes it; elsewhere, where that namespace may be out of sight, it is
// kept, and said so: its pid means another process here, or none, whose
// liveness is unknown. The document says which namespace it is of.
// Before, such a leftover was kept everywhere, for an operator to remove.
func TestReclaimJudgesALeftoverOfAGoneNamespace(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	path := seg.Path()
	require.NoError(t, seg.Close())
	remover := deadMaker(t)
	remover.PIDNamespace = goneNamespace
	hidden := asidePath(path, remover)
	require.NoError(t, os.Link(path, hidden))
	t.Cleanup(func() { _ = os.Remove(hidden) })
	ns, err := proc.PIDNamespace()
	require.NoError(t, err)

	l := reclaimOneLeftover(t, path)
	checkStarted(t, l.Process)
	if ns == proc.InitialPIDNamespace {
		assert.Equal(t, reclaimLeftoverJSON{Path: hidden, Name: &path, Process: process(remover.Identity, livenessDead),
			PIDNamespace: optID(remover.PIDNamespace), Users: []int{}, Action: "removed"}, l)
		_, err := os.Lstat(hidden)
		require.ErrorIs(t, err, os.ErrNotExist)
		return
	}
	require.NotNil(t, l.Error)
	assert.Contains(t, *l.Error, shm.ErrForeignNamespace.Error())
	assert.Equal(t, reclaimLeftoverJSON{Path: hidden, Name: &path, Process: process(remover.Identity, livenessUnknown),
		PIDNamespace: optID(remover.PIDNamespace), Users: []int{}, Action: "kept", Error: l.Error}, l)

	r := shmctl(t, false, "rm", path)
	assert.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.True(t, strings.HasPrefix(r.stderr, fmt.Sprintf("kept %s (moved aside by process %d, was %s): %s", hidden, remover.PID, path,
		shm.ErrForeignNamespace)), r.stderr)
	_, err = os.Lstat(hidden)
	require.NoError(t, err, "the leftover is gone")
}

// The leftovers of removers in a container that runs, seen from its
// parent namespace, are judged by their pids in the container's: the
// container's process itself is alive (kept, "alive"), and a remover
// whose pid there now names a process that started at another time is
// dead (removed). Before, both were kept with their liveness unknown.
func TestReclaimJudgesLeftoversOfAChildNamespace(t *testing.T) {
	seg := newSegment(t, layout.Options{})
	path := seg.Path()
	require.NoError(t, seg.Close())
	child := testproc.StartInNewPIDNamespace(t, "maker")
	live, rest, ok := fsys.CutMaker(child.WaitLine(t, "maker ") + "-")
	require.True(t, ok && rest == "", "helper's maker: %s", child.Out)
	dead := live
	dead.StartTicks++
	hidden := map[fsys.Maker]string{}
	for _, m := range []fsys.Maker{live, dead} {
		hidden[m] = asidePath(path, m)
		require.NoError(t, os.Link(path, hidden[m]))
		t.Cleanup(func() { _ = os.Remove(hidden[m]) })
	}

	r := shmctl(t, false, "reclaim", "--json", path)
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	var doc reclaimJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.Len(t, doc.Leftovers, 2)
	for _, l := range doc.Leftovers {
		checkStarted(t, l.Process)
		switch l.Path {
		case hidden[live]:
			require.NotNil(t, l.Error)
			assert.Contains(t, *l.Error, shm.ErrRemoverAlive.Error())
			assert.Equal(t, reclaimLeftoverJSON{Path: l.Path, Name: &path, Process: process(live.Identity, livenessAlive),
				PIDNamespace: optID(live.PIDNamespace), Users: []int{}, Action: "kept", Error: l.Error}, l)
		case hidden[dead]:
			assert.Equal(t, reclaimLeftoverJSON{Path: l.Path, Name: &path, Process: process(dead.Identity, livenessDead),
				PIDNamespace: optID(dead.PIDNamespace), Users: []int{}, Action: "removed"}, l)
		default:
			t.Errorf("unexpected leftover %s", l.Path)
		}
	}
	_, err := os.Lstat(hidden[dead])
	assert.ErrorIs(t, err, os.ErrNotExist)
	child.Send(t, "done")
	child.WaitOK(t)
}

// A leftover's process is alive, dead or unknown as the recovery judged
// it, from the error it was kept with: one scan of /proc judges them all.
func TestRemoverOf(t *testing.T) {
	t.Parallel()
	w := proc.Identity{PID: 7, StartTicks: 42}.Pack()
	tests := []struct {
		err  error
		want string
	}{
		{nil, livenessDead},
		{fmt.Errorf("%w (process 7)", shm.ErrRemoverAlive), livenessAlive},
		{fmt.Errorf("%w (process 7)", shm.ErrCreatorAlive), livenessAlive},
		{fmt.Errorf("%w (process 7 of pid:[5], this is pid:[6]): %w", shm.ErrForeignNamespace, proc.ErrCannotTell), livenessUnknown},
		{shm.ErrExists, livenessDead},
	}
	for _, tt := range tests {
		p := removerOf(shm.Leftover{Remover: w, Err: tt.err})
		assert.Equal(t, tt.want, p.Liveness, "%v", tt.err)
		assert.Equal(t, uint32(7), p.PID)
	}
}

// reclaimOneLeftover runs `shmctl reclaim --json path`, which must succeed
// and report exactly one leftover, and returns it.
func reclaimOneLeftover(t *testing.T, path string) reclaimLeftoverJSON {
	t.Helper()
	r := shmctl(t, false, "reclaim", "--json", path)
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	var doc reclaimJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.Len(t, doc.Leftovers, 1)
	return doc.Leftovers[0]
}
