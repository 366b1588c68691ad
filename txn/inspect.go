package txn

import (
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// State is a transaction record's state.
type State uint8

// Record states, as Inspect reports them.
const (
	StateFree    State = State(stateFree) // never used
	StateOpen    State = State(stateOpen)
	StateClosing State = State(stateClosing)
	// StateFinishing: drained, the end sequence runs; unlike Closing it can
	// no longer be cancelled. Pins fail with ErrClosing as while Closing.
	StateFinishing State = State(stateFinishing)
	StateClosed    State = State(stateClosed)
)

func (s State) String() string {
	switch s {
	case StateFree:
		return "free"
	case StateOpen:
		return "open"
	case StateClosing:
		return "closing"
	case StateFinishing:
		return "finishing"
	case StateClosed:
		return "closed"
	}
	return "corrupt"
}

// ProcPins is what one pin row counts on one transaction.
type ProcPins struct {
	Row   int    // pin row
	Owner uint64 // packed identity of the row's process
	Alive bool   // the process lives; a dead one's pins no longer count
	Pins  uint32
}

// TxnInfo describes one transaction record.
type TxnInfo struct {
	Index      int
	Gen        uint32
	State      State
	Barrier    bool   // closes through the global barrier
	Owner      uint64 // packed identity of the owner (or reclaimer)
	OwnerAlive bool
	ArenaStart uint64 // byte offset of the arena in the txn arena region
	ArenaSize  uint64 // bytes; 0 when not in use
	Used       uint64 // bytes allocated
	Objects    uint32 // objects and cells allocated
	Promotions uint32 // cells registered here by Link
	Promoted   uint32 // objects copied out at close
	Destroyed  uint32 // objects destroyed unpromoted at close
	Pins       []ProcPins
}

// RowInfo describes one pin row in use.
type RowInfo struct {
	Row        int
	Owner      uint64
	Alive      bool
	Pins       uint64 // per-transaction pins, all records
	GlobalPins uint32 // barrier pins
}

// Snapshot is what Inspect read.
type Snapshot struct {
	Records       int
	PinRows       int
	DataUnits     uint64 // units in the data area
	FreeUnits     uint64 // of those, not in an arena of an open, closing or finishing transaction
	BarrierLeader uint64 // packed identity of the process holding the barrier up; 0 if down
	Txns          []TxnInfo
	Rows          []RowInfo
}

// Inspect reads the transactions of seg without changing anything (seg
// may be read-only). It lists the records in use (open, closing or
// finishing); with all, records never used or closed are listed too. The
// words are read one by one while others may change them, so the snapshot
// is only as consistent as the moment allows. shm.ErrClosed once seg is
// closed, also when it closes while Inspect reads (the words read then
// are the zeros of private pages, not the file's).
func Inspect(seg *shm.Segment, all bool) (*Snapshot, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	geo, err := geometryOf(seg)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Records: geo.nrec, PinRows: geo.rows, DataUnits: geo.units, FreeUnits: geo.units}
	snap.BarrierLeader = geo.barrier().Leader.Load()
	idents := make([]uint64, geo.rows)
	alive := make([]bool, geo.rows)
	for row := range geo.rows {
		idents[row] = geo.rowIdent(row).Load()
		if idents[row] == 0 {
			continue
		}
		alive[row] = seg.OwnerAlive(idents[row])
		ri := RowInfo{Row: row, Owner: idents[row], Alive: alive[row]}
		for i := range geo.nrec {
			ri.Pins += uint64(geo.counter(row, i).Load())
		}
		ri.GlobalPins = geo.counter(row, geo.nrec).Load()
		snap.Rows = append(snap.Rows, ri)
	}
	for i := range geo.nrec {
		r := geo.record(i)
		c := r.Ctl.Load()
		st := State(ctlState(c))
		if !all && !ctlLive(c) {
			continue
		}
		ti := TxnInfo{Index: i, Gen: ctlGen(c), State: st, Barrier: c&flagBarrier != 0,
			Owner: r.Owner.Load(), Used: uint64(r.Used.Load()), Objects: r.Objs.Load(),
			Promotions: r.NPromos.Load(), Promoted: r.Promoted.Load(), Destroyed: r.Destroyed.Load()}
		ti.OwnerAlive = ti.Owner != 0 && seg.OwnerAlive(ti.Owner)
		if ctlLive(c) {
			if start, size, ok := geo.arenaBounds(r.Arena.Load()); ok {
				ti.ArenaStart, ti.ArenaSize = start, size
				snap.FreeUnits -= min(snap.FreeUnits, size/layout.ArenaUnit)
			}
		}
		for row := range geo.rows {
			if idents[row] == 0 {
				continue
			}
			if n := geo.counter(row, i).Load(); n != 0 {
				ti.Pins = append(ti.Pins, ProcPins{Row: row, Owner: idents[row], Alive: alive[row], Pins: n})
			}
		}
		snap.Txns = append(snap.Txns, ti)
	}
	if seg.Closed() {
		return nil, shm.ErrClosed
	}
	return snap, nil
}
