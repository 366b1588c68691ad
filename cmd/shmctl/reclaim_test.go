package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

func TestReclaimFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want reclaimOptions
	}{
		{[]string{"jobs"}, reclaimOptions{Segment: "jobs", Wait: reclaimDefaultWait}},
		{[]string{"/dev/shm/jobs", "--dry-run", "--json"}, reclaimOptions{Segment: "/dev/shm/jobs", DryRun: true, Wait: reclaimDefaultWait, JSON: true}},
		{[]string{"-n", "x", "--wait", "1m"}, reclaimOptions{Segment: "x", DryRun: true, Wait: time.Minute}},
		{[]string{"--group", "x"}, reclaimOptions{Segment: "x", Group: true, Wait: reclaimDefaultWait}},
	}
	for _, tt := range tests {
		got, ios := parsedOptions(t, newCmdReclaim, tt.args)
		tt.want.IO = ios
		assert.Equal(t, &tt.want, got, "args %q", tt.args)
	}
}

// reclaimSegment makes a segment of 4 slots:
//
//	0 "jobs"   held by this live process (TID 7, generation 42)
//	1 "dead"   held by a dead incarnation of this pid (TID 7, generation 10)
//	2 ""       free, generation 5
//	3 ""       token-mode hold (no process recorded)
func reclaimSegment(t *testing.T) *shm.Segment {
	t.Helper()
	seg := newSegment(t, layout.Options{Slots: 4})
	self := proc.Self()
	for _, name := range []string{"jobs", "dead"} {
		_, err := seg.Claim(layout.KindOwnerSlots, name)
		require.NoError(t, err)
	}
	s, _ := seg.Slot(0)
	s.PID.Store(self.Pack())
	s.TID.Store(7)
	s.Token.Store(42)
	s, _ = seg.Slot(1)
	s.PID.Store(proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack())
	s.TID.Store(7)
	s.Token.Store(10)
	s.RecursionCount.Store(2)
	s.Pad.Store(1) // a registered sleeper: reclaim leaves it
	s, _ = seg.Slot(2)
	s.Token.Store(5)
	s, _ = seg.Slot(3)
	s.Token.Store(99)
	return seg
}

// slotWords is every word of slot i.
func slotWords(tb testing.TB, seg *shm.Segment, i int) [5]uint64 {
	tb.Helper()
	s, err := seg.Slot(i)
	require.NoError(tb, err)
	return [5]uint64{s.PID.Load(), s.TID.Load(), s.Token.Load(), uint64(s.RecursionCount.Load()), uint64(s.Pad.Load())}
}

func TestReclaim(t *testing.T) {
	t.Parallel()
	seg := reclaimSegment(t)
	before := [4][5]uint64{}
	for i := range before {
		before[i] = slotWords(t, seg, i)
	}

	r := shmctl(t, false, "--no-header", "reclaim", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stderr)
	assert.Equal(t, fmt.Sprintf("1\tdead\t%d\tdead\t10\t12\treclaimed\n", proc.Self().PID), r.stdout)

	// The dead owner's slot is free, two generations on (the takeover and
	// the release), its recursion reset, marked inconsistent for the next
	// holder, and its sleeper count kept; the release's wake found nobody,
	// which Pad counts.
	pad := uint64(1 | 1<<layout.PadFutileShift)
	assert.Equal(t, [5]uint64{0, 0, 12, uint64(layout.SlotInconsistent), pad}, slotWords(t, seg, 1), "slot 1 {pid, tid, token, recursion, pad}")
	for _, i := range []int{0, 2, 3} {
		assert.Equal(t, before[i], slotWords(t, seg, i), "slot %d changed", i)
	}

	// Nothing is left to do.
	r = shmctl(t, false, "--no-header", "reclaim", seg.Path())
	assert.Equal(t, result{code: exitOK}, r)
	r = shmctl(t, true, "reclaim", seg.Path())
	assert.Equal(t, result{code: exitOK, stderr: "no owner slot, upgrade mutex, transaction or lock of " + seg.Path() + " has a dead owner\n"}, r)
}

func TestReclaimDryRun(t *testing.T) {
	t.Parallel()
	seg := reclaimSegment(t)
	before := [4][5]uint64{}
	for i := range before {
		before[i] = slotWords(t, seg, i)
	}
	r := shmctl(t, true, "reclaim", "--dry-run", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	pid := proc.Self().PID
	width := max(len(fmt.Sprint(pid)), len("PID")) + 2
	assert.Equal(t, ""+
		fmt.Sprintf("INDEX  NAME  %-*sLIVENESS  GENERATION  NEW_GENERATION  ACTION\n", width, "PID")+
		fmt.Sprintf("1      dead  %-*ddead      10          -               would reclaim\n", width, pid), r.stdout)
	for i := range before {
		assert.Equal(t, before[i], slotWords(t, seg, i), "slot %d changed", i)
	}
}

// A segment whose owners were recorded under an earlier boot (a file that
// outlived a reboot) is recovered by the first writable open: every owner
// marked stale, the directory's lock freed, this boot recorded. A dry run
// must leave even that to the real reclaim, as it leaves the locks: it
// reads the owners as stale all the same.
func TestReclaimDryRunOfAnEarlierBootsSegmentChangesNothing(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 1})
	s, err := seg.Slot(0)
	require.NoError(t, err)
	s.PID.Store(proc.Self().Pack())
	s.Token.Store(10)
	f, err := os.OpenFile(seg.Path(), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	boot, err := proc.BootID()
	require.NoError(t, err)
	boot[0] ^= 0xff
	_, err = f.WriteAt(boot[:], layout.OffOwnersBoot)
	require.NoError(t, err)
	before, err := os.ReadFile(seg.Path())
	require.NoError(t, err)

	assert.Equal(t, "would reclaim", oneStaleSlot(t, "reclaim", "--dry-run", "--json", seg.Path()).Action)

	after, err := os.ReadFile(seg.Path())
	require.NoError(t, err)
	assert.True(t, bytes.Equal(before, after), "the dry run changed the segment's file")
}

func TestReclaimJSON(t *testing.T) {
	t.Parallel()
	self := proc.Self()
	for _, dryRun := range []bool{true, false} {
		seg := reclaimSegment(t)
		args := []string{"reclaim", "--json", seg.Path()}
		if dryRun {
			args = append(args, "--dry-run")
		}
		r := shmctl(t, false, args...)
		require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)

		var doc reclaimJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
		for _, s := range doc.Slots {
			checkStarted(t, s.Process)
		}
		want := reclaimSlotJSON{Index: 1, Name: ptr("dead"),
			Process: process(proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}, "dead"),
			TID:     ptr("7"), Generation: "10", Action: "would reclaim"}
		if !dryRun {
			want.Action, want.NewGeneration = "reclaimed", ptr("12")
		}
		assert.Equal(t, &reclaimJSON{docHeader: docHeader{Schema: 1, Command: "reclaim"}, Path: seg.Path(), DryRun: dryRun, Slots: []reclaimSlotJSON{want},
			RWLocks: []reclaimRWLockJSON{}, Txns: []reclaimTxnJSON{}, Locks: []reclaimLockJSON{}, TokenSlots: []reclaimTokenJSON{}, Claims: []reclaimClaimJSON{},
			Leftovers: []reclaimLeftoverJSON{}}, &doc)

		var raw map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
		assert.ElementsMatch(t, []string{"schema", "command", "path", "dry_run", "slots", "rwlocks", "txns", "locks", "token_slots", "claims", "leftovers"}, keys(raw))
		slot := raw["slots"].([]any)[0].(map[string]any)
		assert.ElementsMatch(t, []string{"index", "name", "process", "tid",
			"generation", "new_generation", "action"}, keys(slot))
		if dryRun {
			assert.Nil(t, slot["new_generation"], "new_generation with --dry-run")
		}
	}
}

// An owner recorded under a previous boot is stale, and reclaimed too.
func TestReclaimStale(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 1})
	s, _ := seg.Slot(0)
	s.PID.Store(proc.MarkStale(proc.Self().Pack()))
	assert.Equal(t, "reclaimed", oneStaleSlot(t, "reclaim", "--json", seg.Path()).Action)
	assert.Zero(t, s.PID.Load())
}

// oneStaleSlot runs shmctl with args, a reclaim --json, and returns the
// one slot its document reports, whose owner it found stale.
func oneStaleSlot(t *testing.T, args ...string) reclaimSlotJSON {
	t.Helper()
	r := shmctl(t, false, args...)
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	var doc reclaimJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.Len(t, doc.Slots, 1)
	require.NotNil(t, doc.Slots[0].Process)
	assert.Equal(t, "stale", doc.Slots[0].Process.Liveness)
	return doc.Slots[0]
}

func TestReclaimBroken(t *testing.T) {
	t.Parallel()
	notSeg := writeFile(t, []byte("not a segment\n"))
	line := requireOneLineError(t, shmctl(t, false, "reclaim", notSeg), exitError)
	assert.Contains(t, line, notSeg)
}

// The upgrade mutexes of rwlocksSegment: the dead writer and reader of
// mutex 1 and the stale upgrade holder of mutex 3 are freed; mutex 0's
// live holders are left alone.
func TestReclaimRWLocks(t *testing.T) {
	t.Parallel()
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}
	record := 0
	want := []reclaimRWLockJSON{
		{Index: 1, Role: "writer", Process: process(dead, "dead"), TID: ptr("9")},
		{Index: 1, Role: "reader", Record: &record, Process: process(dead, "dead"), Count: 1},
		{Index: 3, Role: "upgrader", Process: process(self, "stale"), TID: ptr("5"), Unique: true},
	}
	for _, dryRun := range []bool{true, false} {
		seg, _ := rwlocksSegment(t)
		before := make([]upgrade.Status, 4)
		for i := range before {
			var err error
			before[i], err = upgrade.Inspect(seg, i)
			require.NoError(t, err)
		}
		args := []string{"reclaim", "--json", seg.Path()}
		action := "reclaimed"
		if dryRun {
			args, action = append(args, "--dry-run"), "would reclaim"
		}
		r := shmctl(t, false, args...)
		require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
		var doc reclaimJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
		assert.Empty(t, doc.Slots)
		for _, l := range doc.RWLocks {
			checkStarted(t, l.Process)
		}
		for i := range want {
			want[i].Action = action
		}
		assert.Equal(t, want, doc.RWLocks)

		var raw map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
		row := raw["rwlocks"].([]any)[0].(map[string]any)
		assert.ElementsMatch(t, []string{"index", "name", "role", "record", "process",
			"tid", "count", "unique", "action"}, keys(row))
		assert.Nil(t, row["record"], "a writer's record")

		after0, err := upgrade.Inspect(seg, 0)
		require.NoError(t, err)
		assert.Equal(t, before[0], after0, "the live holders' mutex changed")
		if dryRun {
			for i := range before {
				st, err := upgrade.Inspect(seg, i)
				require.NoError(t, err)
				assert.Equal(t, before[i], st, "mutex %d changed by a dry run", i)
			}
			continue
		}
		for _, i := range []int{1, 3} {
			st, err := upgrade.Inspect(seg, i)
			require.NoError(t, err)
			assert.False(t, st.WriteLocked || st.UpgradeLocked || st.UpgradePending, "mutex %d", i)
			assert.Zero(t, st.Writer, "mutex %d", i)
			assert.Zero(t, st.Upgrader, "mutex %d", i)
			assert.Empty(t, st.Readers, "mutex %d", i)
		}
		// Usable again, with nothing left to do.
		m, err := upgrade.Open(seg, 1)
		require.NoError(t, err)
		require.NoError(t, m.TryLock())
		require.NoError(t, m.Unlock())
		require.NoError(t, m.Close())
		r = shmctl(t, true, "reclaim", seg.Path())
		assert.Equal(t, result{code: exitOK, stderr: "no owner slot, upgrade mutex, transaction or lock of " + seg.Path() + " has a dead owner\n"}, r)
	}
}

// Both tables, as text: slots first, an empty line, then the upgrade
// mutexes.
func TestReclaimRWLocksText(t *testing.T) {
	t.Parallel()
	seg, _ := rwlocksSegment(t)
	s, err := seg.Slot(0)
	require.NoError(t, err)
	pid := proc.Self().PID
	s.PID.Store(proc.Identity{PID: pid, StartTicks: proc.Self().StartTicks + 1}.Pack())
	s.Token.Store(3)
	r := shmctl(t, false, "--no-header", "reclaim", "--dry-run", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, fmt.Sprintf(""+
		"0\t\t%[1]d\tdead\t3\t-\twould reclaim\n"+
		"\n"+
		"1\t\twriter\t-\t%[1]d\tdead\t9\t0\tno\twould reclaim\n"+
		"1\t\treader\t0\t%[1]d\tdead\t-\t1\tno\twould reclaim\n"+
		"3\t\tupgrader\t-\t%[1]d\tstale\t5\t0\tyes\twould reclaim\n", pid), r.stdout)

	r = shmctl(t, true, "reclaim", "--dry-run", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "\n\nINDEX  NAME  ROLE      RECORD  PID")
}

// reclaim ends lock-manager holds whose TTL passed (and those of dead
// processes, as lockmgr's own test shows), lists them, and leaves the
// resource free and marked inconsistent.
func TestReclaimLocks(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	_, err = m.Acquire(t.Context(), "job", "lapsed", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Millisecond})
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond) // the lease lapses

	for _, dry := range []bool{true, false} {
		args := []string{"reclaim", "--json", seg.Path()}
		action := "ended"
		if dry {
			args, action = append(args, "--dry-run"), "would end"
		}
		r := shmctl(t, false, args...)
		require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
		var doc reclaimJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
		require.Len(t, doc.Locks, 1)
		checkStarted(t, doc.Locks[0].Process)
		assert.Equal(t, []reclaimLockJSON{{Resource: "job", Owner: "lapsed", Process: process(proc.Self(), "alive"), Why: "expired", Action: action}}, doc.Locks)
	}
	ri, err := m.Inspect("job")
	require.NoError(t, err)
	assert.Empty(t, ri.Holders)
	assert.True(t, ri.Inconsistent)
}

// A held token-mode slot is reported, never freed: its holder is a token,
// whose life reclaim cannot know.
func TestReclaimReportsTokenSlots(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	l, g := heldTokenSlot(t, seg)
	r := shmctl(t, false, "reclaim", "--json", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	var doc reclaimJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.Len(t, doc.TokenSlots, 1)
	assert.Equal(t, ptr("tokened"), doc.TokenSlots[0].Name)
	assert.Equal(t, fmt.Sprint(g.Identity().Token), doc.TokenSlots[0].Token)
	r = shmctl(t, false, "reclaim", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stderr, "owner slot 0 (tokened) is held in token mode")
	owner, held := l.Owner()
	assert.True(t, held, "not freed")
	assert.Equal(t, g.Identity(), owner)
}

// The stderr line of a held token-mode slot shows the name a damaged
// directory holds with its control characters escaped, as every other
// line does: an escape sequence in it reached the terminal raw.
func TestReclaimTokenSlotLineEscapesTheName(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	heldTokenSlot(t, seg)
	d := dirEntry(t, seg, layout.KindSlotDirectory, 0)
	copy(d.Name[:], "tok\x1b[2J")
	d.NameLen.Store(uint32(len("tok\x1b[2J")))

	r := shmctl(t, false, "reclaim", "--force", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stderr, `owner slot 0 (tok\x1b[2J) is held in token mode`)
	assert.NotContains(t, r.stderr, "\x1b", "a raw escape sequence")
}

// heldTokenSlot names owner slot "tokened" of seg in token mode and holds
// it with a new token until the test ends: a holder reclaim cannot judge.
func heldTokenSlot(t *testing.T, seg *shm.Segment) (*spinlock.Lock, *spinlock.Guard) {
	t.Helper()
	l, err := spinlock.Named(seg, "tokened", spinlock.Token)
	require.NoError(t, err)
	g, err := l.Lock(spinlock.NewToken())
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Release() })
	return l, g
}

// reclaim drops the references of dead processes to named locks: a name
// whose last reference goes, on a free lock, is freed.
func TestReclaimClaims(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	_, err := seg.Claim(layout.KindOwnerSlots, "orphan")
	require.NoError(t, err)
	refs, err := seg.Region(layout.KindClaimRefs)
	require.NoError(t, err)
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack()
	rec, err := memview.At[layout.ClaimRef](refs, 0)
	require.NoError(t, err)
	require.Equal(t, self.Pack(), rec.Owner.Load(), "the claim's reference is recorded for this process")
	rec.Owner.Store(dead) // as if a process whose pid this one reuses had claimed it

	r := shmctl(t, false, "reclaim", "--json", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	var doc reclaimJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.Len(t, doc.Claims, 1)
	checkStarted(t, doc.Claims[0].Process)
	assert.Equal(t, []reclaimClaimJSON{{Table: "owner_slots", Index: 0, Name: ptr("orphan"),
		Process: process(proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}, "dead"), Count: 1, Action: "dropped"}}, doc.Claims)
	_, err = seg.Lookup(layout.KindOwnerSlots, "orphan")
	assert.ErrorIs(t, err, shm.ErrNotFound, "its last reference went, and its lock is free")
}

// A live process that holds the claim directory's lock (stopped mid-claim)
// does not make reclaim hang without a word: it waits --wait for it, then
// fails naming the holder. It hung for ever.
func TestReclaimDirectoryLockHeld(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 2})
	setDirectoryLock(t, seg, proc.Self().Pack()) // alive: the test
	r := shmctl(t, false, "reclaim", "--wait", "50ms", seg.Path())
	line := requireOneLineError(t, r, exitError)
	assert.Contains(t, line, fmt.Sprintf("held by live process %d", proc.Self().PID))
}

// The slot of a dead pid/tid holder whose claim says no mode: its take-over
// records pid/tid with the claim (spinlock.Open), under the directory's
// lock, so a live process holding that lock makes reclaim wait --wait and
// fail naming it, the slot as it was; once the lock is free, the slot is
// reclaimed and its claim says pid/tid. Before, the slot's Open waited
// for the lock without a bound: reclaim hung until go test's -timeout.
func TestReclaimUnsaidSlotDirectoryLockHeld(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 2})
	i, s, dead := unsaidSlotOfDeadHolder(t, seg)
	self := proc.Self()
	setDirectoryLock(t, seg, self.Pack())

	line := requireOneLineError(t, shmctl(t, false, "reclaim", "--wait", "50ms", seg.Path()), exitError)
	assert.Contains(t, line, fmt.Sprintf("reclaiming slot %d", i))
	assert.Contains(t, line, fmt.Sprintf("held by live process %d", self.PID))
	assert.Contains(t, line, "deadline exceeded")
	assert.Equal(t, dead, s.PID.Load(), "the failed reclaim changed the slot")
	use, err := seg.ClaimUse(layout.KindOwnerSlots, i)
	require.NoError(t, err)
	assert.Zero(t, use, "the failed reclaim recorded a mode")

	setDirectoryLock(t, seg, 0)
	r := shmctl(t, false, "reclaim", "--wait", "50ms", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Zero(t, s.PID.Load(), "the slot is free")
	use, err = seg.ClaimUse(layout.KindOwnerSlots, i)
	require.NoError(t, err)
	assert.Equal(t, spinlock.PIDTID.ClaimUse(), use)
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
}

// setDirectoryLock writes word, a packed identity or 0, into the claim
// directory's lock word of seg: held by that process, or free.
func setDirectoryLock(t *testing.T, seg *shm.Segment, word uint64) {
	t.Helper()
	f, err := os.OpenFile(seg.Path(), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(binary.LittleEndian.AppendUint64(nil, word), layout.OffRegistry)
	require.NoError(t, err)
}

// unsaidSlotOfDeadHolder claims slot "unsaid" without a mode and puts a
// dead pid/tid holder's identity (this pid, another start time) in it:
// the slot, its index and that packed identity.
func unsaidSlotOfDeadHolder(t *testing.T, seg *shm.Segment) (int, *layout.OwnerSlot, uint64) {
	t.Helper()
	i, err := seg.Claim(layout.KindOwnerSlots, "unsaid")
	require.NoError(t, err)
	s, err := seg.Slot(i)
	require.NoError(t, err)
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack()
	s.PID.Store(dead)
	return i, s, dead
}
