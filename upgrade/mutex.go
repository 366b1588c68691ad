package upgrade

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// Mutex is a handle on one upgrade mutex of a segment. Make one with Open
// or Named; any number of handles, in any processes, may share a mutex.
//
// A handle is one holder: its goroutines share its holds, as goroutines
// share a sync.RWMutex (any of them may unlock what another locked), and
// its shared holds are counted together. A handle that holds the lock in
// one mode and asks for a conflicting one gets ErrHeld instead of a
// deadlock; a handle that waits for a shared hold while another goroutine
// of it holds one is not protected from a waiting writer (as with
// sync.RWMutex, do not lock shared recursively). Use one handle per
// goroutine that needs a hold of its own.
//
// The n'th exclusive release (Unlock, UnlockUpgrade after UniqueToUpgrade,
// the downgrades) synchronizes before the acquisitions it lets in; every
// shared release synchronizes before the next unique acquisition, and
// every release of the upgrade lock before the next upgrade and unique
// acquisitions. The race detector is told so too, so that goroutines
// of one process may guard Go data with the mutex under -race.
//
// After the segment's Close every acquisition (and downgrade) returns
// shm.ErrClosed and changes nothing in the segment's file; an acquisition
// in flight either completes, its hold real in the file, or returns
// shm.ErrClosed having left nothing there; and the releases (Unlock,
// UnlockShared, UnlockUpgrade, Close) still release in the file, so that
// no hold outlives its holder's use of it (see shm.Segment.Close).
type Mutex struct {
	e       *layout.UpgradeEntry
	readers []*layout.ReaderRecord // the mutex's reader records
	seg     *shm.Segment           // whose Close ends the handle
	index   int
	pid     uint64 // packed identity of this process
	tid     uint64 // this handle's holder id
	alive   func(owner uint64) bool

	rec    atomic.Pointer[layout.ReaderRecord] // this handle's record, once claimed
	recMu  sync.Mutex                          // serialises claiming it
	closed atomic.Bool
	named  bool // made by Named: Close drops its reference to the claim

	reclaimed atomic.Bool   // the current writer or upgrade hold was taken from the dead
	repairs   atomic.Uint64 // dead holders this handle took over or released

	stats     *layout.LockStats // the mutex's contention counters; nil if the segment has none
	waitStart atomic.Int64      // CLOCK_MONOTONIC when the current acquisition began to wait; 0 if it has not (stats.go)
}

// Open returns a handle on upgrade mutex index of seg, which must be
// writable (shm.ErrReadOnly otherwise: Inspect reads a read-only one).
func Open(seg *shm.Segment, index int) (*Mutex, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	if seg.ReadOnly() {
		return nil, fmt.Errorf("upgrade: open mutex %d: %w", index, shm.ErrReadOnly)
	}
	return open(seg, index)
}

// open is Open for a segment that may be read-only, for a handle that only
// reads (Reclaim's dry run).
func open(seg *shm.Segment, index int) (*Mutex, error) {
	e, err := seg.Upgrade(index)
	if err != nil {
		return nil, err
	}
	readers, err := seg.UpgradeReaders(index)
	if err != nil {
		return nil, err
	}
	m := &Mutex{e: e, readers: readers, seg: seg, index: index,
		pid: proc.Self().Pack(), tid: proc.HolderID(), alive: seg.OwnerAlive}
	if !seg.ReadOnly() { // a read-only handle only reads: it must not count
		m.stats = seg.LockStats(layout.KindUpgrades, index)
	}
	return m, nil
}

// Named claims the upgrade mutex called name in seg (see
// shm.Segment.Claim) and returns a handle on it. An invalid name, the
// empty one included, is a layout.ErrBadName error and changes nothing
// (for a mutex of its own, Claim one unnamed and Open it).
func Named(seg *shm.Segment, name string) (*Mutex, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	if err := layout.CheckName(name); err != nil {
		return nil, fmt.Errorf("upgrade: %w", err)
	}
	i, err := seg.Claim(layout.KindUpgrades, name)
	if err != nil {
		return nil, err
	}
	m, err := Open(seg, i)
	if err != nil {
		_ = seg.Release(layout.KindUpgrades, i)
		return nil, err
	}
	m.named = true
	return m, nil
}

// Index is the mutex's index in the segment's upgrade table.
func (m *Mutex) Index() int { return m.index }

// Reclaimed reports whether the handle's current unique or upgrade hold was
// taken over from a holder that died: the data may be half-updated.
func (m *Mutex) Reclaimed() bool { return m.reclaimed.Load() }

// Repairs is the number of dead holders (writers, upgrade holders, reader
// processes) this handle has taken over or released while it waited.
func (m *Mutex) Repairs() uint64 { return m.repairs.Load() }

// Generation is bumped by the end of every unique or upgrade hold (a
// release, a downgrade from the unique lock, a takeover from a dead
// holder, a forced unlock): a holder may keep it as a fencing token, and
// every later holder sees a greater one. An upgrade holder's
// UniqueToUpgrade does not bump it: its holder keeps the upgrade lock, and
// the token with it, until the release that ends that. It is 0 once the
// segment is closed.
func (m *Mutex) Generation() uint64 {
	if m.segClosed() {
		return 0
	}
	return m.e.Generation.Load()
}

// segClosed reports whether the handle's segment has been closed: from
// then on every acquisition fails with shm.ErrClosed.
func (m *Mutex) segClosed() bool { return m.seg.Closed() }

// Close releases the handle's reader record and, for a handle made by
// Named, its reference to the mutex's claim (so that a mutex nobody names
// any more, once free, can be claimed for another name); also after the
// segment's Close. ErrHeld, leaving the handle open, if it still holds the
// lock in any mode; ErrClosed the second time. A goroutine of the handle
// that waits for a shared hold meanwhile holds nothing: it gets ErrClosed
// when readers may come in again.
func (m *Mutex) Close() error {
	m.recMu.Lock()
	defer m.recMu.Unlock()
	if m.closed.Load() {
		return ErrClosed
	}
	r := m.rec.Load()
	if r != nil && r.Count.Load() != 0 || m.holdsWriter() || m.holdsUpgrader() {
		return ErrHeld
	}
	m.closed.Store(true)
	if r != nil {
		r.Owner.CompareAndSwap(m.pid, 0) // count is 0: the record is free
		m.rec.Store(nil)
	}
	if m.named {
		return m.seg.Release(layout.KindUpgrades, m.index)
	}
	return nil
}

// record returns the handle's reader record, claiming one the first time.
func (m *Mutex) record() (*layout.ReaderRecord, error) {
	if r := m.rec.Load(); r != nil {
		return r, nil
	}
	m.recMu.Lock()
	defer m.recMu.Unlock()
	if m.closed.Load() {
		return nil, ErrClosed
	}
	if m.segClosed() {
		return nil, shm.ErrClosed
	}
	if r := m.rec.Load(); r != nil {
		return r, nil
	}
	r := m.claimRecord()
	if r == nil {
		return nil, ErrTooManyReaders
	}
	m.rec.Store(r)
	return r, nil
}

// claimRecord takes a free record, or failing that one of a dead process.
// Free records are tried one per cache line first, so that the readers of
// different processes do not share a line while there is room.
func (m *Mutex) claimRecord() *layout.ReaderRecord {
	n := len(m.readers)
	for first := range recordsPerLine {
		for j := first; j < n; j += recordsPerLine {
			r := m.readers[j]
			if r.Owner.Load() == 0 && r.Owner.CompareAndSwap(0, m.pid) {
				r.Count.Store(0) // a free record's count is 0 already
				m.markRecord(j)
				return r
			}
		}
	}
	for j, r := range m.readers {
		if o := r.Owner.Load(); o != 0 && !m.alive(o) && r.Owner.CompareAndSwap(o, m.pid) {
			r.Count.Store(0) // the dead process's holds go with it
			m.repairs.Add(1)
			m.markRecord(j) // set already by the dead owner's claim
			return r
		}
	}
	return nil
}

// markRecord sets record j's bit in the mask of records in use.
func (m *Mutex) markRecord(j int) {
	bit := uint32(1) << (j % maskBits)
	if mask := &m.readers[0].Pad; mask.Load()&bit == 0 {
		mask.Or(bit)
	}
}

// setReclaimed records whether the current hold was taken over from the
// dead, without a locked instruction when that does not change.
func (m *Mutex) setReclaimed(v bool) {
	if m.reclaimed.Load() != v {
		m.reclaimed.Store(v)
	}
}

func (m *Mutex) holdsWriter() bool { return m.holdsWriterWord(m.e.Writer.Load()) }

// holdsWriterWord is holdsWriter for the Writer word w, as loaded.
func (m *Mutex) holdsWriterWord(w uint64) bool {
	return w&^(writerHungry|writerUnique) == m.pid && m.e.WriterTID.Load() == m.tid
}

func (m *Mutex) holdsUpgrader() bool {
	return m.e.Upgrader.Load() == m.pid && m.e.UpgraderTID.Load() == m.tid
}

// sharedHolds is the number of shared holds of this handle.
func (m *Mutex) sharedHolds() uint32 {
	if r := m.rec.Load(); r != nil {
		return r.Count.Load()
	}
	return 0
}
