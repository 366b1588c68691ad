package upgrade

import (
	"fmt"
	"math/bits"

	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/shm"
)

// Status is a snapshot of one upgrade mutex, for tools (shmctl rwlocks).
// It is read word by word without a lock, so under traffic its fields may
// come from slightly different moments.
type Status struct {
	Index          int
	State          uint32 // the raw state word
	Writer         uint64 // packed identity holding (or waiting for) the writers' mutex; 0 if none (or handed to waiting writers)
	WriterTID      uint64
	Upgrader       uint64 // packed identity holding (or taking) the upgrade lock; 0 if none
	UpgraderTID    uint64
	Generation     uint64
	SharedWaiters  uint32 // sleepers on the shared gate (readers, upgrade seekers)
	UniqueWaiters  uint32 // sleepers on the unique gate (a writer or a pending upgrade draining readers): 0 to 2
	WriterWaiters  uint32 // writers asleep waiting for the writers' mutex
	Readers        []ReaderStatus
	ReaderRecords  int // records of the mutex, used or not
	WriteLocked    bool
	UpgradeLocked  bool
	UpgradePending bool
	// Handoff: the writers' mutex was released to the writers that had
	// waited (Writer is 0 then) and none of them has taken it yet.
	Handoff bool
	// Inconsistent: a dead holder's unique hold was freed and no unique
	// holder has marked the data consistent since (Mutex.MarkConsistent).
	Inconsistent bool
}

// ReaderStatus is one reader record in use.
type ReaderStatus struct {
	Record int    // index among the mutex's records
	Owner  uint64 // packed identity of the owning process
	Count  uint32 // its shared holds
}

// Unique reports whether the status shows the unique lock held by the
// upgrade holder (after UpgradeToUnique) rather than by a writer.
func (s Status) Unique() bool { return s.WriteLocked && s.UpgradeLocked }

// Inspect reads upgrade mutex i of seg (which may be opened read-only);
// shm.ErrClosed once seg is closed.
func Inspect(seg *shm.Segment, i int) (Status, error) {
	if seg == nil {
		return Status{}, shm.ErrNoSegment
	}
	e, err := seg.Upgrade(i)
	if err != nil {
		return Status{}, err
	}
	st := e.State.Load()
	w := e.Waiters.Load()
	writer := e.Writer.Load()
	s := Status{
		Index: i, State: st,
		Writer: writerID(writer), WriterTID: e.WriterTID.Load(), Handoff: isHandoff(writer),
		Upgrader: e.Upgrader.Load(), UpgraderTID: e.UpgraderTID.Load(),
		Generation:    e.Generation.Load(),
		SharedWaiters: w & waitersSharedMask, UniqueWaiters: uint32(bits.OnesCount32(w & waitersUnique)),
		WriterWaiters: sleepers.Count(e.WriterSleepers.Load()),
		ReaderRecords: seg.ReadersPerUpgrade(),
		WriteLocked:   uniqueHeld(st, writer), UpgradeLocked: st&stateUpgrade != 0, UpgradePending: st&statePending != 0,
		Inconsistent: st&stateInconsistent != 0,
		Readers:      []ReaderStatus{},
	}
	for j := range s.ReaderRecords {
		r, err := seg.UpgradeReader(i, j)
		if err != nil {
			return Status{}, err
		}
		if o := r.Owner.Load(); o != 0 {
			s.Readers = append(s.Readers, ReaderStatus{Record: j, Owner: o, Count: r.Count.Load()})
		}
	}
	return s, nil
}

// Repair says what Reclaim did (or would do) to one mutex.
type Repair struct {
	Handoff  bool           // a stale handoff of the writers' mutex was freed
	Writer   uint64         // the dead writer released, 0 if none
	Upgrader uint64         // the dead upgrade holder released, 0 if none
	Readers  []ReaderStatus // the freed records of dead processes, as found
}

// Empty reports whether there was nothing to repair.
func (r Repair) Empty() bool {
	return !r.Handoff && r.Writer == 0 && r.Upgrader == 0 && len(r.Readers) == 0
}

// Reclaim releases whatever dead processes hold on upgrade mutex i of
// seg: a dead writer's or upgrade holder's lock, and the reader records
// of dead processes, and a stale handoff of the writers' mutex (one that a
// dead or departed writer asked for), as waiters do by themselves. Live holders are never
// touched. With dryRun it only reports, and seg may be read-only. For
// repair tools (shmctl reclaim) and for callers that only ever use the Try
// forms. shm.ErrClosed once seg is closed.
func Reclaim(seg *shm.Segment, i int, dryRun bool) (Repair, error) {
	if seg == nil {
		return Repair{}, shm.ErrNoSegment
	}
	if !dryRun && seg.ReadOnly() {
		return Repair{}, fmt.Errorf("upgrade: reclaim mutex %d: %w", i, shm.ErrReadOnly)
	}
	m, err := open(seg, i)
	if err != nil {
		return Repair{}, err
	}
	return m.reclaim(dryRun), nil
}

// reclaim is Reclaim on m's mutex.
func (m *Mutex) reclaim(dryRun bool) Repair {
	var rep Repair
	if o := m.e.Writer.Load(); isHandoff(o) && handoffExpired(o) {
		// Nobody is coming for it: writers that wait take a handoff
		// within microseconds (see handoffExpiry).
		rep.Handoff = dryRun || m.releaseStaleHandoff(o)
	}
	if o := m.deadHolder(func() uint64 { return writerID(m.e.Writer.Load()) }); o != 0 {
		if dryRun || m.releaseDeadWriter() {
			rep.Writer = o
		}
	}
	if o := m.deadHolder(m.e.Upgrader.Load); o != 0 {
		if dryRun {
			rep.Upgrader = o
		} else if released, _ := m.releaseDeadUpgrader(); released {
			rep.Upgrader = o
		}
	}
	for j, r := range m.readers {
		if dryRun {
			if o := m.deadHolder(r.Owner.Load); o != 0 {
				rep.Readers = append(rep.Readers, ReaderStatus{Record: j, Owner: o, Count: r.Count.Load()})
			}
		} else if o, n, freed := m.freeDeadRecord(r); freed {
			rep.Readers = append(rep.Readers, ReaderStatus{Record: j, Owner: o, Count: n})
		}
	}
	if !dryRun && len(rep.Readers) > 0 && m.e.State.Load()&blockReaders != 0 {
		m.wake(m.uniqueGate())
	}
	return rep
}

// deadHolder is the identity that load reads (a holder's word) if it is a
// dead process's that still has the word, or 0 (see diedHolding).
func (m *Mutex) deadHolder(load func() uint64) uint64 {
	if o := load(); o != 0 && m.diedHolding(o, func() bool { return load() == o }) {
		return o
	}
	return 0
}

// diedHolding reports whether process id is dead and, asked after that
// verdict, still reports true: id still has what the caller saw it have.
// The verdict is on the process, not on the word the caller loaded before
// it: the process may have let the word go (a release, a forcer's give-
// back) and exited in between, and a zombie reads as dead. A dead one's
// word is final, so a word that still names it after the verdict is the
// dead one's for good; acted on without that second look, a repair marked
// a clean release inconsistent, and a release stopped waiting for a word
// given back to it (a wedge).
func (m *Mutex) diedHolding(id uint64, still func() bool) bool {
	return !m.alive(id) && still()
}

// Reclaim is the package's Reclaim of the handle's mutex (not a dry run),
// for a holder that has only the handle, such as coro's adapters. Its own
// holds are live and stay. As for an acquisition (checkOpen),
// shm.ErrClosed once the segment is closed, whether the handle is or not,
// else ErrClosed if the handle is.
func (m *Mutex) Reclaim() (Repair, error) {
	if m.segClosed() {
		return Repair{}, shm.ErrClosed
	}
	if m.closed.Load() {
		return Repair{}, ErrClosed
	}
	return Reclaim(m.seg, m.index, false)
}
