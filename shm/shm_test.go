package shm_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

func create(t *testing.T, opts shm.Options) (*shm.Segment, string) {
	t.Helper()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	return seg, path
}

func TestCreateOpenRoundTrip(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 5, Upgrades: 3}})
	require.True(t, seg.IsCreator())
	require.Equal(t, 5, seg.Len(layout.KindOwnerSlots))
	require.Equal(t, 3, seg.Len(layout.KindUpgrades))

	fi, err := os.Stat(path)
	require.NoError(t, err)
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Fatalf("mode: got %v, want 0600", got)
	}

	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer other.Close()
	require.False(t, other.IsCreator())
	require.Equal(t, seg.Header(), other.Header())

	a, err := seg.Slot(4)
	require.NoError(t, err)
	b, err := other.Slot(4)
	require.NoError(t, err)
	a.Token.Store(0xfeed)
	if got := b.Token.Load(); got != 0xfeed {
		t.Fatalf("write through one mapping: got %#x through the other, want 0xfeed", got)
	}
}

func TestGroupAccess(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{GroupAccess: true})
	fi, err := os.Stat(path)
	require.NoError(t, err)
	if got := fi.Mode().Perm(); got != 0o660 {
		t.Fatalf("mode: got %v, want 0660", got)
	}
	require.Equal(t, layout.FlagGroupAccess, seg.Header().Flags)
}

func TestProcessesSeeEachOthersWrites(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{})
	cmd := testproc.Command("echo-token", path)
	var out bytes.Buffer
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	in, _ := seg.Slot(0)
	echo, _ := seg.Slot(1)
	in.Token.Store(41)
	require.NoError(t, cmd.Wait(), "child: %s", out.String())
	if got := echo.Token.Load(); got != 42 {
		t.Fatalf("child's write: got %d, want 42", got)
	}
}

// Many processes call OpenOrCreate on one path at the same instant: exactly
// one creates it and all of them map the same segment.
func TestRacingCreatorsInitialiseOnce(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	const procs = 8
	start := strconv.FormatInt(time.Now().Add(300*time.Millisecond).UnixNano(), 10)
	outs := make([]bytes.Buffer, procs)
	cmds := make([]*execCmd, procs)
	for i := range cmds {
		cmds[i] = startHelper(t, &outs[i], "race-create", path, start)
	}
	creators, created := 0, map[string]bool{}
	for i, c := range cmds {
		require.NoError(t, c.Wait(), "child %d: %s", i, outs[i].String())
		fields := strings.Fields(outs[i].String())
		require.Len(t, fields, 2, "child %d printed %q", i, outs[i].String())
		if fields[0] == "true" {
			creators++
		}
		created[fields[1]] = true
	}
	if creators != 1 {
		t.Fatalf("creators: got %d, want 1", creators)
	}
	if len(created) != 1 {
		t.Fatalf("distinct segments seen: got %v, want one", created)
	}
}

// Many processes claim the same names at once: one entry per name, never two.
func TestClaimByNameAcrossProcesses(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 16}})
	names := []string{"alpha", "beta", "gamma", "delta", "epsilon"}
	const procs = 6
	start := strconv.FormatInt(time.Now().Add(300*time.Millisecond).UnixNano(), 10)
	outs := make([]bytes.Buffer, procs)
	cmds := make([]*execCmd, procs)
	for i := range cmds {
		cmds[i] = startHelper(t, &outs[i], "claim-names", append([]string{path, start}, names...)...)
	}
	index := map[string]string{}
	for i, c := range cmds {
		require.NoError(t, c.Wait(), "child %d: %s", i, outs[i].String())
		sc := bufio.NewScanner(&outs[i])
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			require.Len(t, f, 2, "child %d line %q", i, sc.Text())
			if prev, ok := index[f[0]]; ok && prev != f[1] {
				t.Fatalf("name %q: got entries %s and %s, want one", f[0], prev, f[1])
			}
			index[f[0]] = f[1]
		}
	}
	require.Len(t, index, len(names))
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Len(t, claims, len(names))
	for _, c := range claims {
		if c.Refs != procs {
			t.Errorf("%q refs: got %d, want %d", c.Name, c.Refs, procs)
		}
		if index[c.Name] != strconv.Itoa(c.Index) {
			t.Errorf("%q: directory says %d, children said %s", c.Name, c.Index, index[c.Name])
		}
	}
}

// A process killed in the middle of a claim holds the registry lock and has
// half-written an entry: the next claimant takes the lock over and the name
// is not stuck.
func TestClaimantDiesMidClaim(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 4}})
	cmd := testproc.Command("die-mid-claim", path, "jobs")
	err := cmd.Run()
	requireKilled(t, err)

	_, err = seg.Lookup(layout.KindOwnerSlots, "jobs")
	require.ErrorIs(t, err, shm.ErrNotFound, "a half-written claim must stay invisible")

	done := make(chan error, 1)
	go func() {
		_, err := seg.Claim(layout.KindOwnerSlots, "jobs")
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("claim after a dead claimant did not complete")
	}
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Len(t, claims, 1)
	require.Equal(t, "jobs", claims[0].Name)
	require.EqualValues(t, 1, claims[0].Refs)
}

// A process killed between the two counts of a claim (Refs counted, its
// reference record not yet) or of a release (its record dropped, Refs not
// yet) leaves a reference no record names; the next taker of the registry
// lock, which it died holding, recounts Refs from the records, so the
// claim is not kept forever.
func TestKilledBetweenCountsIsRecounted(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"claim", "release"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			seg, path := create(t, shm.Options{Options: layout.Options{Slots: 4}})
			// Another live reference, which the recount must keep.
			mine, err := seg.Claim(layout.KindOwnerSlots, "jobs")
			require.NoError(t, err)
			err = testproc.Command("die-between-steps", path, "jobs", step).Run()
			requireKilled(t, err)

			claims, err := seg.Claims(layout.KindOwnerSlots)
			require.NoError(t, err)
			require.Len(t, claims, 1)
			require.EqualValues(t, 2, claims[0].Refs, "the dead process's uncounted reference")

			_, err = seg.DropDeadClaims(false) // takes the dead holder's registry lock over
			require.NoError(t, err)
			claims, err = seg.Claims(layout.KindOwnerSlots)
			require.NoError(t, err)
			require.Len(t, claims, 1)
			require.EqualValues(t, 1, claims[0].Refs, "only this process's reference is left")
			require.NoError(t, seg.Release(layout.KindOwnerSlots, mine))
			requireNoClaims(t, seg)
		})
	}
}

func TestClaimRelease(t *testing.T) {
	t.Parallel()
	seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 2, Upgrades: 1}})

	a, err := seg.Claim(layout.KindOwnerSlots, "a")
	require.NoError(t, err)
	slot, _ := seg.Slot(a)
	slot.Token.Store(7)
	again, err := seg.Claim(layout.KindOwnerSlots, "a")
	require.NoError(t, err)
	require.Equal(t, a, again)
	if got := slot.Token.Load(); got != 7 {
		t.Fatalf("claiming a claimed name must not reset it: token %d, want 7", got)
	}
	b, err := seg.Claim(layout.KindOwnerSlots, "")
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	_, err = seg.Claim(layout.KindOwnerSlots, "c")
	require.ErrorIs(t, err, shm.ErrTableFull)

	require.NoError(t, seg.Release(layout.KindOwnerSlots, a))
	_, err = seg.Lookup(layout.KindOwnerSlots, "a")
	require.NoError(t, err, "one reference is left")
	require.NoError(t, seg.Release(layout.KindOwnerSlots, a))
	_, err = seg.Lookup(layout.KindOwnerSlots, "a")
	require.NoError(t, err, "its lock is held (token 7): the claim stays, unreferenced")
	require.ErrorIs(t, seg.Release(layout.KindOwnerSlots, a), shm.ErrNotClaimed, "no reference left")
	_, err = seg.Claim(layout.KindOwnerSlots, "c")
	require.ErrorIs(t, err, shm.ErrTableFull, "a held lock's claim is never recycled")

	slot.Token.Store(0) // released
	c, err := seg.Claim(layout.KindOwnerSlots, "c")
	require.NoError(t, err, "a free, unreferenced claim is recycled")
	require.Equal(t, a, c)
	_, err = seg.Lookup(layout.KindOwnerSlots, "a")
	require.ErrorIs(t, err, shm.ErrNotFound)
	require.NoError(t, seg.Release(layout.KindOwnerSlots, c))
	_, err = seg.Lookup(layout.KindOwnerSlots, "c")
	require.ErrorIs(t, err, shm.ErrNotFound, "a free lock's last reference frees its claim")
	require.ErrorIs(t, seg.Release(layout.KindOwnerSlots, c), shm.ErrNotClaimed)

	u, err := seg.Claim(layout.KindUpgrades, "rw")
	require.NoError(t, err)
	require.Equal(t, 0, u)
	_, err = seg.Claim(layout.KindUpgrades, "rw2")
	require.ErrorIs(t, err, shm.ErrTableFull)
}

// A claim's use is recorded by the first claimant that says it, matched
// against later ones, and reported by Claims.
func TestClaimAs(t *testing.T) {
	t.Parallel()
	seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 4}})
	for _, step := range []struct {
		name    string
		use     uint32
		wantErr error
		wantUse uint32
	}{
		{"a", 0, nil, 0},                // unsaid
		{"a", 2, nil, 2},                // the first use given is taken
		{"a", 0, nil, 2},                // 0 matches anything
		{"a", 2, nil, 2},                // the same use
		{"a", 1, shm.ErrUseMismatch, 2}, // another use: refused
		{"b", 1, nil, 1},                // recorded at the claim itself
		{"b", 3, shm.ErrUseMismatch, 1},
	} {
		before, err := seg.Claims(layout.KindOwnerSlots)
		require.NoError(t, err)
		_, err = seg.ClaimAs(layout.KindOwnerSlots, step.name, step.use)
		if step.wantErr != nil {
			require.ErrorIs(t, err, step.wantErr, "%+v", step)
			after, err := seg.Claims(layout.KindOwnerSlots)
			require.NoError(t, err)
			require.Equal(t, before, after, "a refused claim changes nothing")
			continue
		}
		require.NoError(t, err, "%+v", step)
		i, err := seg.Lookup(layout.KindOwnerSlots, step.name)
		require.NoError(t, err)
		claims, err := seg.Claims(layout.KindOwnerSlots)
		require.NoError(t, err)
		for _, c := range claims {
			if c.Index == i {
				require.Equal(t, step.wantUse, c.Use, "%+v", step)
			}
		}
	}
}

func TestClaimErrorsChangeNothing(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 2}})
	_, err := seg.Claim(layout.KindOwnerSlots, "keep")
	require.NoError(t, err)
	ro, err := shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()

	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"empty-after-trim name too long", func() error { _, err := seg.Claim(layout.KindOwnerSlots, strings.Repeat("x", 41)); return err }, layout.ErrBadName},
		{"control char", func() error { _, err := seg.Claim(layout.KindOwnerSlots, "a\nb"); return err }, layout.ErrBadName},
		{"invalid utf8", func() error { _, err := seg.Claim(layout.KindOwnerSlots, "\xff"); return err }, layout.ErrBadName},
		{"table without directory", func() error { _, err := seg.Claim(layout.KindLockMgr, "x"); return err }, shm.ErrNotClaimable},
		{"release out of range", func() error { return seg.Release(layout.KindOwnerSlots, 2) }, shm.ErrIndex},
		{"release negative", func() error { return seg.Release(layout.KindOwnerSlots, -1) }, shm.ErrIndex},
		{"release unclaimed", func() error { return seg.Release(layout.KindOwnerSlots, 1) }, shm.ErrNotClaimed},
		{"slot out of range", func() error { _, err := seg.Slot(2); return err }, shm.ErrIndex},
		{"upgrade out of range", func() error { _, err := seg.Upgrade(1 << 20); return err }, shm.ErrIndex},
		{"reader of upgrade out of range", func() error { _, err := seg.UpgradeReader(1<<20, 0); return err }, shm.ErrIndex},
		{"reader out of range", func() error { _, err := seg.UpgradeReader(0, layout.DefaultUpgradeReaders); return err }, shm.ErrIndex},
		{"reader negative", func() error { _, err := seg.UpgradeReader(0, -1); return err }, shm.ErrIndex},
		{"region of unknown table", func() error { _, err := seg.Region(99); return err }, layout.ErrUnknownTable},
		{"claim on read-only", func() error { _, err := ro.Claim(layout.KindOwnerSlots, "x"); return err }, shm.ErrReadOnly},
		{"release on read-only", func() error { return ro.Release(layout.KindOwnerSlots, 0) }, shm.ErrReadOnly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.call(), tc.want)
			claims, err := seg.Claims(layout.KindOwnerSlots)
			require.NoError(t, err)
			require.Equal(t, []shm.Claim{{Index: 0, Name: "keep", Refs: 1, Claimer: proc.Self().Pack()}}, claims)
		})
	}
}

// After Close every accessor and Claim fail with ErrClosed; Release still
// drops a reference taken before, in the file.
func TestUseAfterClose(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	i, err := seg.Claim(layout.KindOwnerSlots, "held")
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	require.ErrorIs(t, seg.Close(), shm.ErrClosed)
	_, err = seg.Slot(0)
	require.ErrorIs(t, err, shm.ErrClosed)
	_, err = seg.Upgrade(0)
	require.ErrorIs(t, err, shm.ErrClosed)
	_, err = seg.UpgradeReader(0, 0)
	require.ErrorIs(t, err, shm.ErrClosed)
	_, err = seg.Region(layout.KindLockMgr)
	require.ErrorIs(t, err, shm.ErrClosed)
	_, err = seg.Claim(layout.KindOwnerSlots, "x")
	require.ErrorIs(t, err, shm.ErrClosed)
	_, err = seg.Claims(layout.KindOwnerSlots)
	require.ErrorIs(t, err, shm.ErrClosed)

	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
	require.ErrorIs(t, seg.Release(layout.KindOwnerSlots, i), shm.ErrNotClaimed)
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer other.Close()
	claims, err := other.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Empty(t, claims, "the release reached the file")
}

// A claim under way when Close begins completes in the file before Close
// returns: it is there for another handle, with the registry lock released
// there (else the other handle's Claim would wait for this process to
// exit). Not parallel: the hook is the package's.
func TestCloseDuringClaim(t *testing.T) {
	seg, path := create(t, shm.Options{})
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer other.Close()

	closed := make(chan error, 1)
	restore := shm.SetTestHookBeforePublish(func() {
		go func() { closed <- seg.Close() }()
		testproc.WaitFor(t, seg.Closed, "Close to begin")
	})
	i, err := seg.Claim(layout.KindOwnerSlots, "jobs")
	restore()
	require.NoError(t, err, "the claim was under way when Close began")
	require.NoError(t, <-closed)

	j, err := other.Lookup(layout.KindOwnerSlots, "jobs")
	require.NoError(t, err, "the claim is in the file")
	require.Equal(t, i, j)
	done := make(chan error, 1)
	go func() {
		j, err := other.Claim(layout.KindOwnerSlots, "jobs")
		if err == nil && j != i {
			err = fmt.Errorf("claimed %d, not %d", j, i)
		}
		done <- err
	}()
	require.NoError(t, testproc.Receive(t, done, "the claim (the registry lock must not stay held in the file)"))
	claims, err := other.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Len(t, claims, 1)
	require.EqualValues(t, 2, claims[0].Refs)
}

// A pointer into a segment kept past Close and past the Segment itself
// neither faults nor reaches the file: once the closed Segment is
// unreachable its mapping becomes private zero pages.
func TestPointerPastCloseIsHarmless(t *testing.T) {
	path := testproc.SegmentPath(t)
	slot := closedSlotZero(t, path)
	waitCleanups(t, func() bool { return slot.Token.Load() == 0 })

	require.Zero(t, slot.Token.Load(), "after Close the old address reads private zero pages")
	slot.Token.Store(7) // must not fault, must not reach the file

	again, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer again.Close()
	s, err := again.Slot(0)
	require.NoError(t, err)
	require.Equal(t, uint64(42), s.Token.Load(), "the file kept what was written before Close")
}

// closedSlotZero creates a segment at path, stores 42 in slot 0's token,
// closes the segment and returns the slot, keeping nothing else of it.
func closedSlotZero(t *testing.T, path string) *layout.OwnerSlot {
	t.Helper()
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	slot, err := seg.Slot(0)
	require.NoError(t, err)
	slot.Token.Store(42)
	require.NoError(t, seg.Close())
	require.True(t, seg.Closed())
	slot.Token.Store(42) // a closed segment's mapping stays the file's while the Segment is reachable
	return slot
}

// waitCleanups collects garbage until done reports true: closed Segments
// nobody refers to are quarantined by a cleanup, which runs soon after a
// collection but not during it.
func waitCleanups(t *testing.T, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(testproc.Timeout) // a bound on a hang
	for !done() {
		require.True(t, time.Now().Before(deadline), "a closed, unreachable segment is still mapped after %v", testproc.Timeout)
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// A closed Segment that is still reachable keeps its mapping of the file,
// so what its handles do in flight or release after Close reaches the file.
func TestClosedSegmentKeepsFileWhileReachable(t *testing.T) {
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	slot, err := seg.Slot(0)
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	runtime.GC()
	slot.Token.Store(9)
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer other.Close()
	s, err := other.Slot(0)
	require.NoError(t, err)
	require.Equal(t, uint64(9), s.Token.Load())
	runtime.KeepAlive(seg)
}

// Quarantined ranges merge, so a process that opens and closes many
// segments does not run out of mappings (vm.max_map_count), read-only and
// writable ones taking turns too (a monitor beside a user: the ranges of
// the two kinds once kept their two protections, and did not merge: a
// mapping more for every two cycles, until mmap failed with ENOMEM, as
// FuzzOpen found after some 145,000 opens).
func TestCloseDoesNotPileUpMappings(t *testing.T) {
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	seg = nil
	settle := func() int {
		// Cleanups run after a collection, in their own goroutine: wait
		// until two collections in a row leave the count alone.
		n := -1
		waitCleanups(t, func() bool {
			m := strings.Count(mappings(t), "\n")
			same := m == n
			n = m
			return same
		})
		return n
	}
	before := settle()
	const cycles = 200
	for i := range cycles {
		s, err := shm.Open(path, shm.Options{ReadOnly: i%2 == 1})
		require.NoError(t, err)
		require.NoError(t, s.Close())
	}
	grown := settle() - before
	t.Logf("mappings grew by %d", grown)
	require.Less(t, grown, cycles/4, "mappings grew by %d over %d open/close cycles", grown, cycles)
}

func mappings(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return string(b)
}

func TestOpenOrCreate(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	a, err := shm.OpenOrCreate(path, shm.Options{})
	require.NoError(t, err)
	defer a.Close()
	b, err := shm.OpenOrCreate(path, shm.Options{})
	require.NoError(t, err)
	defer b.Close()
	require.True(t, a.IsCreator())
	require.False(t, b.IsCreator())
}

// validSegmentBytes returns the bytes of a freshly created segment.
func validSegmentBytes(t *testing.T) []byte {
	t.Helper()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 2, Upgrades: 1, TxnRecords: 1, TxnArenaBytes: 64, LockMgrEntries: 1}})
	require.NoError(t, seg.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func rechecksum(b []byte) {
	binary.LittleEndian.PutUint32(b[layout.OffChecksum:], layout.Checksum(b))
}

func TestOpenRefusesBadFiles(t *testing.T) {
	t.Parallel()
	valid := validSegmentBytes(t)
	write := func(t *testing.T, data []byte) string {
		path := testproc.SegmentPath(t)
		require.NoError(t, os.WriteFile(path, data, 0o600))
		return path
	}
	edit := func(f func(b []byte) []byte) func(t *testing.T) string {
		return func(t *testing.T) string { return write(t, f(bytes.Clone(valid))) }
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) string
		opts  shm.Options
		want  error
	}{
		{"missing", func(t *testing.T) string { return testproc.SegmentPath(t) }, shm.Options{}, fs.ErrNotExist},
		{"bad path", func(t *testing.T) string { return "" }, shm.Options{}, shm.ErrBadPath},
		{"symlink", func(t *testing.T) string {
			target := write(t, valid)
			link := testproc.SegmentPath(t)
			require.NoError(t, os.Symlink(target, link))
			return link
		}, shm.Options{}, shm.ErrSymlink},
		{"directory", func(t *testing.T) string {
			p := testproc.SegmentPath(t)
			require.NoError(t, os.Mkdir(p, 0o700))
			return p
		}, shm.Options{}, shm.ErrNotRegular},
		{"fifo", func(t *testing.T) string {
			p := testproc.SegmentPath(t)
			require.NoError(t, syscall.Mkfifo(p, 0o600))
			return p
		}, shm.Options{}, shm.ErrNotRegular},
		{"empty", func(t *testing.T) string { return write(t, nil) }, shm.Options{}, layout.ErrTruncated},
		{"truncated", func(t *testing.T) string { return write(t, valid[:100]) }, shm.Options{}, layout.ErrTruncated},
		{"truncated after header", func(t *testing.T) string { return write(t, valid[:layout.HeaderSize+64]) }, shm.Options{}, layout.ErrSizeMismatch},
		{"garbage", func(t *testing.T) string { return write(t, bytes.Repeat([]byte("garbage!"), 1024)) }, shm.Options{}, layout.ErrBadMagic},
		{"longer than header says", edit(func(b []byte) []byte { return append(b, make([]byte, layout.PageSize)...) }), shm.Options{}, layout.ErrSizeMismatch},
		{"another version", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[layout.OffVersion:], layout.Version+1)
			rechecksum(b)
			return b
		}), shm.Options{}, layout.ErrVersion},
		{"the previous version (made by an older shmlock)", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[layout.OffVersion:], layout.Version-1)
			rechecksum(b)
			return b
		}), shm.Options{}, layout.ErrVersion},
		{"checksum", edit(func(b []byte) []byte { b[layout.OffCreated]++; return b }), shm.Options{}, layout.ErrChecksum},
		{"never ready", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[layout.OffReady:], 0)
			return b
		}), shm.Options{ReadyTimeout: 50 * time.Millisecond}, shm.ErrNotReady},
		{"other pid namespace", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[layout.OffPIDNS:], 1)
			rechecksum(b)
			return b
		}), shm.Options{}, shm.ErrForeignPIDNamespace},
		{"other owner", func(t *testing.T) string {
			p := write(t, valid)
			if err := os.Chown(p, 4242, 4242); err != nil {
				t.Skipf("cannot chown (not root?): %v", err)
			}
			return p
		}, shm.Options{}, shm.ErrForeignOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.setup(t)
			before, statErr := os.Lstat(path)
			var content []byte
			if statErr == nil && before.Mode().IsRegular() {
				content, _ = os.ReadFile(path)
			}
			seg, err := shm.Open(path, tc.opts)
			if seg != nil {
				seg.Close()
			}
			require.ErrorIs(t, err, tc.want)
			if content != nil {
				after, _ := os.ReadFile(path)
				require.Equal(t, content, after, "a refused open must not change the file")
			}
		})
	}
}

func TestOpenAllowsWhatOptionsAllow(t *testing.T) {
	t.Parallel()
	b := validSegmentBytes(t)
	binary.LittleEndian.PutUint64(b[layout.OffPIDNS:], 1)
	rechecksum(b)
	path := testproc.SegmentPath(t)
	require.NoError(t, os.WriteFile(path, b, 0o600))
	if err := os.Chown(path, 4242, 4242); err != nil {
		t.Skipf("cannot chown (not root?): %v", err)
	}
	seg, err := shm.Open(path, shm.Options{AllowForeignOwner: true, AllowForeignPIDNamespace: true})
	require.NoError(t, err)
	require.NoError(t, seg.Close())
}

func TestCreateRefusesTakenNames(t *testing.T) {
	t.Parallel()
	_, path := create(t, shm.Options{})
	_, err := shm.Create(path, shm.Options{})
	require.ErrorIs(t, err, shm.ErrExists)

	target := testproc.SegmentPath(t)
	link := testproc.SegmentPath(t)
	require.NoError(t, os.Symlink(target, link))
	_, err = shm.Create(link, shm.Options{})
	require.ErrorIs(t, err, shm.ErrExists, "create must not follow a symlink")
	_, err = os.Stat(target)
	require.ErrorIs(t, err, fs.ErrNotExist, "nothing may be created at the symlink's target")

	_, err = shm.Create(testproc.SegmentPath(t), shm.Options{Options: layout.Options{Slots: layout.MaxSlots + 1}})
	require.ErrorIs(t, err, layout.ErrLimit)
}

func TestRemove(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{})
	require.NoError(t, seg.Close())
	require.NoError(t, shm.Remove(path))
	_, err := os.Stat(path)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorIs(t, shm.Remove(path), fs.ErrNotExist)

	other := testproc.SegmentPath(t)
	require.NoError(t, os.WriteFile(other, []byte("precious data, not a segment"), 0o600))
	require.ErrorIs(t, shm.Remove(other), layout.ErrBadMagic)
	empty := testproc.SegmentPath(t)
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	require.ErrorIs(t, shm.Remove(empty), layout.ErrTruncated)
	_, err = os.Stat(other)
	require.NoError(t, err, "a non-segment must not be removed")

	link := testproc.SegmentPath(t)
	require.NoError(t, os.Symlink(other, link))
	require.ErrorIs(t, shm.Remove(link), shm.ErrSymlink)
}

// A file put in the segment's place after Remove checked the segment is
// not removed: Remove unlinked the path, whatever it named by then.
// (Not parallel: the hook is global.)
func TestRemoveLeavesAReplacement(t *testing.T) {
	seg, path := create(t, shm.Options{})
	require.NoError(t, seg.Close())
	restore := shm.SetTestHookBeforeUnlink(func() {
		tmp := path + ".new"
		require.NoError(t, os.WriteFile(tmp, []byte("precious data, not a segment"), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	})
	defer restore()
	err := shm.Remove(path)
	require.ErrorIs(t, err, shm.ErrChanged)
	b, err := os.ReadFile(path)
	require.NoError(t, err, "the replacement was removed")
	require.Equal(t, "precious data, not a segment", string(b))
	// This process's asides only: /dev/shm is shared, and another test
	// process's Remove moves its segment aside for a moment too.
	asides, err := filepath.Glob(filepath.Join(filepath.Dir(path), fmt.Sprintf(".shmlock-rm-%d-*", os.Getpid())))
	require.NoError(t, err)
	require.Empty(t, asides, "left behind")
}

// Open of a path that names a terminal refuses it, and must not make it
// the controlling terminal of a session leader that has none, as an open
// without O_NOCTTY does: the terminal's hangup would then kill the process.
func TestOpenTerminalTakesNoControllingTTY(t *testing.T) {
	t.Parallel()
	cmd := testproc.Command("open-tty")
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setpgid = true, false // a session leads its own group
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 {
		t.Skipf("%s", out)
	}
	// Exit status 1, or SIGHUP when the helper closes the terminal.
	require.NoError(t, err, "Open of a terminal made it the controlling terminal? %s", out)
}

func TestResolvePath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		err      error
	}{
		{"jobs", "/dev/shm/jobs", nil},
		{"./jobs", "jobs", nil},
		{"/tmp/x/../seg", "/tmp/seg", nil},
		{"", "", shm.ErrBadPath},
		{"..", "", shm.ErrBadPath},
		{"dir/", "", shm.ErrBadPath},
		{"a\x00b", "", shm.ErrBadPath},
	} {
		got, err := shm.ResolvePath(tc.in)
		if tc.err != nil {
			require.ErrorIs(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err)
		if got != tc.want {
			t.Errorf("ResolvePath(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Releasing the last claim of an upgrade mutex clears its reader records
// too, and only its own.
func TestReleaseUpgradeClearsReaders(t *testing.T) {
	t.Parallel()
	seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 1, Upgrades: 2, UpgradeReaders: 3}})
	require.Equal(t, 3, seg.ReadersPerUpgrade())
	require.Equal(t, 6, seg.Len(layout.KindUpgradeReaders))
	a, err := seg.Claim(layout.KindUpgrades, "a")
	require.NoError(t, err)
	b, err := seg.Claim(layout.KindUpgrades, "b")
	require.NoError(t, err)
	for _, i := range []int{a, b} {
		for j := range 3 {
			r, err := seg.UpgradeReader(i, j)
			require.NoError(t, err)
			r.Owner.Store(uint64(10*i + j + 1))
			if i == b {
				r.Count.Store(7) // a's readers left: a is free, and its claim goes
			}
		}
	}
	require.NoError(t, seg.Release(layout.KindUpgrades, a))
	for j := range 3 {
		ra, _ := seg.UpgradeReader(a, j)
		rb, _ := seg.UpgradeReader(b, j)
		require.Zero(t, ra.Owner.Load())
		require.Zero(t, ra.Count.Load())
		require.Equal(t, uint64(10*b+j+1), rb.Owner.Load())
	}
}

// A segment in a file that survived a reboot: its recorded owners belong to
// the previous boot and must read as stale after the first open.
func TestOpenAfterRebootMarksOwnersStale(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 2, Upgrades: 1, LockMgrEntries: 2}})
	i, err := seg.Claim(layout.KindOwnerSlots, "held")
	require.NoError(t, err)
	slot, _ := seg.Slot(i)
	me := proc.Self().Pack()
	slot.PID.Store(me)
	up, _ := seg.Upgrade(0)
	up.Writer.Store(me)
	lm := lockMgrEntry(t, seg, 1)
	lm.Lock.Store(me)
	lm.Holders[1].Process.Store(me)
	lm.Holders[1].Companion.Store(me)
	rec, err := seg.UpgradeReader(0, 1)
	require.NoError(t, err)
	rec.Owner.Store(me)
	rec.Count.Store(3)
	require.NoError(t, seg.Close())

	// Pretend the owners were recorded under another boot.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte{0xAB}, 16), layout.OffOwnersBoot)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	ro, err := shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	roSlot, _ := ro.Slot(i)
	require.Equal(t, me, roSlot.PID.Load(), "a read-only open must not recover")
	require.NoError(t, ro.Close())

	seg, err = shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer seg.Close()
	slot, _ = seg.Slot(i)
	up, _ = seg.Upgrade(0)
	lm = lockMgrEntry(t, seg, 1)
	rec, _ = seg.UpgradeReader(0, 1)
	require.Equal(t, uint32(3), rec.Count.Load(), "recovery marks owners, it does not touch counts")
	for name, w := range map[string]uint64{"slot owner": slot.PID.Load(), "upgrade writer": up.Writer.Load(),
		"lockmgr entry lock": lm.Lock.Load(), "lockmgr holder": lm.Holders[1].Process.Load(),
		"lockmgr companion": lm.Holders[1].Companion.Load(), "reader record": rec.Owner.Load()} {
		id, stale := proc.Unpack(w)
		if !stale || id != proc.Self() {
			t.Errorf("%s after reboot: got %v stale=%v, want %v stale", name, id, stale, proc.Self())
		}
		if proc.AlivePacked(w) {
			t.Errorf("%s after reboot: still alive", name)
		}
	}
	// A second open must not mark anything again or differently.
	again, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	require.NoError(t, again.Close())
	require.Equal(t, proc.MarkStale(me), slot.PID.Load())
}

// fakeReboot makes the segment at path read as one whose owners were
// recorded under another boot, as a file that survived a reboot does.
func fakeReboot(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte{0xAB}, 16), layout.OffOwnersBoot)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// A txn arena of its control area alone (128 bytes) has no room for a pin
// row after it, though half the arena would hold one: the first open after
// a reboot must mark no "row 0" stale there, which is the next table's
// first word, here the first data region's State and NameLen (bit 63 made
// its name 2^31 bytes long: the region was lost, and every later claim was
// refused for the damaged directory).
func TestRebootLeavesTheWordAfterATinyArena(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{TxnRecords: 1, TxnArenaBytes: 128,
		LockMgrEntries: -1, Upgrades: -1, ClaimRefs: -1}})
	_, err := seg.Data("kept", 8)
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	fakeReboot(t, path)
	again, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer again.Close()
	r, err := again.Data("kept", 0)
	require.NoError(t, err)
	require.Equal(t, 8, r.Len())
}

// A machine that goes down while a process is between a claim's two counts
// (Refs counted, its reference record not yet) leaves the registry lock
// held and Refs one above what the records count. The first open after the
// reboot frees the lock: it must recount as a takeover from a dead holder
// does, or the reference that no record names is never dropped and the
// name is never freed nor recycled. (Before, the open only stored 0 into
// the lock word: the claim below kept a reference for ever.)
func TestRebootMidClaimRecounts(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 1}})
	err := testproc.Command("die-between-steps", path, "gone", "claim").Run()
	requireKilled(t, err) // the lock held, as by a process of the boot before
	require.NoError(t, seg.Close())
	fakeReboot(t, path)

	seg, err = shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer seg.Close()
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	for _, c := range claims {
		t.Errorf("after the reboot: got claim %q with %d references, want none", c.Name, c.Refs)
	}
	i, err := seg.Claim(layout.KindOwnerSlots, "next")
	require.NoError(t, err, "the only slot must be free again")
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
}

// lockMgrEntry views entry i of seg's lock-manager table.
func lockMgrEntry(t *testing.T, seg *shm.Segment, i int) *layout.LockMgrEntry {
	t.Helper()
	mem, err := seg.Region(layout.KindLockMgr)
	require.NoError(t, err)
	e, err := memview.At[layout.LockMgrEntry](mem, uint64(i*layout.LockMgrEntrySize))
	require.NoError(t, err)
	return e
}

type execCmd = exec.Cmd

// requireNoClaims requires seg to have no owner-slot claim.
func requireNoClaims(t *testing.T, seg *shm.Segment) {
	t.Helper()
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Empty(t, claims)
}

// requireKilled requires err to be the end of a helper that kill -9'd
// itself.
func requireKilled(t *testing.T, err error) {
	t.Helper()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())
}

func startHelper(t *testing.T, out *bytes.Buffer, name string, args ...string) *execCmd {
	t.Helper()
	cmd := testproc.Command(name, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	require.NoError(t, cmd.Start())
	return cmd
}

// A file whose mode lets other users in is refused, changing nothing,
// unless the caller allows it; group bits are refused unless the caller
// asked for group access. That the creator did (the header's
// FlagGroupAccess) is no permission: the group can write the header.
func TestPermissiveModeRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		group   bool // created with GroupAccess
		mode    os.FileMode
		opts    shm.Options
		refused bool
	}{
		{"0600", false, 0o600, shm.Options{}, false},
		{"others read", false, 0o604, shm.Options{}, true},
		{"others write", false, 0o602, shm.Options{}, true},
		{"others execute", false, 0o601, shm.Options{}, true},
		{"others allowed", false, 0o606, shm.Options{AllowOthersAccess: true}, false},
		{"group read", false, 0o640, shm.Options{}, true},
		{"group, not created for it", false, 0o660, shm.Options{}, true},
		{"group, created for it, not asked for", true, 0o660, shm.Options{}, true},
		{"group, asked for by the caller", false, 0o660, shm.Options{GroupAccess: true}, false},
		{"group, created and asked for", true, 0o660, shm.Options{GroupAccess: true}, false},
		{"group and others, group asked for", true, 0o666, shm.Options{GroupAccess: true}, true},
		{"group and others, others allowed", true, 0o666, shm.Options{AllowOthersAccess: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := testproc.SegmentPath(t)
			seg, err := shm.Create(path, shm.Options{GroupAccess: tc.group})
			require.NoError(t, err)
			require.NoError(t, seg.Close())
			require.NoError(t, os.Chmod(path, tc.mode))
			before, err := os.ReadFile(path)
			require.NoError(t, err)
			s, err := shm.Open(path, tc.opts)
			if tc.refused {
				require.ErrorIs(t, err, shm.ErrPermissiveMode)
				after, err := os.ReadFile(path)
				require.NoError(t, err)
				require.Equal(t, before, after, "a refused open changes nothing")
				return
			}
			require.NoError(t, err)
			require.NoError(t, s.Close())
		})
	}
}

// The chmod that a refusal for the mode advises can be pasted into a shell
// as it is, for a path that needs quoting too, and the segment then opens.
func TestPermissiveModeAdviceQuotesThePath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "it's a $segment")
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	require.NoError(t, os.Chmod(path, 0o604))
	_, err = shm.Open(path, shm.Options{})
	require.ErrorIs(t, err, shm.ErrPermissiveMode)
	quoted := "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
	require.Contains(t, err.Error(), "chmod o-rwx "+quoted+" makes it private")
	out, err := exec.Command("sh", "-c", "chmod o-rwx "+quoted).CombinedOutput()
	require.NoError(t, err, "%s", out)
	seg, err = shm.Open(path, shm.Options{})
	require.NoError(t, err)
	require.NoError(t, seg.Close())
}

// A lock's contention counters belong to its claim: another claim of the
// same name keeps them, a fresh claim of the entry under a new name starts
// them at zero.
func TestLockStatsResetByFreshClaim(t *testing.T) {
	t.Parallel()
	seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 1, Upgrades: 1}})
	for _, k := range []layout.Kind{layout.KindOwnerSlots, layout.KindUpgrades} {
		a, err := seg.Claim(k, "a")
		require.NoError(t, err)
		st := seg.LockStats(k, a)
		require.NotNil(t, st)
		st.RecordWait(time.Millisecond, true)
		again, err := seg.Claim(k, "a")
		require.NoError(t, err)
		require.Equal(t, a, again)
		require.EqualValues(t, 1, st.Contended.Load(), "%v: a second claim of the name keeps its counters", k)
		require.NoError(t, seg.Release(k, a))
		require.NoError(t, seg.Release(k, a))

		b, err := seg.Claim(k, "b")
		require.NoError(t, err)
		require.Equal(t, a, b, "%v: the only entry, freed and claimed anew", k)
		require.Zero(t, st.Contended.Load(), "%v", k)
		require.Zero(t, st.Timeouts.Load(), "%v", k)
		require.Zero(t, st.WaitNanos.Load(), "%v", k)
		require.NoError(t, seg.Release(k, b))
	}
}

// RemoveUnused calls its last check with the file's name moved aside
// (the path free, nobody can open the file), and an error from it puts the
// name back and is returned; without one the file goes.
func TestRemoveUnusedLooksAgain(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{})
	require.NoError(t, seg.Close())
	errBusy := errors.New("busy")
	var aside string
	err := shm.RemoveUnused(path, nil, func(p string) error {
		aside = p
		_, err := os.Lstat(path)
		require.ErrorIs(t, err, os.ErrNotExist, "the name is not moved aside")
		return errBusy
	})
	require.ErrorIs(t, err, errBusy)
	require.NotEqual(t, path, aside)
	_, err = os.Lstat(aside)
	require.ErrorIs(t, err, os.ErrNotExist, "the name aside stays")
	_, err = os.Lstat(path)
	require.NoError(t, err, "the name is not back")
	require.NoError(t, shm.RemoveUnused(path, nil, func(string) error { return nil }))
	_, err = os.Lstat(path)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// Every method of a closed Segment that reads or changes the file through
// it fails with ErrClosed (a second Close too) and none panics; the file
// is as it was, byte for byte. The getters of what was read at Open
// (Path, Header, Len, ...) keep answering. Release is the exception, a
// release: TestUseAfterClose.
func TestEveryMethodAfterClose(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 2, Upgrades: 1, UpgradeReaders: 1,
		LockMgrEntries: 2, DataBytes: 1024}})
	require.NoError(t, err)
	_, err = seg.Claim(layout.KindOwnerSlots, "held")
	require.NoError(t, err)
	r, err := seg.Data("region", 16)
	require.NoError(t, err)
	require.NoError(t, seg.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	ops := []struct {
		name string
		op   func() error
	}{
		{"Close", seg.Close},
		{"CheckDirectories", func() error { _, err := seg.CheckDirectories(); return err }},
		{"AbandonedClaims", func() error { _, err := seg.AbandonedClaims(); return err }},
		{"Data", func() error { _, err := seg.Data("region", 0); return err }},
		{"Data, a new region", func() error { _, err := seg.Data("new", 16); return err }},
		{"Regions", func() error { _, err := seg.Regions(); return err }},
		{"DataArea", func() error { _, _, err := seg.DataArea(); return err }},
		{"Region.Uint64", func() error { _, err := r.Uint64(0); return err }},
		{"Region.Uint32", func() error { _, err := r.Uint32(0); return err }},
		{"Claim", func() error { _, err := seg.Claim(layout.KindOwnerSlots, "x"); return err }},
		{"ClaimAs", func() error { _, err := seg.ClaimAs(layout.KindOwnerSlots, "held", 0); return err }},
		{"DropDeadClaims", func() error { _, err := seg.DropDeadClaims(false); return err }},
		{"DropDeadClaims dry run", func() error { _, err := seg.DropDeadClaims(true); return err }},
		{"Lookup", func() error { _, err := seg.Lookup(layout.KindOwnerSlots, "held"); return err }},
		{"ClaimUse", func() error { _, err := seg.ClaimUse(layout.KindOwnerSlots, 0); return err }},
		{"Claims", func() error { _, err := seg.Claims(layout.KindOwnerSlots); return err }},
		{"Replaced", func() error { _, err := seg.Replaced(); return err }},
		{"Slot", func() error { _, err := seg.Slot(0); return err }},
		{"Upgrade", func() error { _, err := seg.Upgrade(0); return err }},
		{"UpgradeReader", func() error { _, err := seg.UpgradeReader(0, 0); return err }},
		{"UpgradeReaders", func() error { _, err := seg.UpgradeReaders(0); return err }},
		{"Region", func() error { _, err := seg.Region(layout.KindLockMgr); return err }},
	}
	for _, o := range ops {
		require.NotPanics(t, func() { require.ErrorIs(t, o.op(), shm.ErrClosed, o.name) }, o.name)
	}
	_, ok := seg.OnClose(func() {})
	require.False(t, ok, "OnClose after Close")
	require.True(t, seg.Closed())
	require.Equal(t, path, seg.Path())
	require.Equal(t, 2, seg.Len(layout.KindOwnerSlots))
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Equal(before, after), "a call after Close changed the file")
}
