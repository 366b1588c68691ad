package shm_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// A directory entry in a state no claim leaves (damage), under a name: a
// claim of that name takes a fresh entry, which Lookup then finds and
// Release gives back, and CheckDirectories reports the damaged one (and
// the reference that names it). When nothing else is free, the damaged
// entry is recycled like a claim nobody references.
// (FuzzDirectory found a claim of such an entry, which Claims did not list
// and Release refused.)
func TestClaimPassesDamagedState(t *testing.T) {
	t.Parallel()
	seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 3}})
	damaged, err := seg.Claim(layout.KindOwnerSlots, "queue")
	require.Zero(t, damaged)
	require.NoError(t, err)
	dirs, err := seg.Region(layout.KindSlotDirectory)
	require.NoError(t, err)
	dir, err := memview.At[layout.DirEntry](dirs, uint64(damaged)*layout.DirEntrySize)
	require.NoError(t, err)
	dir.State.Store(7)

	i, err := seg.Claim(layout.KindOwnerSlots, "queue")
	require.NoError(t, err)
	require.NotEqual(t, damaged, i, "the damaged entry is not the name's claim")
	j, err := seg.Lookup(layout.KindOwnerSlots, "queue")
	require.NoError(t, err)
	require.Equal(t, i, j)
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
	found, err := seg.CheckDirectories()
	require.NoError(t, err)
	require.Equal(t, []string{
		"slot_directory[0]: state 7, neither free (0) nor claimed (1)",
		"claim_refs[0]: names owner_slots[0], which is not claimed", // the first claim's reference
	}, found)

	// With nothing else free, the damaged entry (no reference, its lock
	// free) is recycled, as an unreferenced claim is, even for its name.
	dir.Refs.Store(0)
	for range 2 {
		_, err := seg.Claim(layout.KindOwnerSlots, "")
		require.NoError(t, err)
	}
	i, err = seg.Claim(layout.KindOwnerSlots, "queue")
	require.NoError(t, err)
	require.Equal(t, damaged, i)
	j, err = seg.Lookup(layout.KindOwnerSlots, "queue")
	require.NoError(t, err)
	require.Equal(t, i, j)
}

// A dead process's reference record that counts more references than its
// entry has (damage): dropping it takes off only the references no live
// process's record accounts for, so the live claim stays, and the next
// claim cannot take its entry. (FuzzDirectory, replayed against C, found
// the live claim freed and its entry claimed again under another name: two
// locks on one slot.)
func TestDropDeadRefsSparesLiveClaims(t *testing.T) {
	t.Parallel()
	seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 2, ClaimRefs: 4}})
	i, err := seg.Claim(layout.KindOwnerSlots, "jobs")
	require.NoError(t, err)
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack() // its pid reused by us
	r := claimRef(t, seg, 3)
	require.Zero(t, r.Owner.Load(), "record 3 is free")
	r.Target.Store(layout.ClaimTarget(layout.KindOwnerSlots, i))
	r.Count.Store(5)
	r.Owner.Store(dead)

	dropped, err := seg.DropDeadClaims(false)
	require.NoError(t, err)
	require.Len(t, dropped, 1)
	require.Equal(t, uint32(5), dropped[0].Count)
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Equal(t, []shm.Claim{{Index: i, Name: "jobs", Refs: 1, Claimer: self.Pack()}}, claims)
	other, err := seg.Claim(layout.KindOwnerSlots, "")
	require.NoError(t, err)
	require.NotEqual(t, i, other)
	require.NoError(t, seg.Release(layout.KindOwnerSlots, other))
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
}

// claimRef views record j of seg's claim references.
func claimRef(t *testing.T, seg *shm.Segment, j int) *layout.ClaimRef {
	t.Helper()
	b, err := seg.Region(layout.KindClaimRefs)
	require.NoError(t, err)
	r, err := memview.At[layout.ClaimRef](b, uint64(j)*layout.ClaimRefSize)
	require.NoError(t, err)
	return r
}

// A record that names a free entry (its releaser was killed between
// freeing the entry and forgetting the entry's records, or damage), whose
// process is dead: a fresh claim of that entry must not lose its count to
// the record when its own reference needs room. (FuzzDirectory found the
// fresh claim freed under its claimant and given to the next name.)
func TestFreshClaimSurvivesStaleRecord(t *testing.T) {
	t.Parallel()
	seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 3, ClaimRefs: 2}})
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack()
	r := claimRef(t, seg, 0)
	r.Target.Store(layout.ClaimTarget(layout.KindOwnerSlots, 1)) // entry 1, free
	r.Count.Store(1)
	r.Owner.Store(dead)
	other, err := seg.Claim(layout.KindOwnerSlots, "other") // entry 0, record 1: no record is free now
	require.NoError(t, err)
	require.Zero(t, other)

	i, err := seg.Claim(layout.KindOwnerSlots, "x")
	require.NoError(t, err)
	require.Equal(t, 1, i, "the first free entry, which the dead record names")
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Equal(t, []shm.Claim{
		{Index: other, Name: "other", Refs: 1, Claimer: self.Pack()},
		{Index: i, Name: "x", Refs: 1, Claimer: self.Pack()},
	}, claims)
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
	require.NoError(t, seg.Release(layout.KindOwnerSlots, other))
}

// A process killed while it frees an entry (here DropDeadClaims freeing a
// dead process's claim), after marking the entry free and before forgetting
// the records that name it, leaves the dead claimant's record naming a free
// entry: no damage, only a kill. The next claim of that entry forgets the
// record, so its count is its claimant's alone, and dropping the dead
// processes' records later takes nothing off it.
func TestKilledFreeLeavesRecordFreshClaimForgets(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 2, ClaimRefs: 2}})
	out, err := testproc.Command("claim-names", path, "0", "gone").Output()
	require.NoError(t, err)
	require.Equal(t, "gone 0\n", string(out))
	err = testproc.Command("die-freeing", path).Run()
	requireKilled(t, err)

	target := layout.ClaimTarget(layout.KindOwnerSlots, 0)
	stale := claimRef(t, seg, 0)
	require.Equal(t, target, stale.Target.Load(), "the dead claimant's record, left naming the freed entry")
	require.NotZero(t, stale.Owner.Load())
	requireNoClaims(t, seg)

	i, err := seg.Claim(layout.KindOwnerSlots, "x") // takes the killed process's registry lock over
	require.NoError(t, err)
	require.Equal(t, 0, i, "the freed entry, the first free one")
	self := proc.Self().Pack()
	records := 0
	for j := range 2 {
		r := claimRef(t, seg, j)
		if r.Owner.Load() != 0 {
			require.Equal(t, self, r.Owner.Load(), "record %d: only the claimant's is left", j)
			records++
			require.Equal(t, target, r.Target.Load())
			require.EqualValues(t, 1, r.Count.Load())
		}
	}
	require.Equal(t, 1, records)

	_, err = seg.DropDeadClaims(false)
	require.NoError(t, err)
	y, err := seg.Claim(layout.KindOwnerSlots, "y")
	require.NoError(t, err)
	require.Equal(t, 1, y)
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Equal(t, []shm.Claim{
		{Index: i, Name: "x", Refs: 1, Claimer: self},
		{Index: y, Name: "y", Refs: 1, Claimer: self},
	}, claims)
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
	require.NoError(t, seg.Release(layout.KindOwnerSlots, y))
	requireNoClaims(t, seg)
}

// A process killed in a release between taking the entry's last reference
// off and freeing the entry leaves a claim that nobody references, of a
// free lock, under the registry lock it held. Whoever takes that lock over
// frees the claim, as the release would have. (TestSegmentChurn's C
// victims, killed at random, left one about once in 300 runs.)
func TestKilledReleaseLeavesNoClaim(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 2}})
	err := testproc.Command("die-between-steps", path, "gone", "last-ref").Run()
	requireKilled(t, err)
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Len(t, claims, 1, "the claim, its last reference taken off")
	require.Zero(t, claims[0].Refs)

	_, err = seg.DropDeadClaims(false) // takes the killed process's registry lock over
	require.NoError(t, err)
	requireNoClaims(t, seg)
}

// A claim of a name that another live process holds, when this process
// has no reference record yet and one must be made room for by dropping a
// dead process's record that names the same entry with a damaged count:
// the claimant's own reference, counted in Refs but not yet recorded, is
// live too, and is not taken off.
func TestPendingReferenceIsLive(t *testing.T) {
	t.Parallel()
	seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 2, ClaimRefs: 2}})
	parent, err := proc.Lookup(uint32(os.Getppid()))
	require.NoError(t, err)
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack()
	// Entry 0 claimed as "jobs" by the parent (a live process), record 0
	// its reference; record 1 a dead process's, counting 5 (damage).
	dirs, err := seg.Region(layout.KindSlotDirectory)
	require.NoError(t, err)
	d, err := memview.At[layout.DirEntry](dirs, 0)
	require.NoError(t, err)
	copy(d.Name[:], "jobs")
	d.NameLen.Store(4)
	d.Claimer.Store(parent.Pack())
	d.Refs.Store(1)
	d.State.Store(layout.DirClaimed)
	target := layout.ClaimTarget(layout.KindOwnerSlots, 0)
	for j, rec := range []struct {
		owner uint64
		count uint32
	}{{parent.Pack(), 1}, {dead, 5}} {
		r := claimRef(t, seg, j)
		r.Target.Store(target)
		r.Count.Store(rec.count)
		r.Owner.Store(rec.owner)
	}

	i, err := seg.Claim(layout.KindOwnerSlots, "jobs")
	require.NoError(t, err)
	require.Zero(t, i)
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Equal(t, []shm.Claim{{Index: 0, Name: "jobs", Refs: 2, Claimer: parent.Pack()}}, claims, "the parent's and this process's")
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
}

// A release of a claim this process holds no reference to (misuse: the
// claim is another process's) is refused with ErrNotClaimed and changes
// nothing: taking a reference off Refs would take the other's, and free
// its claim under it.
func TestReleaseWithoutReference(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 2}})
	i, err := seg.Claim(layout.KindOwnerSlots, "mine")
	require.NoError(t, err)
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer other.Close()
	// The same process through another handle holds the reference: that
	// one may give it back.
	require.NoError(t, other.Release(layout.KindOwnerSlots, i))
	i, err = seg.Claim(layout.KindOwnerSlots, "mine")
	require.NoError(t, err)

	// Another process's claim: make this process's record name another
	// process (the parent, alive).
	parent, err := proc.Lookup(uint32(os.Getppid()))
	require.NoError(t, err)
	r := claimRef(t, seg, 0)
	require.Equal(t, proc.Self().Pack(), r.Owner.Load())
	r.Owner.Store(parent.Pack())
	err = seg.Release(layout.KindOwnerSlots, i)
	require.ErrorIs(t, err, shm.ErrNotClaimed)
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Len(t, claims, 1)
	require.EqualValues(t, 1, claims[0].Refs, "unchanged")
	r.Owner.Store(proc.Self().Pack())
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
}

// The claim directory's lock held by a live process (one stopped, or in a
// debugger, mid-claim) is waited for as long as it is held: shmctl reclaim
// hung on it without a word. DropDeadClaimsContext gives up when its
// context is done, with the context's error and the holder's pid, and
// changes nothing; a dry run needs no lock.
func TestDropDeadClaimsContextGivesUp(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 2, ClaimRefs: 4}})
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	self := proc.Self()
	word := make([]byte, 8)
	binary.LittleEndian.PutUint64(word, self.Pack()) // alive: this process
	_, err = f.WriteAt(word, layout.OffRegistry)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = seg.DropDeadClaimsContext(ctx, false)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, fmt.Sprintf("held by live process %d", self.PID))
	_, err = seg.DropDeadClaimsContext(ctx, true)
	require.NoError(t, err, "a dry run takes no lock")

	clear(word)
	_, err = f.WriteAt(word, layout.OffRegistry)
	require.NoError(t, err)
	_, err = seg.DropDeadClaimsContext(context.Background(), false)
	require.NoError(t, err, "the lock is free")
}

// A claimed entry whose reference count is at its greatest (damage: no
// segment holds 2^32 - 1 claims): another claim of its name must fail, not
// wrap the count to 0, which would make a claim that a live handle uses
// look unreferenced, and the next claim that finds no free entry would
// recycle it for another name under that handle. (Before, the claim
// succeeded with Refs 0, and "other" got the same slot as "jobs".)
func TestClaimRefusesWrappedRefs(t *testing.T) {
	t.Parallel()
	seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 1}})
	i, err := seg.Claim(layout.KindOwnerSlots, "jobs")
	require.NoError(t, err)
	dirs, err := seg.Region(layout.KindSlotDirectory)
	require.NoError(t, err)
	d, err := memview.At[layout.DirEntry](dirs, uint64(i*layout.DirEntrySize))
	require.NoError(t, err)
	d.Refs.Store(^uint32(0))

	_, err = seg.Claim(layout.KindOwnerSlots, "jobs")
	require.ErrorIs(t, err, layout.ErrMalformed)
	require.Equal(t, ^uint32(0), d.Refs.Load(), "a refused claim changes nothing")
	_, err = seg.Claim(layout.KindOwnerSlots, "other")
	require.ErrorIs(t, err, shm.ErrTableFull)
	d.Refs.Store(1)
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
	requireNoClaims(t, seg)
}

// A process that drops its reference record and exits between a dry run's
// load of the record's owner, which named it, and the dry run's check that
// it lives: the check says dead, and a dry run that trusted its load
// reported a dead process's references (shmctl reclaim --dry-run) that no
// DropDeadClaims would find. The record is the exited process's as its
// claim would have left it, and the hook drops it as its release does, so
// the interleaving is exact. (Not parallel: the hook is the package's.)
func TestDropDeadClaimsDryRunAfterRelease(t *testing.T) {
	seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 2, ClaimRefs: 4}})
	i, err := seg.Claim(layout.KindOwnerSlots, "jobs")
	require.NoError(t, err)
	self := proc.Self()
	exited := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack() // its pid reused by us
	const j = 3
	r := claimRef(t, seg, j)
	require.Zero(t, r.Owner.Load(), "record 3 is free")
	r.Target.Store(layout.ClaimTarget(layout.KindOwnerSlots, i))
	r.Count.Store(1)
	r.Owner.Store(exited)
	calls := 0
	defer shm.SetTestHookDeadRef(func() {
		if calls++; calls == j+1 { // record j's owner is loaded: the process drops it (dropRef)
			r.Count.Store(0)
			r.Owner.Store(0)
			r.Target.Store(0)
		}
	})()
	dropped, err := seg.DropDeadClaims(true)
	require.NoError(t, err)
	require.Greater(t, calls, j, "the dry run looked at record 3")
	require.Empty(t, dropped, "a dead process's references reported after it dropped them")
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
}

// A claim that finds the table full drops the dead's references (a
// change of the directory) and may still find no room: the registry
// generation moves all the same, or Claims, which reads the directory
// without the lock until two passes agree on it, could return a pass
// taken before the drop as if nothing had changed.
func TestFailedClaimThatDroppedRefsMovesTheGeneration(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 1, ClaimRefs: 4}})
	i, err := seg.Claim(layout.KindOwnerSlots, "jobs")
	require.NoError(t, err)
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack() // its pid reused by us
	r := claimRef(t, seg, 3)
	r.Target.Store(layout.ClaimTarget(layout.KindOwnerSlots, i))
	r.Count.Store(1)
	r.Owner.Store(dead)
	dir, err := seg.Region(layout.KindSlotDirectory)
	require.NoError(t, err)
	e, err := memview.At[layout.DirEntry](dir, uint64(i)*layout.DirEntrySize)
	require.NoError(t, err)
	e.Refs.Add(1) // the dead process's reference, as its claim left it

	before := registryGen(t, path)
	_, err = seg.Claim(layout.KindOwnerSlots, "other")
	require.ErrorIs(t, err, shm.ErrTableFull, "jobs is ours: no room")
	require.Equal(t, uint32(1), e.Refs.Load(), "the dead's reference was dropped")
	require.NotEqual(t, before, registryGen(t, path), "a change of the directory moves the generation")
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
}

// registryGen reads the header's registry generation from the file.
func registryGen(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return binary.LittleEndian.Uint64(b[layout.OffRegistryGen:])
}
