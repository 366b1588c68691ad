package layout

import (
	"sync/atomic"
	"time"
)

// Contention counters (table KindLockStats, format version 4): one
// LockStats entry per lock of the segment, so that any process (an
// inspector, a metrics collector) sees what every process's waits cost.
//
// The counters are bumped on slow paths only: a lock taken at the first
// try costs nothing extra, not even one atomic add. A waiter counts its
// wait once it ends (granted or given up), with RecordWait; a process
// killed mid-wait simply never records that wait.
//
// Only waits that yield the CPU or sleep are timed. A wait granted while
// it still spins (a few hundred loads of the lock word: microseconds) is
// counted with RecordSpunWait, in Contended and the first bucket of
// WaitHist, and adds nothing to WaitNanos: timing it would take two clock
// reads (about 25 ns each on a KVM guest), as much as a short handoff
// itself, on the path where a lock passes between processes. A timed wait
// runs from the waiter's first failed try (the spinlock) or at the latest
// its first yield (the upgrade mutex, the lock manager) to its end. Every counter is a plain
// atomic add, by any process, in any order: the entry has no lock and no
// invariant between its words (Contended is not exactly the sum of the
// histogram while waits are being recorded). Counters wrap around.
//
// Entries of the table, in this order (StatsIndex):
//
//	[0, S)                 owner slots (spinlocks), S = owner_slots count
//	[S, S+U)               upgrade mutexes, U = upgrades count
//	[S+U, S+U+L)           lock-manager entries (entry 0 included), L = lockmgr count
//	[S+U+L, S+U+L+T)       transaction records, T = txn_records count
type LockStats struct {
	Contended atomic.Uint64 // acquisitions that did not get the lock at the first try
	Sleeps    atomic.Uint64 // futex sleeps of waiters
	Wakeups   atomic.Uint64 // futex wakes by a releasing side that woke someone
	WaitNanos atomic.Uint64 // total time of the timed waits (those that yielded or slept)
	Reclaims  atomic.Uint32 // holds taken from, or ended for, dead processes
	Timeouts  atomic.Uint32 // waits that gave up: timeout, cancellation, close
	WaitHist  [StatsBucketCount]atomic.Uint32
}

// StatsBuckets are the upper bounds (inclusive) of the buckets of
// LockStats.WaitHist; the last bucket counts the longer waits. Decades,
// from what a spinning waiter sees to what a user notices.
var StatsBuckets = [StatsBucketCount - 1]time.Duration{
	10 * time.Microsecond, 100 * time.Microsecond, time.Millisecond,
	10 * time.Millisecond, 100 * time.Millisecond,
}

// StatsBucketCount is the number of buckets of LockStats.WaitHist.
const StatsBucketCount = 6

// statsKinds are the tables with a LockStats entry per entry, in the order
// of their entries in the lock_stats table.
var statsKinds = [...]Kind{KindOwnerSlots, KindUpgrades, KindLockMgr, KindTxnRecords}

// StatsBucket returns the index in LockStats.WaitHist of a wait of d.
func StatsBucket(d time.Duration) int {
	for i, b := range StatsBuckets {
		if d <= b {
			return i
		}
	}
	return len(StatsBuckets)
}

// RecordWait records one finished wait of d that was not granted at the
// first try: Contended, WaitNanos and the histogram, and Timeouts if the
// waiter gave up. A nil s records nothing (a segment without stats).
func (s *LockStats) RecordWait(d time.Duration, gaveUp bool) {
	if s == nil {
		return
	}
	d = max(d, 0)
	s.Contended.Add(1)
	s.WaitNanos.Add(uint64(d))
	s.WaitHist[StatsBucket(d)].Add(1)
	if gaveUp {
		s.Timeouts.Add(1)
	}
}

// RecordSpunWait records one wait that was granted while it spun, before
// it yielded or slept: Contended and the first bucket, no time (see the
// comment on LockStats). A nil s records nothing.
func (s *LockStats) RecordSpunWait() {
	if s != nil {
		s.Contended.Add(1)
		s.WaitHist[0].Add(1)
	}
}

// Reset stores 0 into every counter, for a lock whose entry a new name or
// resource takes (FORMAT.md: the counters are then the new one's); nil-safe.
// Not atomic as a whole: a wait recorded meanwhile may keep some words.
func (s *LockStats) Reset() {
	if s == nil {
		return
	}
	s.Contended.Store(0)
	s.Sleeps.Store(0)
	s.Wakeups.Store(0)
	s.WaitNanos.Store(0)
	s.Reclaims.Store(0)
	s.Timeouts.Store(0)
	for i := range s.WaitHist {
		s.WaitHist[i].Store(0)
	}
}

// AddSleep counts one futex sleep; nil-safe.
func (s *LockStats) AddSleep() {
	if s != nil {
		s.Sleeps.Add(1)
	}
}

// AddWakeup counts one wake that woke a sleeper; nil-safe.
func (s *LockStats) AddWakeup() {
	if s != nil {
		s.Wakeups.Add(1)
	}
}

// AddReclaim counts one hold taken from, or ended for, a dead process;
// nil-safe.
func (s *LockStats) AddReclaim() {
	if s != nil {
		s.Reclaims.Add(1)
	}
}

// StatsIndex is the entry of the lock_stats table for entry i of table k
// (one of KindOwnerSlots, KindUpgrades, KindLockMgr, KindTxnRecords), or
// -1 if the segment has no such lock or no stats table.
func (h *Header) StatsIndex(k Kind, i int) int {
	if h.Table(KindLockStats).Count == 0 || i < 0 {
		return -1
	}
	base := uint64(0)
	for _, sk := range statsKinds {
		n := h.Table(sk).Count
		if sk == k {
			if uint64(i) >= n {
				return -1
			}
			return int(base + uint64(i))
		}
		base += n
	}
	return -1
}

// lockCount is the number of locks with a stats entry: what the lock_stats
// table's count must be.
func (h *Header) lockCount() uint64 {
	var n uint64
	for _, k := range statsKinds {
		n += h.Table(k).Count
	}
	return n
}
