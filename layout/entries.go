package layout

import (
	"fmt"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// Entry sizes (format version 5).
const (
	OwnerSlotSize    = 32
	DirEntrySize     = 64
	UpgradeEntrySize = 64
	TxnRecordSize    = 128
	ArenaUnit        = 64
	LockMgrEntrySize = 256
	ReaderRecordSize = 16
	ClaimRefSize     = 16
	RegionEntrySize  = 64
	DataUnit         = 64
	LockStatsSize    = 64
)

// OwnerSlot is the unified owner record: one 32-byte record that says
// who holds a spinlock. Package spinlock interprets it in one of two modes:
//
//	field            token mode                    pid/tid mode
//	PID              0                             packed identity of the holding
//	                                               process (pid + start time, see
//	                                               internal/proc); 0 when free
//	TID              0                             holder id within that process,
//	                                               issued by the identity factory
//	Token            the holder's token; 0 = free  generation: bumped by every
//	                                               release and reclaim
//	RecursionCount   bit 31: inconsistent          bits 0-30: re-entries by the
//	                 (SlotInconsistent)            same holder beyond the first
//	                                               lock; bit 31: inconsistent
//	Pad              sleepers (bits 0-30) and      the same
//	                 wake-pending (bit 31)
//
// Sleepers wait on a futex over the low 32 bits of the lock word (Token in
// token mode, PID in pid/tid mode, whose low bits hold the pid): nonzero
// while held, 0 once released, so a waiter never sleeps through a release
// it should have seen.
//
// Packing the start time next to the pid lets one CAS record both who holds
// the lock and which incarnation of that pid, so liveness checks cannot be
// fooled by PID reuse. Two slots share a cache line.
type OwnerSlot struct {
	PID            atomic.Uint64
	TID            atomic.Uint64
	Token          atomic.Uint64
	RecursionCount atomic.Uint32
	Pad            atomic.Uint32
}

// The RecursionCount word of an owner slot: the holder's re-entries, and
// whether the data the lock protects may be inconsistent: a holder died
// holding the lock and no holder since has said that it repaired the data
// (package spinlock sets it at a reclaim; Guard.MarkConsistent clears it).
// Only the holder changes the word, so plain loads and stores suffice.
const (
	SlotRecursion    uint32 = 1<<31 - 1
	SlotInconsistent uint32 = 1 << 31
)

// The Pad word of an owner slot: how many waiters are asleep (bits 0-15),
// the drop epoch (bits 16-23), how many wakes in a row found none of them
// in the kernel (bits 24-30), and whether a release has woken one that has
// not run yet (bit 31: further releases need not wake another until it
// has). A registered sleeper that runs resets the futile-wake count; a
// long run of futile wakes drops the count and moves the epoch on, and a
// sleeper registered before the drop then leaves without taking itself
// off the count (internal/sleepers).
const (
	PadSleepers    uint32 = 1<<16 - 1
	PadEpochShift         = 16
	PadEpoch       uint32 = 0xff << PadEpochShift
	PadFutileShift        = 24
	PadFutileWakes uint32 = 0x7f << PadFutileShift
	PadWakePending uint32 = 1 << 31
)

// Sleepers is the number of waiters registered as asleep on the slot.
func (s *OwnerSlot) Sleepers() uint32 { return s.Pad.Load() & PadSleepers }

// Reset zeroes every field: a free slot. Only for a slot nobody uses, as
// when it is claimed or released.
func (s *OwnerSlot) Reset() {
	s.PID.Store(0)
	s.TID.Store(0)
	s.Token.Store(0)
	s.RecursionCount.Store(0)
	s.Pad.Store(0)
}

// Directory entry states.
const (
	DirFree    uint32 = 0 // the table entry is unclaimed and zeroed
	DirClaimed uint32 = 1 // the table entry belongs to Refs claimants
)

// MaxNameLen is the longest name, in bytes, that a claim may carry.
const MaxNameLen = 40

// DirEntry records the claim of one table entry (owner slot or upgrade
// mutex). Directory entries change only under the segment's registry lock,
// and State is stored last on claim, so a reader that sees DirClaimed sees
// the whole entry.
type DirEntry struct {
	State   atomic.Uint32
	Refs    atomic.Uint32 // claims not yet released; 0 when free
	NameLen atomic.Uint32 // 0 for an unnamed claim
	Use     atomic.Uint32 // what the claimants use the entry as; 0 = not said (see shm.ClaimAs)
	Claimer atomic.Uint64 // packed identity of the process that claimed it first
	Name    [MaxNameLen]byte
}

// UpgradeEntry is the state of one upgradeable mutex. Package
// upgrade owns the meaning of every word; the layout fixes where they are.
type UpgradeEntry struct {
	State          atomic.Uint32 // write bit 31, upgrade bit 30, pending bit 29 (readers: in ReaderRecords)
	SharedGate     atomic.Uint32 // futex word for shared and upgrade waiters (gate1)
	UniqueGate     atomic.Uint32 // futex word for a writer or an upgrade draining readers (gate2)
	Waiters        atomic.Uint32 // processes sleeping on either gate
	Writer         atomic.Uint64 // packed identity of the writer; 0 if none
	WriterTID      atomic.Uint64 // holder id of the writer
	Upgrader       atomic.Uint64 // packed identity of the upgrade holder; 0 if none
	UpgraderTID    atomic.Uint64 // holder id of the upgrade holder
	Generation     atomic.Uint64 // the fencing token: bumped by the end of every unique or upgrade hold
	WriterGate     atomic.Uint32 // futex word for writers waiting for Writer to be free
	WriterSleepers atomic.Uint32 // sleepers on WriterGate, and a wake-pending bit
}

// ReaderRecord accounts the shared holds of one process (in package
// upgrade, of one handle) on one upgrade mutex. Records of mutex i are
// entries [i*R, (i+1)*R) of the upgrade_readers table, R being
// Header.ReadersPerUpgrade. A record is free when Owner is 0; a process
// takes a free one, or one whose owner died, by CAS of Owner, and only then
// resets Count. Package upgrade owns the meaning of Count and Pad.
type ReaderRecord struct {
	Owner atomic.Uint64 // packed identity of the owning process; 0 if free
	Count atomic.Uint32 // shared holds of the owner
	Pad   atomic.Uint32
}

// CheckName reports whether name may be stored in a directory entry:
// 1 to MaxNameLen bytes of valid UTF-8 with no control characters.
func CheckName(name string) error {
	switch {
	case name == "":
		return formatErr(ErrBadName, "name", "empty")
	case len(name) > MaxNameLen:
		return formatErr(ErrBadName, "name", "%d bytes, at most %d", len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return formatErr(ErrBadName, "name", "%q is not valid UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return formatErr(ErrBadName, "name", "%q has a control character", name)
		}
	}
	return nil
}

// NameOf returns the name stored in e, or "" for an unnamed or torn entry.
func NameOf(e *DirEntry) string {
	n := e.NameLen.Load()
	if n == 0 || n > MaxNameLen {
		return ""
	}
	return string(e.Name[:n])
}

var _ fmt.Stringer = Kind(0)

// Sizes inside a lock-manager entry.
const (
	LockMgrNameLen  = 40 // bytes of a resource name; shorter names are NUL-padded
	LockMgrOwnerLen = 32 // bytes of an owner name; shorter names are NUL-padded
	LockMgrHolders  = 2  // holder records in one entry
)

// LockMgrEntry is one 256-byte entry of the lock-manager table (design
// 004). Package lockmgr owns the meaning of every word and documents it;
// the layout fixes where they are so that reboot recovery (package shm)
// can mark the recorded identities stale: Lock and every holder's Process
// and Companion are packed identities (internal/proc).
type LockMgrEntry struct {
	Lock        atomic.Uint64 // packed identity of the process changing the entry; 0 if none
	Ctl         atomic.Uint32 // entry kind, flags and lock mode
	Gate        atomic.Uint32 // futex word, bumped whenever a hold ends
	Sleepers    atomic.Uint32 // waiters asleep on Gate
	Next        atomic.Uint32 // index of the next entry of this resource's holders; 0 if none
	Version     atomic.Uint64 // fencing version of the resource
	Hash        atomic.Uint64 // hash of Name
	LastExpired atomic.Uint64 // hash of the owner whose hold last ended without a release
	Grants      atomic.Uint64 // statistics, summed over the table by lockmgr.Stats
	Releases    atomic.Uint64
	HoldNanos   atomic.Uint64
	Conflicts   atomic.Uint64
	Expired     atomic.Uint32
	Reclaimed   atomic.Uint32
	Name        [LockMgrNameLen / 8]atomic.Uint64
	Holders     [LockMgrHolders]LockMgrHolder
}

// LockMgrHolder is one holder of a lock-manager resource.
type LockMgrHolder struct {
	Process   atomic.Uint64 // packed identity of the holding process; 0: record unused
	Companion atomic.Uint64 // packed identity of a second process whose life keeps the hold; 0 if none
	Acquired  atomic.Uint64 // nanoseconds on lockmgr's clock (CLOCK_MONOTONIC, see lockmgr.Clock)
	Expires   atomic.Uint64 // the same clock; 0: never
	Owner     [LockMgrOwnerLen / 8]atomic.Uint64
}

// Words of an upgrade mutex that tell whether it is held, and by whom, for
// the claim directory (package shm), which frees only a claim whose lock
// no live process holds. Package upgrade
// owns their meaning; see its state.go.
const (
	UpgradeStateWrite        uint32 = 1 << 31 // the unique lock: the Writer word's holder's, or with UpgradeStateUpgrade the upgrade holder's
	UpgradeStateUpgrade      uint32 = 1 << 30 // the upgrade lock, the Upgrader word's holder's
	UpgradeStatePending      uint32 = 1 << 29 // the upgrade holder waits for readers to drain
	UpgradeStateHeld                = UpgradeStateWrite | UpgradeStateUpgrade | UpgradeStatePending
	UpgradeStateInconsistent uint32 = 1 << 28 // a dead holder's unique hold was freed, not yet repaired
	UpgradeWriterUnique      uint64 = 1 << 61 // in the Writer word: its holder holds the unique lock
	upgradeHungry            uint64 = 1 << 62
	upgradePIDField          uint64 = 1<<22 - 1
)

// SlotFree reports whether owner slot s is free and carries nothing a
// later holder must be told (SlotInconsistent). use is the slot's claim
// use (spinlock.Mode.ClaimUse: 1 pid/tid, 2 token, 0 unsaid): a released
// pid/tid slot keeps its generation in Token, so a slot whose mode is
// unsaid is free only if Token is 0 too.
func SlotFree(s *OwnerSlot, use uint32) bool { return slotUnheld(s, 0, use) }

// SlotMarkedFree reports whether owner slot s is free but for the mark
// of a holder that died with it (SlotInconsistent, left by a reclaim or a
// force): the news its next holder must be told, which package shm keeps
// with the claim, unreferenced, until the table has no other room.
func SlotMarkedFree(s *OwnerSlot, use uint32) bool { return slotUnheld(s, SlotInconsistent, use) }

// slotUnheld reports whether owner slot s is free, with RecursionCount
// mark: a holder's re-entries, and a token-mode slot's Token, are holds.
func slotUnheld(s *OwnerSlot, mark, use uint32) bool {
	if s.PID.Load() != 0 || s.RecursionCount.Load() != mark {
		return false
	}
	return use == SlotUsePIDTID || s.Token.Load() == 0
}

// The claim uses of an owner slot's two modes (spinlock.Mode.ClaimUse).
const (
	SlotUsePIDTID uint32 = 1
	SlotUseToken  uint32 = 2
)

// UpgradeFree reports whether upgrade mutex e, with reader records rs, is
// free (no lock bit, no writer or upgrade holder, no shared hold) and
// carries nothing a later holder must be told.
func UpgradeFree(e *UpgradeEntry, rs []*ReaderRecord) bool {
	return e.State.Load()&UpgradeStateInconsistent == 0 && upgradeUnheld(e, rs)
}

// UpgradeMarkedFree reports whether upgrade mutex e, with reader records
// rs, is free but for the mark of a unique holder that died with it
// (UpgradeStateInconsistent): see SlotMarkedFree.
func UpgradeMarkedFree(e *UpgradeEntry, rs []*ReaderRecord) bool {
	return e.State.Load()&UpgradeStateInconsistent != 0 && upgradeUnheld(e, rs)
}

// UpgradeWriterID is the packed identity in w, an upgrade mutex's Writer
// word: the holder of the writers' mutex (a writer, or one waiting for
// the unique lock), without the word's own bits; 0 if the word is free
// or a handoff.
func UpgradeWriterID(w uint64) uint64 {
	if IsUpgradeHandoff(w) {
		return 0
	}
	return w &^ (upgradeHungry | UpgradeWriterUnique)
}

// upgradeUnheld is UpgradeFree whatever UpgradeStateInconsistent says.
func upgradeUnheld(e *UpgradeEntry, rs []*ReaderRecord) bool {
	if e.State.Load()&UpgradeStateHeld != 0 || e.Upgrader.Load() != 0 {
		return false
	}
	if w := e.Writer.Load(); w != 0 && !IsUpgradeHandoff(w) { // a handoff is free; UpgradeWriterUnique only with an identity
		return false
	}
	for _, r := range rs {
		if r.Count.Load() != 0 {
			return false
		}
	}
	return true
}

// IsUpgradeHandoff reports whether w, an upgrade mutex's Writer word, is
// a handoff: the hungry bit with no identity (no process has pid 0), which
// a release leaves for the waiting writers; the lock is then free.
func IsUpgradeHandoff(w uint64) bool { return w&upgradeHungry != 0 && w&upgradePIDField == 0 }

// ClaimRef records the references one process holds to one claimed entry
// (an owner slot or an upgrade mutex): package shm keeps it beside the
// directory's total (DirEntry.Refs) so that a dead process's references
// can be dropped (by the next claim that needs room, or by a reclaim), and
// a live one's never are. Changed only under the registry lock.
type ClaimRef struct {
	Owner  atomic.Uint64 // packed identity of the process; 0: record free
	Target atomic.Uint32 // the claimed entry: its table's kind << 24 | its index
	Count  atomic.Uint32 // the references the process holds to it
}

// ClaimTarget encodes entry i of table k for ClaimRef.Target.
func ClaimTarget(k Kind, i int) uint32 { return uint32(k)<<claimTargetShift | uint32(i) }

// SplitClaimTarget is ClaimTarget's inverse: the table and the index a
// ClaimRef.Target names.
func SplitClaimTarget(t uint32) (Kind, int) {
	return Kind(t >> claimTargetShift), int(t & (1<<claimTargetShift - 1))
}

// claimTargetShift places the kind above the index in ClaimRef.Target: 24
// bits of index, more than any claimable table's MaxSlots or MaxUpgrades.
const claimTargetShift = 24
