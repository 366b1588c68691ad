package txn

import (
	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/spinlock"
)

// SetPinnedHook installs f to run inside TryPin between the increment and
// the re-check of the state (nil removes it). Tests only; not concurrent
// with pins.
func SetPinnedHook(f func()) { testHookPinned = f }

// SetUncheckedHook installs f to run where the segment's Close can come
// between an operation's check and its use of the segment: after the
// stores of Open, Begin, Alloc and Link (stored), before a pinned object
// is read (nil removes it). Tests only; not concurrent with those operations.
func SetUncheckedHook(f func(stored bool)) { testHookUnchecked = f }

// SetCloseHooks installs the close's test hooks (nil removes one): drained
// runs between a closer's last count of pins and its flip to Finishing,
// finishing at the start of the end sequence, promotePinned when a closer
// has pinned the destination of a promotion, before it copies. Each gets
// the record index. Tests only; not concurrent with closes.
func SetCloseHooks(drained, finishing, promotePinned func(idx int)) {
	testHookDrained, testHookFinishing, testHookPromotePinned = drained, finishing, promotePinned
}

// SetReclaimHook installs f to run inside Reclaim between its read of the
// record's state and its read of the owner (nil removes it). Tests only;
// not concurrent with Reclaim.
func SetReclaimHook(f func(idx int)) { testHookReclaimRead = f }

// SetRowCheckedHook installs f to run inside Space.Close between its check
// of the row's counters and its giving up of the row (nil removes it).
// Tests only; not concurrent with Space.Close.
func SetRowCheckedHook(f func()) { testHookRowChecked = f }

// SetSourceRefusedHook installs f to run inside Borrow after a promotion
// cell's source refused its pin as closing, before Borrow reads the
// source's state again (nil removes it). Tests only; not concurrent with
// Borrow.
func SetSourceRefusedHook(f func(idx int)) { testHookSourceRefused = f }

// PoisonByte is the byte a freed arena is filled with.
const PoisonByte = poisonByte

// OwnPinCount is the pins this handle counts on record idx.
func (s *Space) OwnPinCount(idx int) uint32 { return s.ctrs[idx].Load() }

// Row is the handle's pin row.
func (s *Space) Row() int { return s.row }

// ClosersAsleep is the number of goroutines asleep on record idx's drain word.
func (s *Space) ClosersAsleep(idx int) uint32 { return sleepers.Count(s.recs[idx].Sleepers.Load()) }

// DataStart is the offset of the data area in the txn arena region.
func (s *Space) DataStart() uint64 { return s.geo.dataStart }

// ArenaBytes is t's arena in the segment (also after its close).
func (t *Txn) ArenaBytes() []byte { return t.s.geo.region[t.start : t.start+t.size] }

// AllocLock is the allocator lock of sp's segment, for tests that hold it.
func AllocLock(sp *Space) *spinlock.Lock { return sp.alloc }

// LeadersAsleep is the number of barrier leaders asleep on the barrier's
// drain word.
func (s *Space) LeadersAsleep() uint32 { return sleepers.Count(s.bar.Sleepers.Load()) }

// Record is the transaction record's declaration, for the check of
// docs/FORMAT.md.
type Record = record
