package shm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/shmlock/shmlock/internal/futex"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// Claim is one claimed entry of a table, as Claims reports it.
type Claim struct {
	Index   int
	Name    string // "" for an unnamed claim
	Refs    uint32 // claims not yet released
	Claimer uint64 // packed identity of the first claimant (internal/proc)
	Use     uint32 // what the claimants said they use it as (ClaimAs); 0 if unsaid
}

// directoryOf maps a claimable table to its directory.
func directoryOf(k layout.Kind) (layout.Kind, error) {
	switch k {
	case layout.KindOwnerSlots:
		return layout.KindSlotDirectory, nil
	case layout.KindUpgrades:
		return layout.KindUpgradeDirectory, nil
	}
	return 0, fmt.Errorf("%w: %v", ErrNotClaimable, k)
}

// Claim claims an entry of table k (layout.KindOwnerSlots or
// layout.KindUpgrades) and returns its index. With a name, an entry already
// claimed under that name is returned with one more reference, so unrelated
// processes that claim one name share one entry; otherwise, and always for
// name "", a free entry is zeroed and claimed. ErrTableFull when none is
// free; a bad name is a layout.ErrBadName error. Nothing changes on error.
func (s *Segment) Claim(k layout.Kind, name string) (int, error) {
	return s.ClaimAs(k, name, 0)
}

// ClaimAs is Claim for claimants that say what they use the entry as: a
// small number of the caller's choosing, such as a lock's mode, recorded in
// the directory for tools (shmctl slots) and checked against later
// claimants. Claiming a named entry recorded with another non-zero use
// fails with ErrUseMismatch and changes nothing; use 0 matches anything,
// and an entry first claimed with use 0 takes the first use given (by a
// claim, or by AdoptUse).
func (s *Segment) ClaimAs(k layout.Kind, name string, use uint32) (int, error) {
	dk, err := directoryOf(k)
	if err != nil {
		return -1, err
	}
	if name != "" {
		if err := layout.CheckName(name); err != nil {
			return -1, err
		}
	}
	if err := s.writable(); err != nil {
		return -1, err
	}
	if err := s.lockRegistry(); err != nil {
		return -1, err
	}
	defer s.unlockRegistry()
	i, fresh, err := s.claimEntry(k, dk, name, use, false)
	if errors.Is(err, ErrTableFull) {
		// The dead's claims may have gone; and only once they are dropped
		// and there is still no room, a claim kept for its news is taken.
		// The drop is a change whether the claim then succeeds or not:
		// Claims, which reads without the lock, must see it.
		if s.dropDeadRefs(0) > 0 {
			s.regGen.Add(1)
		}
		i, fresh, err = s.claimEntry(k, dk, name, use, true)
	}
	if err != nil {
		return -1, err
	}
	testHookBetweenSteps()
	if err := s.addRef(k, i); err != nil {
		s.undoClaim(k, dk, i, fresh)
		s.regGen.Add(1) // addRef may have dropped the dead's records
		return -1, err
	}
	s.regGen.Add(1)
	return i, nil
}

// claimEntry is ClaimAs's change of the directory, under the registry
// lock: the entry claimed under name with one more reference, or a fresh
// entry (a free one, or a recycled claim nobody references whose lock is
// free, or with takeMarked, if there is no other, one whose lock is free
// but marked inconsistent: see lockMarked) with one reference.
func (s *Segment) claimEntry(k, dk layout.Kind, name string, use uint32, takeMarked bool) (i int, fresh bool, err error) {
	free, parked, marked := -1, -1, -1
	for i := range s.Len(k) {
		e, err := entry[layout.DirEntry](s, dk, i)
		if err != nil {
			return -1, false, err
		}
		state := e.State.Load()
		// Only a claim is a name's: an entry in a state no claim leaves
		// (damage, which CheckDirectories reports) is one that Claims,
		// Lookup and Release do not know.
		names := state == layout.DirClaimed && name != "" && layout.NameOf(e) == name
		switch {
		case state == layout.DirFree:
			if free < 0 {
				free = i
			}
		case !names && e.Refs.Load() == 0 && parked < 0 && s.lockFree(k, i, e.Use.Load()):
			parked = i // recyclable, if nothing is free (a damaged entry too, whatever its name)
		case !names && e.Refs.Load() == 0 && takeMarked && marked < 0 && s.lockMarked(k, i, e.Use.Load()):
			marked = i // the last resort
		case names:
			if e.Refs.Load() == math.MaxUint32 {
				// Damage (no segment holds that many claims): one more would
				// wrap to 0, and a claim that live handles use would read as
				// one nobody references, to be recycled for another name.
				return -1, false, fmt.Errorf("shm: %v %q counts %d references, the most there can be: %w", k, name, uint32(math.MaxUint32), layout.ErrMalformed)
			}
			switch had := e.Use.Load(); {
			case use == 0 || had == use:
			case had == 0:
				e.Use.Store(use)
			default:
				return -1, false, fmt.Errorf("%w: %v %q is claimed for use %d, not %d", ErrUseMismatch, k, name, had, use)
			}
			e.Refs.Add(1)
			return i, false, nil
		}
	}
	if parked < 0 {
		// The news that a holder died with the lock is given up for room
		// only: with any other entry to take, the claim keeps it for the
		// next claimant of its name.
		parked = marked
	}
	if free < 0 && parked >= 0 {
		// The claim of a lock nobody references and nobody (live)
		// holds: its name goes, and the entry is claimed anew below.
		if err := s.freeEntry(k, dk, parked); err != nil {
			return -1, false, err
		}
		free = parked
	}
	if free < 0 {
		return -1, false, fmt.Errorf("%w: %v has %d entries, all claimed", ErrTableFull, k, s.Len(k))
	}
	// ErrClosed if Close has begun (it waits for this change to end):
	// nothing is changed yet.
	e, err := entry[layout.DirEntry](s, dk, free)
	if err != nil {
		return -1, false, err
	}
	// The entry becomes visible only with the State store at the end, so a
	// claimant that dies before it leaves the entry free.
	if err := s.zeroEntry(k, free); err != nil {
		return -1, false, err
	}
	if err := s.zeroEntry(dk, free); err != nil {
		return -1, false, err
	}
	// A free entry has no reference record, unless a releaser was killed
	// between freeing it and forgetting its records (or the segment is
	// damaged): a dead one's would be dropped from the new claim's count.
	s.forgetRefs(k, free)
	// The counters start again with the new claim: they are its name's.
	if st := s.header.StatsIndex(k, free); st >= 0 {
		if err := s.zeroEntry(layout.KindLockStats, st); err != nil {
			return -1, false, err
		}
	}
	copy(e.Name[:], name)
	e.NameLen.Store(uint32(len(name)))
	e.Use.Store(use)
	e.Claimer.Store(proc.Self().Pack())
	e.Refs.Store(1)
	testHookBeforePublish()
	e.State.Store(layout.DirClaimed)
	return free, true, nil
}

// undoClaim takes back what claimEntry did, for a claim whose reference
// could not be recorded.
func (s *Segment) undoClaim(k, dk layout.Kind, i int, fresh bool) {
	e, err := entryOf[layout.DirEntry](s, dk, i)
	if err != nil {
		return
	}
	if fresh {
		_ = s.freeEntry(k, dk, i)
		return
	}
	e.Refs.Add(^uint32(0))
}

// Per-process references (layout.ClaimRef): each process's references to
// each claimed entry are counted in a record of its own, beside the
// directory's total, so that a dead process's are dropped (by the next
// claim that finds no room, and by DropDeadClaims) and a live one's never
// are. A segment made with no records counts the totals alone.

// addRef counts one more reference of this process to entry i of table k.
// ErrTableFull if every record is in use by a live process.
func (s *Segment) addRef(k layout.Kind, i int) error {
	n := s.Len(layout.KindClaimRefs)
	if n == 0 {
		return nil
	}
	target, self := layout.ClaimTarget(k, i), proc.Self().Pack()
	var free *layout.ClaimRef
	for j := range n {
		r, err := entryOf[layout.ClaimRef](s, layout.KindClaimRefs, j)
		if err != nil {
			return err
		}
		switch o := r.Owner.Load(); {
		case o == self && r.Target.Load() == target:
			if r.Count.Load() == math.MaxUint32 {
				return fmt.Errorf("shm: %v[%d] counts %d references, the most there can be: %w", layout.KindClaimRefs, j, uint32(math.MaxUint32), layout.ErrMalformed)
			}
			r.Count.Add(1)
			return nil
		case o == 0 && free == nil:
			free = r
		}
	}
	if free == nil && s.dropDeadRefs(target) > 0 {
		return s.addRef(k, i) // a dead process's record is free now
	}
	if free == nil {
		return fmt.Errorf("%w: %v has %d entries, all in use by live processes", ErrTableFull, layout.KindClaimRefs, n)
	}
	free.Target.Store(target)
	free.Count.Store(1)
	free.Owner.Store(self)
	return nil
}

// forgetRefs frees every record that still names entry i of table k,
// whose claim goes: its next claim starts with no reference of anyone.
func (s *Segment) forgetRefs(k layout.Kind, i int) {
	target := layout.ClaimTarget(k, i)
	for j := range s.Len(layout.KindClaimRefs) {
		r, err := entryOf[layout.ClaimRef](s, layout.KindClaimRefs, j)
		if err != nil {
			return
		}
		if r.Owner.Load() != 0 && r.Target.Load() == target {
			r.Owner.Store(0)
			r.Target.Store(0)
			r.Count.Store(0)
		}
	}
}

// dropRef takes this process's reference to entry i of table k off its
// record, if it has one; false if it has none (the reference was counted
// in the total alone).
func (s *Segment) dropRef(k layout.Kind, i int) bool {
	target, self := layout.ClaimTarget(k, i), proc.Self().Pack()
	for j := range s.Len(layout.KindClaimRefs) {
		r, err := entryOf[layout.ClaimRef](s, layout.KindClaimRefs, j)
		if err != nil {
			return false
		}
		if r.Owner.Load() == self && r.Target.Load() == target {
			if r.Count.Add(^uint32(0)) == 0 {
				r.Owner.Store(0)
				r.Target.Store(0)
			}
			return true
		}
	}
	return false
}

// DroppedClaim is the references of a dead process that DropDeadClaims
// dropped (or, in a dry run, would drop).
type DroppedClaim struct {
	Kind  layout.Kind
	Index int
	Name  string // the entry's name, "" if unnamed
	Owner uint64 // packed identity of the dead process
	Count uint32
}

// DropDeadClaims drops the references that dead processes (exited, their
// pid reused, or recorded before a reboot) hold to claimed entries, as the
// next claim that finds no room would: each claim whose last reference
// goes is freed if its lock is free, or held by dead processes only (see
// heldByDead and upgradeHeldByDead). With dryRun it only reports, and the
// segment may be read-only. For repair tools (shmctl reclaim).
func (s *Segment) DropDeadClaims(dryRun bool) ([]DroppedClaim, error) {
	return s.DropDeadClaimsContext(context.Background(), dryRun)
}

// DropDeadClaimsContext is DropDeadClaims giving up when ctx is done while
// it waits for the claim directory's lock (a live process holds it: one
// stopped, or in a debugger, mid-claim holds it for as long), with ctx's
// error and the holder's pid. For a tool (shmctl reclaim), which should not
// wait for ever without a word.
func (s *Segment) DropDeadClaimsContext(ctx context.Context, dryRun bool) ([]DroppedClaim, error) {
	if dryRun {
		if s.closed.Load() {
			return nil, ErrClosed
		}
		return s.deadRefs(), nil
	}
	if err := s.writable(); err != nil {
		return nil, err
	}
	if err := s.lockRegistryContext(ctx, false); err != nil {
		return nil, err
	}
	defer s.unlockRegistry()
	dropped := s.deadRefs()
	if s.dropDeadRefs(0) > 0 {
		s.regGen.Add(1)
	}
	return dropped, nil
}

// deadRefs lists the records of dead processes.
func (s *Segment) deadRefs() []DroppedClaim {
	var out []DroppedClaim
	for j := range s.Len(layout.KindClaimRefs) {
		r, err := entryOf[layout.ClaimRef](s, layout.KindClaimRefs, j)
		if err != nil {
			return out
		}
		o := r.Owner.Load()
		testHookDeadRef()
		// The verdict is on o, not on the record, read outside the
		// registry lock: its process may have dropped the record and
		// exited after the load. A dead one's record is final (but for
		// a repair under the lock, which drops it), so it is loaded
		// again after the verdict.
		if o == 0 || s.OwnerAlive(o) || r.Owner.Load() != o {
			continue
		}
		t := r.Target.Load()
		k, i := layout.SplitClaimTarget(t)
		dc := DroppedClaim{Kind: k, Index: i, Owner: o, Count: r.Count.Load()}
		if dk, err := directoryOf(k); err == nil {
			if d, err := entryOf[layout.DirEntry](s, dk, i); err == nil {
				dc.Name = layout.NameOf(d)
			}
		}
		out = append(out, dc)
	}
	return out
}

// dropDeadRefs drops the records of dead processes under the registry
// lock, and returns how many it dropped. A dead process's references are
// taken off its entries' totals, but never those that live processes'
// records account for: a damaged record that counts more than its entry
// has (CheckDirectories reports it) would otherwise free the claim of a
// live process, whose lock the next claimant would then share. pending
// is the target of a claim this process counted in Refs but not yet in a
// record (addRef's), whose reference is live too; 0 for none (no target
// is 0: no claimable kind is).
func (s *Segment) dropDeadRefs(pending uint32) int {
	var dead []*layout.ClaimRef
	live := map[uint32]uint64{} // per target, the references of live processes
	if pending != 0 {
		live[pending] = 1
	}
	for j := range s.Len(layout.KindClaimRefs) {
		r, err := entryOf[layout.ClaimRef](s, layout.KindClaimRefs, j)
		if err != nil {
			break
		}
		switch o := r.Owner.Load(); {
		case o == 0:
		case s.OwnerAlive(o):
			live[r.Target.Load()] += uint64(r.Count.Load())
		default:
			dead = append(dead, r)
		}
	}
	for _, r := range dead {
		t, n := r.Target.Load(), r.Count.Load()
		k, i := layout.SplitClaimTarget(t)
		if dk, err := directoryOf(k); err == nil && i < s.Len(k) {
			if d, err := entryOf[layout.DirEntry](s, dk, i); err == nil && d.State.Load() == layout.DirClaimed {
				refs := uint64(d.Refs.Load())
				droppable := refs - min(refs, live[t]) // what no live process accounts for
				left := refs - min(uint64(n), droppable)
				d.Refs.Store(uint32(left))
				if left == 0 && s.lockFree(k, i, d.Use.Load()) {
					_ = s.freeEntry(k, dk, i)
				}
			}
		}
		r.Owner.Store(0)
		r.Target.Store(0)
		r.Count.Store(0)
	}
	return len(dead)
}

// Release drops one reference to entry i of table k. The last one frees
// the entry and zeroes it if its lock is free (or its holders dead ones,
// see lockFree); a lock still held (or marked inconsistent) keeps its
// claim, unreferenced, until a claim of its name takes it up again or,
// once the lock is free, a claim that finds no free entry recycles it
// (one marked inconsistent only if it finds no other: see lockMarked).
// ErrNotClaimed if it is not claimed, has no reference left, or (in a
// segment that records who holds the references) none of this process's.
// A release works after Close too, like the lock packages' releases.
func (s *Segment) Release(k layout.Kind, i int) error {
	dk, err := directoryOf(k)
	if err != nil {
		return err
	}
	if s.readOnly {
		return ErrReadOnly // a release works after Close, though
	}
	e, err := entryOf[layout.DirEntry](s, dk, i)
	if err != nil {
		return err
	}
	if err := s.lockRegistryFor(true); err != nil {
		return err
	}
	defer s.unlockRegistry()
	if e.State.Load() != layout.DirClaimed {
		return fmt.Errorf("%w: %v[%d]", ErrNotClaimed, k, i)
	}
	if e.Refs.Load() == 0 {
		return fmt.Errorf("%w: %v[%d] has no reference left", ErrNotClaimed, k, i)
	}
	if !s.dropRef(k, i) && s.Len(layout.KindClaimRefs) > 0 {
		// Every reference of a live process has its record: this process
		// has none to give back, and taking one off Refs would take
		// another process's.
		return fmt.Errorf("%w: %v[%d] holds no reference of this process", ErrNotClaimed, k, i)
	}
	testHookBetweenSteps()
	last := e.Refs.Add(^uint32(0)) == 0
	testHookLastRef()
	if last && s.lockFree(k, i, e.Use.Load()) {
		if err := s.freeEntry(k, dk, i); err != nil {
			return err
		}
	}
	// A lock still held (or marked inconsistent) keeps its claim with no
	// reference: a later claim of its name finds it as it is, and only a
	// free one is recycled (ClaimAs; a marked one for room alone).
	s.regGen.Add(1)
	return nil
}

// freeEntry frees entry i of table k and its directory entry dk[i],
// zeroing both. Under the registry lock.
func (s *Segment) freeEntry(k, dk layout.Kind, i int) error {
	e, err := entryOf[layout.DirEntry](s, dk, i)
	if err != nil {
		return err
	}
	e.State.Store(layout.DirFree) // first: a half-cleared entry is then merely free
	testHookFreeing()
	s.forgetRefs(k, i)
	if err := s.zeroEntry(k, i); err != nil {
		return err
	}
	if err := s.zeroEntry(dk, i); err != nil {
		return err
	}
	if k == layout.KindUpgrades {
		// The mutex's reader records go with it: a new claimant starts
		// with no readers.
		n := s.header.ReadersPerUpgrade()
		for j := range n {
			if err := s.zeroEntry(layout.KindUpgradeReaders, i*n+j); err != nil {
				return err
			}
		}
	}
	return nil
}

// lockFree reports whether entry i of table k is a free lock that carries
// nothing its next holder must be told (see layout.SlotFree and
// layout.UpgradeFree), or one that only dead processes hold (heldByDead,
// upgradeHeldByDead): only such a claim is freed, and only once no live
// process references it. A claim that finds no room recycles one such,
// or else one that lockMarked reports.
func (s *Segment) lockFree(k layout.Kind, i int, use uint32) bool {
	switch k {
	case layout.KindOwnerSlots:
		slot, err := entryOf[layout.OwnerSlot](s, k, i)
		return err == nil && (layout.SlotFree(slot, use) || s.heldByDead(slot, use))
	case layout.KindUpgrades:
		e, err := entryOf[layout.UpgradeEntry](s, k, i)
		if err != nil {
			return false
		}
		rs, err := s.readersOf(i)
		return err == nil && (layout.UpgradeFree(e, rs) || s.upgradeHeldByDead(e, rs))
	}
	return false
}

// lockMarked reports whether entry i of table k is a free lock marked
// inconsistent (layout.SlotMarkedFree, layout.UpgradeMarkedFree): a
// holder died with it, and a reclaim (or a force) freed it. Its claim is
// kept when its last reference goes, so that the next claimant of its name
// (a service restarted after the crash) is told its data may be
// half-updated; but a claim that finds no other room takes it, as
// otherwise a table full of such entries refused every new name for ever
// unless someone claimed one of the old ones again.
func (s *Segment) lockMarked(k layout.Kind, i int, use uint32) bool {
	switch k {
	case layout.KindOwnerSlots:
		slot, err := entryOf[layout.OwnerSlot](s, k, i)
		return err == nil && layout.SlotMarkedFree(slot, use)
	case layout.KindUpgrades:
		e, err := entryOf[layout.UpgradeEntry](s, k, i)
		if err != nil {
			return false
		}
		rs, err := s.readersOf(i)
		return err == nil && layout.UpgradeMarkedFree(e, rs)
	}
	return false
}

// heldByDead reports whether owner slot slot, whose claim records use, is
// held in pid/tid mode by a process that is dead (exited, its pid reused,
// or recorded before a reboot): a claim nobody live references then has
// no holder to wait for, and no claimant to tell that the data may be
// half-updated, so it is freed like a free lock's. Without that, a holder
// killed with the lock and its claimant's references dropped left the
// entry claimed for ever: no claim could recycle it, whatever its use.
//
// The PID word tells the mode whatever the claim says (use 0 says
// nothing): a token-mode lock never writes it, so a nonzero PID is a
// pid/tid holder's packed identity, pid and start time, whose death no
// pid reuse can fake. A slot claimed for token mode is never judged so:
// its lock word is Token, which names no process, and its holder may be
// alive.
func (s *Segment) heldByDead(slot *layout.OwnerSlot, use uint32) bool {
	if use == layout.SlotUseToken {
		return false
	}
	owner := slot.PID.Load()
	return owner != 0 && !s.OwnerAlive(owner)
}

// upgradeHeldByDead is heldByDead for upgrade mutex e, with reader
// records rs: it is held, and every holder is a dead process (exited, its
// pid reused, or recorded before a reboot): the Writer word's (a writer,
// or one that waited for the unique lock), the Upgrader word's, and the
// owners of the reader records that count shared holds. Each lock bit of
// the state word must be a dead word's: the upgrade and pending bits (and
// the unique one beside them) the Upgrader's, the unique bit alone the
// Writer's; a bit that no identity accounts for is a word in flux or
// damage, never judged so. A live process's word or shared hold (a reader
// record of a live owner that counts holds, a waiter that holds the Writer
// word while it waits) keeps the claim. Without this, a mutex whose
// claimants died while one of them held it was never freed, nor recycled
// by a claim that found the table full.
//
// The verdicts are on the identities loaded: each word is loaded again
// after them, as the upgrade package's diedHolding does, since a process
// may let its word go and exit in between (a free mutex then, freed as
// such), or a live process take a dead one's word over.
func (s *Segment) upgradeHeldByDead(e *layout.UpgradeEntry, rs []*layout.ReaderRecord) bool {
	st := e.State.Load()
	writer, upgrader := layout.UpgradeWriterID(e.Writer.Load()), e.Upgrader.Load()
	if writer != 0 && s.OwnerAlive(writer) || upgrader != 0 && s.OwnerAlive(upgrader) {
		return false
	}
	if st&(layout.UpgradeStateUpgrade|layout.UpgradeStatePending) != 0 && upgrader == 0 ||
		st&(layout.UpgradeStateWrite|layout.UpgradeStateUpgrade) == layout.UpgradeStateWrite && writer == 0 {
		return false
	}
	held := writer != 0 || upgrader != 0
	for _, r := range rs {
		if r.Count.Load() == 0 {
			continue
		}
		o := r.Owner.Load()
		if o == 0 || s.OwnerAlive(o) || r.Owner.Load() != o {
			return false // a live reader's, or a record in flux
		}
		held = true
	}
	return held && layout.UpgradeWriterID(e.Writer.Load()) == writer && e.Upgrader.Load() == upgrader
}

// Lookup returns the index of the entry of table k claimed under name, or
// ErrNotFound. An invalid name, the empty one included, is a
// layout.ErrBadName error: no entry can be claimed under it. It takes no
// lock, so it works on a read-only segment.
func (s *Segment) Lookup(k layout.Kind, name string) (int, error) {
	if err := layout.CheckName(name); err != nil {
		return -1, err
	}
	claims, err := s.Claims(k)
	if err != nil {
		return -1, err
	}
	for _, c := range claims {
		if c.Name == name {
			return c.Index, nil
		}
	}
	return -1, fmt.Errorf("%w: %v %q", ErrNotFound, k, name)
}

// ClaimUse is the use recorded with the claim of entry i of table k
// (ClaimAs): 0 if the entry is not claimed or its claimants never said.
// It takes no lock, so it reads the directory of the moment: a claim made
// or freed meanwhile is seen or not, as by a read just before or after.
func (s *Segment) ClaimUse(k layout.Kind, i int) (uint32, error) {
	dk, err := directoryOf(k)
	if err != nil {
		return 0, err
	}
	e, err := entry[layout.DirEntry](s, dk, i)
	if err != nil {
		return 0, err
	}
	if e.State.Load() != layout.DirClaimed {
		return 0, nil
	}
	return e.Use.Load(), nil
}

// AdoptUse records use with the claim of entry i of table k if its
// claimants never said one (ClaimAs with use 0), as the first claim of its
// name to give a use would; a claim that records use already is left as
// it is, one that records another fails with ErrUseMismatch, and an entry
// not claimed records nothing. For the lock packages' Open by index (see
// spinlock.Open): the directory frees the claim of a released lock only
// if it knows how the lock uses the entry's words, and with use 0 a
// released pid/tid slot, which keeps its generation in Token, reads as a
// token slot held by a holder who may be alive, kept for ever.
//
// The change is made under the directory's lock, which a live process
// holds for the few instructions of a claim or release, or for as long as
// it is stopped (SIGSTOP, a debugger) in one. ctx bounds that wait: once
// it is done AdoptUse fails with an error that wraps ctx.Err() and names
// the holder's pid, and records nothing, so that the claim still says no
// use and the next AdoptUse, or ClaimAs, records the first use given. A
// caller that goes on with the lock regardless would let another take the
// other use: spinlock.OpenContext fails instead.
func (s *Segment) AdoptUse(ctx context.Context, k layout.Kind, i int, use uint32) error {
	dk, err := directoryOf(k)
	if err != nil {
		return err
	}
	e, err := entry[layout.DirEntry](s, dk, i)
	if err != nil {
		return err
	}
	check := func() (done bool, err error) {
		if e.State.Load() != layout.DirClaimed {
			return true, nil
		}
		switch had := e.Use.Load(); {
		case had == use || use == 0:
			return true, nil
		case had != 0:
			return true, fmt.Errorf("%w: %v[%d] is claimed for use %d, not %d", ErrUseMismatch, k, i, had, use)
		}
		return false, nil
	}
	if done, err := check(); done {
		return err // no change: no lock, as on a read-only segment
	}
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.lockRegistryContext(ctx, false); err != nil {
		return err
	}
	defer s.unlockRegistry()
	if done, err := check(); done {
		return err
	}
	e.Use.Store(use)
	s.regGen.Add(1)
	return nil
}

// Claims lists the claimed entries of table k. It takes no lock: it reads
// the directory until two passes agree on the registry generation, so the
// list is consistent unless the directory changes continuously.
func (s *Segment) Claims(k layout.Kind) ([]Claim, error) {
	dk, err := directoryOf(k)
	if err != nil {
		return nil, err
	}
	var claims []Claim
	for attempt := 0; attempt < 4; attempt++ {
		if s.closed.Load() {
			return nil, ErrClosed
		}
		gen := s.regGen.Load()
		claims = claims[:0]
		for i := range s.Len(k) {
			e, err := entry[layout.DirEntry](s, dk, i)
			if err != nil {
				return nil, err
			}
			if e.State.Load() != layout.DirClaimed {
				continue
			}
			claims = append(claims, Claim{Index: i, Name: layout.NameOf(e), Refs: e.Refs.Load(), Claimer: e.Claimer.Load(), Use: e.Use.Load()})
		}
		if s.regGen.Load() == gen {
			break
		}
	}
	if s.closed.Load() {
		return nil, ErrClosed // as every read after Close
	}
	return claims, nil
}

func (s *Segment) writable() error {
	switch {
	case s.closed.Load():
		return ErrClosed
	case s.readOnly:
		return ErrReadOnly
	}
	return nil
}

// Registry lock: the word at layout.OffRegistry holds the packed identity of
// the process changing the directory, or 0. A waiter that finds the holder
// dead (exited, or its pid reused) takes the lock over with one CAS, so a
// process that dies mid-claim stalls the others only briefly. Goroutines of
// one process first queue on registryMu, so the word only ever sees one
// claimant per process. Close takes registryMu before it returns, so a
// change that holds the lock completes (and unlocks it) first, and one
// that waits for it gives up with ErrClosed.
const (
	registrySpins        = 64                   // Gosched rounds before sleeping
	registryMaxSleep     = 2 * time.Millisecond // longest sleep between attempts
	registryLivenessStep = 16                   // attempts between liveness checks
)

func (s *Segment) lockRegistry() error { return s.lockRegistryFor(false) }

// lockRegistryFor is lockRegistry; release: for a Release, which goes on
// after Close.
func (s *Segment) lockRegistryFor(release bool) error {
	return s.lockRegistryContext(context.Background(), release)
}

// lockRegistryContext is lockRegistryFor giving up once ctx is done (a
// live holder is waited for as long as it holds the lock).
func (s *Segment) lockRegistryContext(ctx context.Context, release bool) error {
	if err := s.lockRegistryMu(ctx); err != nil {
		return err
	}
	self := proc.Self().Pack()
	sleep := 10 * time.Microsecond
	for attempt := 0; ; attempt++ {
		if !release && s.closed.Load() {
			s.registryMu.Unlock()
			return ErrClosed
		}
		holder := s.registry.Load()
		if holder == 0 {
			if s.registry.CompareAndSwap(0, self) {
				return nil
			}
			continue
		}
		if attempt%registryLivenessStep == registryLivenessStep-1 && !s.OwnerAlive(holder) {
			if s.registry.CompareAndSwap(holder, self) {
				s.regGen.Add(1) // the dead holder's change, if any, is abandoned
				s.recountRefs()
				return nil
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			s.registryMu.Unlock()
			id, _ := proc.Unpack(holder)
			return fmt.Errorf("waiting for the claim directory's lock, held by live process %d: %w", id.PID, err)
		}
		if attempt < registrySpins {
			runtime.Gosched()
		} else {
			futex.Nap(sleep) // time.Sleep would stretch 10 us to hundreds
			sleep = min(2*sleep, registryMaxSleep)
		}
	}
}

// lockRegistryMu takes registryMu, giving up once ctx is done: the
// goroutine of this process that has it may be waiting, without a bound,
// for a holder of the word that is stopped, and a ctx that bounded only
// the wait for the word would not bound this one.
func (s *Segment) lockRegistryMu(ctx context.Context) error {
	if ctx.Done() == nil {
		s.registryMu.Lock()
		return nil
	}
	sleep := 10 * time.Microsecond
	for !s.registryMu.TryLock() {
		if err := ctx.Err(); err != nil {
			if holder := s.registry.Load(); holder != 0 {
				id, _ := proc.Unpack(holder)
				return fmt.Errorf("waiting for the claim directory's lock, held by process %d, behind another goroutine: %w", id.PID, err)
			}
			return fmt.Errorf("waiting for the claim directory's lock, behind another goroutine: %w", err)
		}
		futex.Nap(sleep)
		sleep = min(2*sleep, registryMaxSleep)
	}
	return nil
}

// recountRefs sets each claimed entry's Refs to the sum of the Counts of
// the reference records naming it, after a takeover of the registry lock
// from a dead holder. Under the lock the two agree, for every change of
// either happens under it; a holder killed between its two steps (a claim
// that counted Refs but not yet its record, a release that took its record
// but not yet Refs) leaves Refs one too high, a reference that no record
// names and so no DropDeadClaims could ever drop. A claim left with no
// reference whose lock is free is freed, as a release would: one whose
// count falls to 0 this way, and one whose releaser was killed between
// taking the last reference off and freeing it (a claim kept unreferenced
// for a lock held at its release, since freed, goes too, as a claim that
// found no free entry would recycle it). A
// segment made without records (claim_refs of count 0) counts the totals
// alone, and has nothing to recount from.
func (s *Segment) recountRefs() {
	n := s.Len(layout.KindClaimRefs)
	if n == 0 || s.readOnly {
		return
	}
	counts := map[uint32]uint64{}
	for j := range n {
		r, err := entryOf[layout.ClaimRef](s, layout.KindClaimRefs, j)
		if err != nil {
			return
		}
		if r.Owner.Load() != 0 {
			counts[r.Target.Load()] += uint64(r.Count.Load())
		}
	}
	for _, k := range []layout.Kind{layout.KindOwnerSlots, layout.KindUpgrades} {
		dk, _ := directoryOf(k)
		for i := range s.Len(k) {
			d, err := entryOf[layout.DirEntry](s, dk, i)
			if err != nil || d.State.Load() != layout.DirClaimed {
				continue
			}
			// Damaged records may count more than a Refs can hold: the most
			// it can, never a sum wrapped to (nearly) nothing.
			want := uint32(min(counts[layout.ClaimTarget(k, i)], math.MaxUint32))
			d.Refs.Store(want)
			if want == 0 && s.lockFree(k, i, d.Use.Load()) {
				_ = s.freeEntry(k, dk, i)
			}
		}
	}
}

func (s *Segment) unlockRegistry() {
	s.registry.Store(0)
	s.registryMu.Unlock()
}

// testHookBeforePublish runs between writing a new claim and publishing
// it; tests replace it to die mid-claim.
var testHookBeforePublish = func() {}

// testHookLastRef runs in a Release between taking the reference off the
// entry's Refs and freeing the entry.
var testHookLastRef = func() {}

// testHookFreeing runs in freeEntry between marking the entry free and
// forgetting the records that name it.
var testHookFreeing = func() {}

// testHookBetweenSteps runs between a claim's (or a release's) change of
// the entry's Refs and of the process's reference record; tests replace it
// to die there.
var testHookBetweenSteps = func() {}

// testHookDeadRef runs in deadRefs (DropDeadClaims' listing) between its
// load of a reference record's owner and the check that the owner lives;
// tests replace it.
var testHookDeadRef = func() {}
