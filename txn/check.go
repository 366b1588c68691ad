package txn

import (
	"fmt"
	"sort"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/shm"
)

// Check validates the transaction tables of seg without changing
// anything and returns a line for each damaged record or row: a state no
// transaction passes through, a live transaction with no owner or whose
// arena lies outside the data area, overlaps another's or is less than
// what it says it used, a pin row owned by no process. Nothing found:
// nil. The owners' liveness is not damage (Space.Reclaim closes a dead
// owner's transactions).
func Check(seg *shm.Segment) ([]string, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	geo, err := geometryOf(seg)
	if err != nil {
		return nil, err
	}
	var found []string
	type arena struct {
		start, end uint64
		rec        int
	}
	var arenas []arena
	for i := range geo.nrec {
		r := geo.record(i)
		c := r.Ctl.Load()
		where := fmt.Sprintf("transaction record %d", i)
		switch st := ctlState(c); st {
		case stateFree, stateClosed:
			continue
		case stateOpen, stateClosing, stateFinishing:
		default:
			found = append(found, fmt.Sprintf("%s: state %d, which no transaction passes through", where, st))
			continue
		}
		if id, _ := proc.Unpack(r.Owner.Load()); id.PID == 0 {
			found = append(found, where+": a live transaction with no owner")
		}
		start, size, ok := geo.arenaBounds(r.Arena.Load())
		if !ok {
			found = append(found, fmt.Sprintf("%s: arena %#x lies outside the data area of %d units", where, r.Arena.Load(), geo.units))
			continue
		}
		if used := uint64(r.Used.Load()); used > size {
			found = append(found, fmt.Sprintf("%s: %d bytes used of an arena of %d", where, used, size))
		}
		arenas = append(arenas, arena{start, start + size, i})
	}
	sort.Slice(arenas, func(a, b int) bool { return arenas[a].start < arenas[b].start })
	for k := 1; k < len(arenas); k++ {
		if prev := arenas[k-1]; arenas[k].start < prev.end {
			found = append(found, fmt.Sprintf("transaction records %d and %d: their arenas overlap", prev.rec, arenas[k].rec))
		}
	}
	for row := range geo.rows {
		if w := geo.rowIdent(row).Load(); w != 0 {
			if id, _ := proc.Unpack(w); id.PID == 0 {
				found = append(found, fmt.Sprintf("pin row %d: owned by %#x, which has no pid", row, w))
			}
		}
	}
	return found, nil
}
