package txn

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// Space is one process's handle on the transactions of a segment. It owns
// a row of the segment's pin table: every pin taken through it is counted
// there, so when this process dies its pins stop counting. Open it once per
// process (or more: each handle has its own row) and Close it when done.
// Its methods may be called from any number of goroutines; goroutines that
// pin a great deal in parallel contend for the row's cache line, and may
// each open a Space of their own (BenchmarkPin, txn-space-each), as long
// as the segment's rows (at most 64) last.
type Space struct {
	seg   *shm.Segment
	geo   geometry
	recs  []*record
	row   int
	ident uint64           // this process's packed identity, in the row
	ctrs  []*atomic.Uint32 // this row's counters: nrec per-txn, then the global one
	bar   *barrierWords

	alloc *spinlock.Lock

	mu      sync.Mutex
	barLock *spinlock.Lock // opened on first use
	closed  atomic.Bool
	// closing counts the closes (closeTxn, closeBarrier) running through
	// this handle: their end sequences take promotion pins in its row, so
	// Close must not give the row up under them. A close counts itself
	// before it checks closed, Close raises closed before it reads the
	// count: of the two, at least one sees the other.
	closing atomic.Int32
}

// Open returns a handle on the transactions of seg, which must be writable
// (else shm.ErrReadOnly) and have room for a pin row (every row taken by a
// live process is ErrNoPinRow) and two owner slots for package txn's locks.
func Open(seg *shm.Segment) (*Space, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	if seg.Closed() {
		return nil, fmt.Errorf("txn: open %s: %w", seg.Path(), shm.ErrClosed)
	}
	if seg.ReadOnly() {
		return nil, fmt.Errorf("txn: open %s: %w", seg.Path(), shm.ErrReadOnly)
	}
	geo, err := geometryOf(seg)
	if err != nil {
		return nil, err
	}
	s := &Space{seg: seg, geo: geo, ident: proc.Self().Pack(), bar: geo.barrier()}
	s.recs = make([]*record, geo.nrec)
	for i := range s.recs {
		s.recs[i] = geo.record(i)
	}
	s.alloc, err = spinlock.OpenAt(seg, s.geo.lockSlot(offAlloc), spinlock.PIDTID)
	if err != nil {
		return nil, fmt.Errorf("txn: open: allocator lock: %w", err)
	}
	if err := s.claimRow(); err != nil {
		return nil, err
	}
	if testHookUnchecked != nil {
		testHookUnchecked(true) // a Close from here on leaves a Space that Close gives its row back
	}
	return s, nil
}

// claimRow takes a free pin row, or the row of a dead process. A dead
// process's counters are zeroed only after the row is ours (nobody else
// writes a row's counters but its user); until then a closer counts them
// as pins of a live process and waits a little longer, which the wake
// below ends.
//
// A free row (one that Space.Close gave up) is claimed with its counters
// as they are: they count nothing but the increments of pins in flight in
// the process that closed it, which saw the Space closed and are backing
// out. Their decrements come to this row, and zeroing the increments first
// would wrap the counters (pins of a live owner, for ever). A free row
// with such an increment is taken only when no other row is left: if the
// process that backs out dies before it does, the increment stays, and it
// is better left in a row nobody uses.
func (s *Space) claimRow() error {
	for _, busyFree := range [...]bool{false, true} {
		for row := range s.geo.rows {
			w := s.geo.rowIdent(row)
			old := w.Load()
			if old != 0 && s.seg.OwnerAlive(old) {
				continue
			}
			if old == 0 && !busyFree && s.rowCounts(row) {
				continue
			}
			if !w.CompareAndSwap(old, s.ident) {
				continue
			}
			s.row = row
			s.ctrs = make([]*atomic.Uint32, s.geo.nrec+1)
			dirty := false
			for i := range s.ctrs {
				s.ctrs[i] = s.geo.counter(row, i)
				if old != 0 && s.ctrs[i].Swap(0) != 0 {
					dirty = true
				}
			}
			if dirty {
				s.wakeClosers()
			}
			return nil
		}
	}
	return ErrNoPinRow
}

// rowCounts reports whether any of row's counters is not 0.
func (s *Space) rowCounts(row int) bool {
	for i := range s.geo.nrec + 1 {
		if s.geo.counter(row, i).Load() != 0 {
			return true
		}
	}
	return false
}

// wakeClosers wakes whoever waits for pins to drain anywhere.
func (s *Space) wakeClosers() {
	for _, r := range s.recs {
		if ctlEnding(r.Ctl.Load()) {
			wake(drain{&r.Drain, &r.Sleepers})
		}
	}
	if s.bar.Leader.Load() != 0 {
		wake(drain{&s.bar.Drain, &s.bar.Sleepers})
	}
}

// wake bumps a drain word and wakes its sleepers, if any: a sleeper
// registers before it reads the word, so one that registered after
// sleepers.WakeAll looked reads the bumped word and does not sleep. The
// Sleepers words are internal/sleepers words, so the registration of a
// sleeper killed while asleep does not cost every later wake a system call.
func wake(d drain) {
	d.seq.Add(1)
	sleepers.WakeAll(d.sleepers, d.seq)
}

// testHookRowChecked runs in Space.Close between its check of the row's
// counters and its giving up of the row (export_test.go).
var testHookRowChecked func()

// Close gives up the handle's pin row, also after the segment's Close.
// ErrPinsHeld, changing nothing, if pins taken through it are still held
// (release them: Pin.Release works after the segment's Close too) or a
// close through it (RequestCloseAndWait, Barrier.Close, Reclaim) is in
// progress, whose end sequence pins the destinations of its promotions;
// ErrSpaceClosed the second time; ErrInvalid for a Space not made by Open.
//
// The closed flag goes up before the counters are checked, and a pin
// checks the flag after its increment, so that either the pin sees the
// flag and backs out or Close sees the pin and leaves the row alone: a pin
// is never held in a row given up (which another process may take). A
// back-out may still reach the row after Close gave it up; claimRow leaves
// a given-up row's counters alone, so it nets to zero there.
func (s *Space) Close() error {
	if s == nil || s.seg == nil {
		return s.usable() // ErrInvalid: it has no row to give up
	}
	if !s.closed.CompareAndSwap(false, true) {
		return ErrSpaceClosed
	}
	if s.closing.Load() != 0 {
		s.closed.Store(false)
		return ErrPinsHeld
	}
	for _, c := range s.ctrs {
		if c.Load() != 0 {
			s.closed.Store(false)
			return ErrPinsHeld
		}
	}
	if testHookRowChecked != nil {
		testHookRowChecked()
	}
	s.geo.rowIdent(s.row).CompareAndSwap(s.ident, 0)
	return nil
}

// barrierLock returns the barrier leader lock, claiming it on first use.
func (s *Space) barrierLock() (*spinlock.Lock, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.barLock == nil {
		l, err := spinlock.OpenAt(s.seg, s.geo.lockSlot(offBarLock), spinlock.PIDTID)
		if err != nil {
			return nil, fmt.Errorf("txn: barrier lock: %w", err)
		}
		s.barLock = l
	}
	return s.barLock, nil
}

// usable is the check at the start of every operation of s but the
// releases: shm.ErrClosed once the segment is closed (shm.Segment.Close),
// ErrSpaceClosed once s is.
func (s *Space) usable() error {
	if s == nil || s.seg == nil {
		return fmt.Errorf("%w: no Space (nil, or not made by Open)", ErrInvalid)
	}
	if s.seg.Closed() {
		return shm.ErrClosed
	}
	if s.closed.Load() {
		return ErrSpaceClosed
	}
	return nil
}

// unlessClosed is err, or shm.ErrClosed once the segment is closed: an
// operation that fails after the segment's Close came under it reports the
// Close (it changed nothing).
func (s *Space) unlessClosed(err error) error {
	if s.seg.Closed() {
		return shm.ErrClosed
	}
	return err
}

// Records is the number of transaction records in the segment.
func (s *Space) Records() int { return s.geo.nrec }

// Segment is the segment s works on.
func (s *Space) Segment() *shm.Segment { return s.seg }

// refErr explains why ctl c does not admit a pin for generation gen.
func refErr(c uint64, gen uint32) error {
	switch {
	case gen == 0:
		return ErrBadRef
	case ctlGen(c) != gen:
		return ErrStale
	case ctlEnding(c):
		return ErrClosing
	case ctlState(c) == stateOpen:
		return nil
	}
	return ErrClosed
}
