package txn

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// The record word Ctl holds a transaction's state, its mode and its
// generation, so that one load tells a pinner whether the transaction it
// names is still open and still the same use of the record:
//
//	bits  0..7   state: stateFree, stateOpen, stateClosing, stateFinishing,
//	             stateClosed
//	bit   8      flagBarrier: closed through the global barrier
//	bits 32..63  generation: bumped by every Begin that takes the record; never 0
//
// Legal transitions, each by one store or CAS of the whole word:
//
//	Free/Closed(g) -> Open(g+1)      Begin, under the allocator lock
//	Open(g)        -> Closing(g)     the closer (owner or reclaimer)
//	Closing(g)     -> Open(g)        a close cancelled by its context
//	Closing(g)     -> Finishing(g)   the closer, once it counted no pin
//	Finishing(g)   -> Closed(g)      the end of a close, after the arena is poisoned
//
// Closing and Finishing both refuse new pins (ErrClosing). They differ in
// what may still come: a Closing transaction may be reopened by its
// closer's context, so another closer that promotes into it pins it and
// copies (finalizePromotions); a Finishing one is past the point of no
// return, its end sequence runs or is about to, and a promoter skips it:
// its cells end with it. A promoter's pin taken while the record was
// Closing may still be held when the closer flips it to Finishing (the
// closer counted before the increment); the closer then waits for it, in
// Finishing, without a context: promoters never block while they hold
// their pins, so the wait is short and cannot be part of a cycle. Pins
// never succeed on a Finishing record, so nothing else is waited for.
//
// A Ref carries the generation it was made under: any other generation in
// Ctl means the record was reused (ErrStale); the same generation in state
// Closed means the transaction ended (ErrClosed).
const (
	stateFree      uint64 = 0 // never used since the segment was created
	stateOpen      uint64 = 1
	stateClosing   uint64 = 2
	stateClosed    uint64 = 3
	stateFinishing uint64 = 4 // drained; the end sequence runs and cannot be cancelled
	stateMask      uint64 = 0xff

	flagBarrier uint64 = 1 << 8
	genShift           = 32
)

func ctlWord(state uint64, gen uint32, flags uint64) uint64 {
	return state | flags | uint64(gen)<<genShift
}

func ctlState(c uint64) uint64 { return c & stateMask }
func ctlGen(c uint64) uint32   { return uint32(c >> genShift) }

// ctlEnding reports whether c is Closing or Finishing: new pins fail, and a
// closer may be waiting for the pins left to be released.
func ctlEnding(c uint64) bool {
	st := ctlState(c)
	return st == stateClosing || st == stateFinishing
}

// ctlLive reports whether c is a transaction in use (Open, Closing or
// Finishing): its arena is taken.
func ctlLive(c uint64) bool { return ctlState(c) == stateOpen || ctlEnding(c) }

// withState is c with its state replaced.
func withState(c, state uint64) uint64 { return c&^stateMask | state }

// record is one 128-byte entry of the segment's txn record table
// (layout.KindTxnRecords). Every word is reached through sync/atomic.
// Words marked "owner" are written only by the transaction's owner (or the
// process that reclaimed it) and read by anyone.
type record struct {
	Ctl   atomic.Uint64 // 0x00 state, flags, generation (see above)
	Owner atomic.Uint64 // 0x08 packed identity (internal/proc) of the owner; the closer
	// 0x10 the arena: first byte (low 32 bits, in units of layout.ArenaUnit
	// from the start of the data area) and length in units (high 32 bits).
	// Written by Begin before Ctl turns Open; meaningful only while Open,
	// Closing or Finishing.
	Arena atomic.Uint64
	Used  atomic.Uint32 // 0x18 owner: bytes of the arena allocated (bump pointer)
	Objs  atomic.Uint32 // 0x1C owner: objects and cells allocated
	// 0x20 the closer's futex word: bumped by every pin release while the
	// transaction is Closing or Finishing and at the end of a close (or its
	// cancellation).
	Drain    atomic.Uint32
	Sleepers atomic.Uint32 // 0x24 goroutines asleep on Drain (closer, readers waiting for the end)
	// 0x28 head of the promotion list: offset+1, in this transaction's
	// arena, of the newest cell Link registered here; 0 for none. Each cell
	// holds the offset+1 of the one before.
	Promos    atomic.Uint32
	NPromos   atomic.Uint32 // 0x2C owner: cells registered (bounds a list walk)
	Promoted  atomic.Uint32 // 0x30 closer ledger: objects copied out to destinations at close
	Destroyed atomic.Uint32 // 0x34 closer ledger: objects destroyed unpromoted at close
	_         [72]byte      // 0x38..0x7F reserved, zero
}

var _ [layout.TxnRecordSize - unsafe.Sizeof(record{})]byte
var _ [unsafe.Sizeof(record{}) - layout.TxnRecordSize]byte
var _ [layout.TxnRecordOwner - unsafe.Offsetof(record{}.Owner)]byte
var _ [unsafe.Offsetof(record{}.Owner) - layout.TxnRecordOwner]byte
var _ [layout.TxnLeader - unsafe.Offsetof(barrierWords{}.Leader)]byte

// drainOf is the futex word and its sleeper count.
type drain struct {
	seq      *atomic.Uint32
	sleepers *atomic.Uint32
}

// The txn arena region (layout.KindTxnArena) starts with a control area
// that package txn owns, then the data area that Begin hands out:
//
//	0x00        barrier words (barrierWords, 64 bytes)
//	0x40        the allocator lock: an owner slot (32 bytes), pid/tid mode
//	0x60        the barrier leader lock: an owner slot (32 bytes), pid/tid mode
//	0x80        pin table: pinRows rows of rowSize bytes, one row per Space
//	            handle (per process, usually):
//	              +0   Ident u64: packed identity of the process using the
//	                   row; 0 free. A row whose process died is taken over by
//	                   the next Open, which zeroes its counters.
//	              +8   records x u32: pins this handle holds on each
//	                   transaction record (per-txn pins)
//	              +8+4*records  u32: global pins this handle holds
//	            rowSize is that rounded up to a cache line, so that the
//	            pinners of different processes never share a line.
//	dataStart   the data area: units of layout.ArenaUnit bytes, handed out to
//	            transactions first-fit.
//
// pinRows is layout.TxnMaxPinRows, or fewer if the table would take more
// than half of the region. All of it is zero in a new segment, which is a
// valid empty state: no rows in use, barrier down.
//
// The words that hold identities are named in package layout too (a reboot
// recovery marks them stale), and the pin table's geometry is computed there.
const (
	ctlAreaSize = layout.TxnCtlAreaSize
	offAlloc    = layout.TxnAllocLock   // the allocator lock's owner slot
	offBarLock  = layout.TxnBarrierLock // the barrier leader lock's
)

// barrierWords are the global barrier's shared state.
type barrierWords struct {
	// Leader is the packed identity of the process whose close holds the
	// barrier up; 0 when it is down. A leader that died leaves it up until
	// someone notices (pinners and the next leader clear it).
	Leader   atomic.Uint64
	Drain    atomic.Uint32 // futex word: bumped by global pin releases while the barrier is up
	Sleepers atomic.Uint32 // leaders asleep on Drain
	_        [48]byte
}

var _ [ctlAreaSize - unsafe.Sizeof(barrierWords{})]byte

// geometry is where everything of the txn tables is, computed the same way
// by every process from the segment's header.
type geometry struct {
	recs      []byte // the record table
	region    []byte // the whole txn arena region
	nrec      int
	rows      int    // pin rows
	rowSize   uint64 // bytes per pin row
	dataStart uint64 // offset of the data area in region
	units     uint64 // units in the data area
}

func geometryOf(seg *shm.Segment) (geometry, error) {
	recs, err := seg.Region(layout.KindTxnRecords)
	if err != nil {
		return geometry{}, err
	}
	region, err := seg.Region(layout.KindTxnArena)
	if err != nil {
		return geometry{}, err
	}
	g := geometry{recs: recs, region: region, nrec: len(recs) / layout.TxnRecordSize}
	if g.nrec == 0 {
		return geometry{}, fmt.Errorf("%w: no transaction records", ErrNoSpace)
	}
	size := uint64(len(region))
	if size < ctlAreaSize {
		return geometry{}, fmt.Errorf("%w: txn arena of %d bytes", ErrNoSpace, size)
	}
	g.rows, g.rowSize = layout.TxnPinRows(g.nrec, size)
	if g.rows < 1 {
		return geometry{}, fmt.Errorf("%w: txn arena of %d bytes has no room for a pin row of %d", ErrNoSpace, size, g.rowSize)
	}
	g.dataStart = roundUp(ctlAreaSize+uint64(g.rows)*g.rowSize, layout.ArenaUnit)
	if g.dataStart >= size {
		return geometry{}, fmt.Errorf("%w: txn arena of %d bytes", ErrNoSpace, size)
	}
	g.units = (size - g.dataStart) / layout.ArenaUnit
	return g, nil
}

func roundUp(n, to uint64) uint64 { return (n + to - 1) / to * to }

func (g *geometry) record(i int) *record {
	r, err := memview.At[record](g.recs, uint64(i)*layout.TxnRecordSize)
	if err != nil {
		panic("txn: record view: " + err.Error()) // geometryOf sized the table
	}
	return r
}

func (g *geometry) barrier() *barrierWords {
	b, err := memview.At[barrierWords](g.region, 0)
	if err != nil {
		panic("txn: barrier view: " + err.Error())
	}
	return b
}

func (g *geometry) rowOff(row int) uint64 { return ctlAreaSize + uint64(row)*g.rowSize }

// lockSlot is the owner slot at off of the control area (offAlloc,
// offBarLock).
func (g *geometry) lockSlot(off uint64) *layout.OwnerSlot {
	s, err := memview.At[layout.OwnerSlot](g.region, off)
	if err != nil {
		panic("txn: lock slot view: " + err.Error()) // geometryOf sized the area
	}
	return s
}

func (g *geometry) rowIdent(row int) *atomic.Uint64 {
	w, err := memview.Uint64(g.region, g.rowOff(row))
	if err != nil {
		panic("txn: pin row view: " + err.Error())
	}
	return w
}

// counter is row's pin counter for record rec, or its global counter for
// rec == nrec.
func (g *geometry) counter(row, rec int) *atomic.Uint32 {
	w, err := memview.Uint32(g.region, g.rowOff(row)+8+4*uint64(rec))
	if err != nil {
		panic("txn: pin counter view: " + err.Error())
	}
	return w
}

// arenaBounds decodes Record.Arena into byte offsets in region.
func (g *geometry) arenaBounds(a uint64) (start, size uint64, ok bool) {
	first, n := a&0xffff_ffff, a>>32
	if n == 0 || first+n > g.units {
		return 0, 0, false
	}
	return g.dataStart + first*layout.ArenaUnit, n * layout.ArenaUnit, true
}

// Objects in an arena. Each starts on a 16-byte boundary with a header:
//
//	+0  Word  u64: kind (bits 0..7), state (bits 8..15), data length (bits 32..63)
//	+8  Cap   u32: bytes after the header that belong to the object (walks use it)
//	+12 Check u32: objMagic ^ offset, so a Ref that does not point at a header
//	               is refused rather than read
//
// An object's data follows the header. A cell (the double-dipping
// indirection of a promotion) has a cellBody after its header, then room
// for the copy of its target.
const (
	objAlign   = 16
	headerSize = 16
	objMagic   = 0x7478_6f62 // "txob"

	kindObject uint64 = 1
	kindCell   uint64 = 2

	objLive      uint64 = 0
	objPromoted  uint64 = 1 // copied into a destination at its transaction's close
	objDestroyed uint64 = 2 // destroyed unpromoted at its transaction's close

	cellBodySize = 32
	cellOriginal = 0 // the cell refers to its target in the source transaction
	cellPromoted = 1 // the cell holds the target's copy, right after the body

	// poisonByte fills a freed arena, so that a use after free reads
	// something recognisable.
	poisonByte = 0xDB
)

type objHeader struct {
	Word  atomic.Uint64
	Cap   atomic.Uint32
	Check atomic.Uint32
}

func headerWord(kind, state uint64, size uint32) uint64 {
	return kind | state<<8 | uint64(size)<<32
}

func hdrKind(w uint64) uint64  { return w & 0xff }
func hdrState(w uint64) uint64 { return w >> 8 & 0xff }
func hdrSize(w uint64) uint32  { return uint32(w >> 32) }

// cellBody follows a cell's header. All of it but State is written once by
// Link before the cell is published on the promotion list.
type cellBody struct {
	State atomic.Uint32 // cellOriginal or cellPromoted (set by the source's closer)
	Next  atomic.Uint32 // offset+1 of the previous cell on the list; 0 at the end
	TTxn  atomic.Uint32 // the target: record index,
	TGen  atomic.Uint32 // generation,
	TOff  atomic.Uint32 // offset of its header,
	TSize atomic.Uint32 // and data length
	_     [8]byte
}

var _ [cellBodySize - unsafe.Sizeof(cellBody{})]byte
