package main

import (
	"fmt"
	"sync/atomic"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// The demo keeps its data in its own segment, in the lock-manager region
// (layout.KindLockMgr): package lockmgr does not use it yet, and the demo's
// segment is the demo's alone. One 64-byte line each:
//
//	line 0           control: stop (u32)
//	line 1+s         lock s: counter (u64), last holder's pid (u64)
//	line 1+S+w       worker w: hold (u32), holding (u32), reclaims (u32),
//	                 ready (u32), then one tally (u64) per lock
//
// The counter, the last holder and the tallies are PLAIN words, changed
// only under lock s with a plain load and store: if the lock ever let two
// workers in at once, increments would be lost and the final check would
// fail. That is the point of the demo, so they are deliberately not
// atomics. The control words are atomics: the demo changes them while the
// workers run. memview.At is shmlock's one place that turns bytes of a
// mapping into typed pointers (with bounds and alignment checks).
const (
	demoLine       = 64
	demoMaxWorkers = 16
)

// demoSlots are the locks the demo's workers share; the victim is made to
// hold demoSlots[demoVictimSlot].
var demoSlots = [...]string{"alpha", "beta", "gamma"}

const demoVictimSlot = 1

// demoLines is the number of lines; demoLockMgrEntries sizes the
// lock-manager region to hold them.
const (
	demoLines          = 1 + len(demoSlots) + demoMaxWorkers
	demoLockMgrEntries = (demoLines*demoLine + layout.LockMgrEntrySize - 1) / layout.LockMgrEntrySize
)

type demoWords struct {
	stop    *atomic.Uint32
	slots   []demoSlotWords
	workers []demoWorkerWords
}

type demoSlotWords struct {
	counter    *uint64 // plain: see above
	lastHolder *uint64 // plain: the pid of the last worker that held the lock
}

type demoWorkerWords struct {
	hold     *atomic.Uint32 // set by the demo: lock the victim slot and keep it
	holding  *atomic.Uint32 // set by the worker once it holds it
	reclaims *atomic.Uint32 // locks this worker took over from a dead holder
	ready    *atomic.Uint32 // set by the worker once it has claimed every lock
	tally    []*uint64      // plain, per lock: increments this worker made
}

// demoWordsOf views the demo's words in seg.
func demoWordsOf(seg *shm.Segment) (*demoWords, error) {
	region, err := seg.Region(layout.KindLockMgr)
	if err != nil {
		return nil, err
	}
	if need := demoLines * demoLine; len(region) < need {
		return nil, fmt.Errorf("%s is not a demo segment: its lock-manager region has %d bytes, the demo needs %d", seg.Path(), len(region), need)
	}
	var errs []error
	u32 := func(off int) *atomic.Uint32 {
		w, err := memview.Uint32(region, uint64(off))
		errs = append(errs, err)
		return w
	}
	u64 := func(off int) *uint64 {
		w, err := memview.At[uint64](region, uint64(off))
		errs = append(errs, err)
		return w
	}
	d := &demoWords{stop: u32(0)}
	for s := range demoSlots {
		line := (1 + s) * demoLine
		d.slots = append(d.slots, demoSlotWords{counter: u64(line), lastHolder: u64(line + 8)})
	}
	for w := range demoMaxWorkers {
		line := (1 + len(demoSlots) + w) * demoLine
		ww := demoWorkerWords{hold: u32(line), holding: u32(line + 4), reclaims: u32(line + 8), ready: u32(line + 12)}
		for s := range demoSlots {
			ww.tally = append(ww.tally, u64(line+16+8*s))
		}
		d.workers = append(d.workers, ww)
	}
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("demo words: %w", err)
		}
	}
	return d, nil
}
