package shm

import (
	"fmt"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/layout"
)

// Slot returns owner slot i. The pointer stays valid until Close.
func (s *Segment) Slot(i int) (*layout.OwnerSlot, error) {
	return entry[layout.OwnerSlot](s, layout.KindOwnerSlots, i)
}

// Upgrade returns the state of upgrade mutex i. The pointer stays valid
// until Close.
func (s *Segment) Upgrade(i int) (*layout.UpgradeEntry, error) {
	return entry[layout.UpgradeEntry](s, layout.KindUpgrades, i)
}

// UpgradeReader returns reader record j of upgrade mutex i (j below
// ReadersPerUpgrade). The pointer stays valid until Close.
func (s *Segment) UpgradeReader(i, j int) (*layout.ReaderRecord, error) {
	n := s.header.ReadersPerUpgrade()
	if i < 0 || uint64(i) >= s.header.Table(layout.KindUpgrades).Count || j < 0 || j >= n {
		if s.closed.Load() {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("%w: reader %d of upgrade mutex %d (%d mutexes of %d readers)",
			ErrIndex, j, i, s.header.Table(layout.KindUpgrades).Count, n)
	}
	return entry[layout.ReaderRecord](s, layout.KindUpgradeReaders, i*n+j)
}

// UpgradeReaders returns the reader records of upgrade mutex i, all
// ReadersPerUpgrade of them in order. The pointers stay valid until Close.
func (s *Segment) UpgradeReaders(i int) ([]*layout.ReaderRecord, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return s.readersOf(i)
}

// readersOf is UpgradeReaders without the closed check, for releases.
func (s *Segment) readersOf(i int) ([]*layout.ReaderRecord, error) {
	if i < 0 || uint64(i) >= s.header.Table(layout.KindUpgrades).Count {
		return nil, fmt.Errorf("%w: upgrade mutex %d of %d", ErrIndex, i, s.header.Table(layout.KindUpgrades).Count)
	}
	n := s.header.ReadersPerUpgrade()
	rs := make([]*layout.ReaderRecord, n)
	for j := range rs {
		var err error
		if rs[j], err = entryOf[layout.ReaderRecord](s, layout.KindUpgradeReaders, i*n+j); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// ReadersPerUpgrade is the number of reader records of each upgrade mutex.
func (s *Segment) ReadersPerUpgrade() int { return s.header.ReadersPerUpgrade() }

// Region returns the bytes of one table, for the packages that define its
// entries (txn, lockmgr). The slice aliases the shared mapping and is valid
// until Close; reach shared words in it through sync/atomic only.
func (s *Segment) Region(k layout.Kind) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if k < 1 || int(k) > layout.NumTables {
		return nil, fmt.Errorf("%w: %v", layout.ErrUnknownTable, k)
	}
	t := s.header.Table(k)
	return s.mem[t.Offset:t.End():t.End()], nil
}

// Len is the number of entries in table k (0 for an unknown kind).
func (s *Segment) Len(k layout.Kind) int {
	if k < 1 || int(k) > layout.NumTables {
		return 0
	}
	return int(s.header.Table(k).Count)
}

func entry[T any](s *Segment, k layout.Kind, i int) (*T, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return entryOf[T](s, k, i)
}

// entryOf is entry without the closed check, for releases.
func entryOf[T any](s *Segment, k layout.Kind, i int) (*T, error) {
	t := s.header.Table(k)
	if i < 0 || uint64(i) >= t.Count {
		return nil, fmt.Errorf("%w: %v[%d] of %d", ErrIndex, k, i, t.Count)
	}
	return memview.At[T](s.mem, t.EntryOffset(uint64(i)))
}

// zeroEntry clears entry i of table k word by word with atomic stores, so
// that a process still (wrongly) reading it never sees a torn word.
func (s *Segment) zeroEntry(k layout.Kind, i int) error {
	t := s.header.Table(k)
	off := t.EntryOffset(uint64(i))
	for w := uint64(0); w < uint64(t.EntrySize); w += 8 {
		word, err := memview.Uint64(s.mem, off+w)
		if err != nil {
			return err
		}
		word.Store(0)
	}
	return nil
}

// LockStats returns the contention counters of lock index of table kind
// (KindOwnerSlots, KindUpgrades, KindLockMgr or KindTxnRecords), or nil if
// the segment has no such lock or no lock_stats table. The pointer stays
// valid until Close (after it, it points at a quarantined copy); every
// counter is an atomic that any process may bump.
func (s *Segment) LockStats(kind layout.Kind, index int) *layout.LockStats {
	i := s.header.StatsIndex(kind, index)
	if i < 0 {
		return nil
	}
	st, err := entryOf[layout.LockStats](s, layout.KindLockStats, i)
	if err != nil {
		return nil
	}
	return st
}
