package txn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/spinlock"
)

// maxTxnArena is the largest arena of one transaction: offsets in a Ref
// are 32 bits.
const maxTxnArena = math.MaxUint32 / layout.ArenaUnit * layout.ArenaUnit

// BeginOptions configure a new transaction.
type BeginOptions struct {
	// ArenaBytes is the size of the transaction's arena, rounded up to
	// layout.ArenaUnit. Zero means an equal share per record of the txn
	// arena (layout.Options.TxnArenaBytes, less its control words and pin
	// rows), at least one unit; the segment's data area, where data regions
	// live, plays no part.
	ArenaBytes int64
	// Barrier makes the transaction one that closes through the global
	// barrier: its pins are global pins and it is closed by
	// Barrier.Close, not RequestCloseAndWait.
	Barrier bool
}

// Txn is the owner's handle on one transaction: it allocates objects,
// links references to other transactions' objects, and closes it. Its
// methods may be called from several goroutines of the owner.
type Txn struct {
	s       *Space
	idx     uint32
	gen     uint32
	rec     *record
	start   uint64 // first byte of the arena in the region
	size    uint64 // arena bytes
	barrier bool
	own     atomic.Int32 // pins taken through this handle and not released
	mu      sync.Mutex   // serializes Alloc and Link (the bump pointer)
}

// Begin starts a transaction: it takes a free record and the first free
// stretch of arena large enough (first fit), under the allocator lock.
// ErrNoRecord if every record is in use, ErrArenaFull if no stretch is
// large enough, ErrInvalid for a negative size; nothing changes then.
func (s *Space) Begin(opts BeginOptions) (*Txn, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if opts.ArenaBytes < 0 {
		return nil, fmt.Errorf("%w: arena of %d bytes", ErrInvalid, opts.ArenaBytes)
	}
	units := uint64(opts.ArenaBytes+layout.ArenaUnit-1) / layout.ArenaUnit
	if uint64(opts.ArenaBytes) > maxTxnArena {
		return nil, fmt.Errorf("%w: arena of %d bytes", ErrArenaFull, opts.ArenaBytes)
	}
	if units == 0 {
		units = max(1, s.geo.units/uint64(s.geo.nrec))
	}
	// A holder per call: goroutines sharing one would count as one
	// recursive owner, and all enter.
	var g spinlock.Guard
	if err := g.Lock(s.alloc, spinlock.NewHolder()); err != nil {
		return nil, fmt.Errorf("txn: begin: allocator lock: %w", err)
	}
	defer g.Release()
	// A holder that died here left at most a record with its arena set
	// but its Ctl still free: nothing to repair (see ctlWord).

	idx := -1
	type span struct{ first, n uint64 }
	var used []span
	for i, r := range s.recs {
		c := r.Ctl.Load()
		if ctlLive(c) {
			a := r.Arena.Load()
			used = append(used, span{a & 0xffff_ffff, a >> 32})
		} else if idx < 0 {
			idx = i
		}
	}
	if idx < 0 {
		return nil, ErrNoRecord
	}
	slices.SortFunc(used, func(a, b span) int { return int(a.first) - int(b.first) })
	first, found := uint64(0), false
	for _, u := range used {
		if u.first >= first+units {
			found = true
			break
		}
		first = max(first, u.first+u.n)
	}
	if !found && first+units <= s.geo.units {
		found = true
	}
	if !found {
		return nil, fmt.Errorf("%w: no %d free units", ErrArenaFull, units)
	}

	rec := s.recs[idx]
	gen := ctlGen(rec.Ctl.Load()) + 1
	if gen == 0 {
		gen = 1
	}
	rec.Owner.Store(s.ident)
	rec.Arena.Store(first | units<<32)
	rec.Used.Store(0)
	rec.Objs.Store(0)
	rec.Promos.Store(0)
	rec.NPromos.Store(0)
	rec.Promoted.Store(0)
	rec.Destroyed.Store(0)
	var flags uint64
	if opts.Barrier {
		flags = flagBarrier
	}
	rec.Ctl.Store(ctlWord(stateOpen, gen, flags)) // publishes the rest
	if testHookUnchecked != nil {
		testHookUnchecked(true) // a Close from here on leaves the transaction begun, in the file
	}
	start, size, _ := s.geo.arenaBounds(first | units<<32)
	return &Txn{s: s, idx: uint32(idx), gen: gen, rec: rec, start: start, size: size, barrier: opts.Barrier}, nil
}

// Index is the transaction's record index.
func (t *Txn) Index() int { return int(t.idx) }

// Gen is the generation of the record for this transaction.
func (t *Txn) Gen() uint32 { return t.gen }

// Barrier reports whether the transaction closes through the barrier.
func (t *Txn) Barrier() bool { return t.barrier }

// ArenaSize is the size of the transaction's arena in bytes.
func (t *Txn) ArenaSize() int { return int(t.size) }

// Used is the number of arena bytes allocated (0 once the segment is
// closed: its tables then read zeros; 0 too once the record is reused by
// another transaction).
func (t *Txn) Used() int {
	n := t.rec.Used.Load()
	// Read after the count: a reuse stores Used before its generation, and
	// allocates only after it.
	if ctlGen(t.rec.Ctl.Load()) != t.gen {
		return 0
	}
	return int(n)
}

// Open reports whether the transaction is still open (false once the
// segment is closed, whatever the file says).
func (t *Txn) Open() bool { return refErr(t.rec.Ctl.Load()&^flagBarrier, t.gen) == nil }

// TryPin pins the transaction through its owner's handle. The owner's
// pins are counted apart so that RequestCloseAndWait can tell that its
// caller holds one (ErrCloserPinned) rather than wait for itself. It
// fails as Space.TryPin does, but with ErrClosed, as Alloc, for a record
// reused since: to its handle, the transaction is closed.
func (t *Txn) TryPin() (Pin, error) {
	var p Pin
	if err := t.s.pin(&p, t.idx, t.gen); err != nil {
		return p, ownErr(err)
	}
	t.own.Add(1)
	p.own = &t.own
	return p, nil
}

// Borrow is Space.Borrow through the owner's handle: the pins it takes on
// this transaction (or, for a barrier-mode one, global pins) count as the
// handle's, so that RequestCloseAndWait and Barrier.Close refuse with
// ErrCloserPinned while the borrow is held instead of waiting for it.
func (t *Txn) Borrow(ctx context.Context, r Ref) (SRef, error) {
	var b SRef
	if err := t.s.borrow(ctx, r, &b); err != nil {
		return b, err
	}
	for i := range b.pins {
		p := &b.pins[i]
		if p.Held() && (p.rec == t.rec || (p.bar != nil && t.barrier)) {
			t.own.Add(1)
			p.own = &t.own
		}
	}
	return b, nil
}

// Alloc copies data into a new object of the transaction and returns its
// Ref. ErrArenaFull, changing nothing, if it does not fit; ErrClosing or
// ErrClosed once the close began.
func (t *Txn) Alloc(data []byte) (Ref, error) {
	if uint64(len(data)) > t.size {
		return Ref{}, ErrArenaFull
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var p Pin
	off, err := t.reserve(&p, uint64(len(data)))
	if err != nil {
		return Ref{}, err
	}
	defer p.Release()
	copy(t.s.geo.region[t.start+off+headerSize:], data)
	t.publish(off, kindObject, uint32(len(data)), roundUp(uint64(len(data)), objAlign))
	if testHookUnchecked != nil {
		testHookUnchecked(true)
	}
	return Ref{Txn: t.idx, Gen: t.gen, Off: uint32(off)}, nil
}

// reserve finds room for an object with n bytes after its header, and pins
// the transaction in p (a per-transaction pin whatever its mode) for the
// caller to hold while it writes there: a close from another goroutine of
// the owner waits for the write instead of freeing the arena under it.
func (t *Txn) reserve(p *Pin, n uint64) (uint64, error) {
	if err := t.s.usable(); err != nil {
		return 0, err
	}
	c := t.rec.Ctl.Load()
	if err := refErr(c&^flagBarrier, t.gen); err != nil {
		return 0, t.s.unlessClosed(ownErr(err))
	}
	if !t.s.pinTxn(p, int(t.idx), c) {
		if err := t.s.usable(); err != nil {
			return 0, err
		}
		return 0, ErrClosing
	}
	off := uint64(t.rec.Used.Load())
	if off%objAlign != 0 || off > t.size {
		p.Release()
		return 0, fmt.Errorf("%w: bump pointer %d in an arena of %d bytes", ErrCorrupt, off, t.size)
	}
	if off+headerSize+roundUp(n, objAlign) > t.size {
		p.Release()
		return 0, ErrArenaFull
	}
	return off, nil
}

// publish writes an object's header and then moves the bump pointer past
// it: a reader that loads Used sees the whole object.
func (t *Txn) publish(off uint64, kind uint64, size uint32, capacity uint64) {
	h := t.s.header(t.start + off)
	h.Word.Store(headerWord(kind, objLive, size))
	h.Cap.Store(uint32(capacity))
	h.Check.Store(objMagic ^ uint32(off))
	t.rec.Objs.Add(1)
	t.rec.Used.Store(uint32(off + headerSize + capacity))
}

// Link stores a reference to target, an object of another transaction,
// in this one, and returns the Ref of the cell that holds it: the
// cross-transaction assignment, which registers a promotion here. When
// the target's transaction closes first, it copies the object into the
// room the cell reserved and rebinds the cell, so Borrow of the cell keeps
// working. A target of this transaction is returned as it is. ErrNotObject
// for a target that is itself a cell; the target's transaction must be
// open (ErrClosing, ErrClosed, ErrStale otherwise).
//
// The copy is made also while this transaction is closing, since its close
// may yet be cancelled; only once it is past that point (Finishing, see
// StateFinishing) does the source skip the copy, the cell ending with it.
func (t *Txn) Link(target Ref) (Ref, error) {
	if err := t.s.usable(); err != nil {
		return Ref{}, err
	}
	if int(target.Txn) >= len(t.s.recs) {
		return Ref{}, ErrBadRef
	}
	// Pin the source per transaction whatever its mode, so that its close
	// (which would skip a cell registered too late) waits for this Link.
	// This transaction's own objects too: a global pin would fail while
	// the barrier is up for other transactions.
	var p Pin
	c := t.s.recs[target.Txn].Ctl.Load()
	if err := refErr(c&^flagBarrier, target.Gen); err != nil {
		return Ref{}, t.s.unlessClosed(err)
	}
	if !t.s.pinTxn(&p, int(target.Txn), c) {
		if err := t.s.usable(); err != nil {
			return Ref{}, err
		}
		return Ref{}, ErrClosing
	}
	defer p.Release()
	kind, data, _, err := t.s.object(target)
	if err != nil {
		return Ref{}, err
	}
	if target.Txn == t.idx && target.Gen == t.gen {
		return target, nil
	}
	if kind != kindObject {
		return Ref{}, ErrNotObject
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := uint64(len(data))
	var self Pin
	off, err := t.reserve(&self, cellBodySize+n)
	if err != nil {
		return Ref{}, err
	}
	defer self.Release()
	cb := t.s.cell(t.start + off + headerSize)
	cb.State.Store(cellOriginal)
	cb.Next.Store(t.rec.Promos.Load())
	cb.TTxn.Store(target.Txn)
	cb.TGen.Store(target.Gen)
	cb.TOff.Store(target.Off)
	cb.TSize.Store(uint32(n))
	t.publish(off, kindCell, uint32(n), cellBodySize+roundUp(n, objAlign))
	t.rec.NPromos.Add(1)
	t.rec.Promos.Store(uint32(off) + 1)
	if testHookUnchecked != nil {
		testHookUnchecked(true)
	}
	return Ref{Txn: t.idx, Gen: t.gen, Off: uint32(off)}, nil
}

// RequestCloseAndWait closes the transaction: it flips it to Closing (new
// pins fail), sleeps until every pin of every live process is released,
// then turns it Finishing, finalizes promotions, destroys the unpromoted
// objects, poisons and frees the arena and marks it Closed (see
// Space.closeTxn). A ctx done while it waits for pins reopens the
// transaction and returns ctx.Err(); once the pins are drained the close
// completes whatever ctx does. For a barrier-mode transaction it is
// ErrWrongMode (use Barrier.Close).
//
// The closer must not hold a pin on the transaction: ErrCloserPinned,
// changing nothing, if pins taken through this handle (Txn.TryPin,
// Txn.Borrow) are held. Pins taken through the Space cannot be told apart
// from other goroutines' pins: a closer holding one waits for itself until
// ctx is done.
//
// A close asleep for pins when the segment is closed returns shm.ErrClosed
// at its next liveness check, having reopened the transaction; one past
// the point of no return (Finishing) completes. A close begun after the
// segment's Close is a release of this process's transaction, and runs to
// its end.
func (t *Txn) RequestCloseAndWait(ctx context.Context) error {
	if t.barrier {
		return ErrWrongMode
	}
	if t.own.Load() != 0 {
		return ErrCloserPinned
	}
	return ownErr(t.s.closeTxn(ctx, int(t.idx), t.gen, false))
}

// ownErr is err as the owner's handle reports it: its record reused means,
// for the handle, that its transaction is closed.
func ownErr(err error) error {
	if errors.Is(err, ErrStale) {
		return ErrClosed
	}
	return err
}

func (s *Space) header(off uint64) *objHeader {
	h, err := memview.At[objHeader](s.geo.region, off)
	if err != nil {
		panic("txn: object header view: " + err.Error()) // offsets are checked by the callers
	}
	return h
}

func (s *Space) cell(off uint64) *cellBody {
	c, err := memview.At[cellBody](s.geo.region, off)
	if err != nil {
		panic("txn: cell view: " + err.Error())
	}
	return c
}
