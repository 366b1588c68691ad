package main

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/shmlock/shmlock/shm"
)

// The demo keeps its data in a data region of its own segment
// (shm.Segment.Data), as any program would. One 64-byte line each:
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
// atomics. The control words are atomics (Region.Uint32): the demo changes
// them while the workers run.
const (
	demoLine       = 64
	demoMaxWorkers = 16
	demoRegion     = "shmlock-demo" // the data region's name
)

// demoSlots are the locks the demo's workers share; the victim is made to
// hold demoSlots[demoVictimSlot].
var demoSlots = [...]string{"alpha", "beta", "gamma"}

const demoVictimSlot = 1

// demoLines is the number of lines; demoDataBytes sizes the region (and
// the segment's data area) to hold them.
const (
	demoLines     = 1 + len(demoSlots) + demoMaxWorkers
	demoDataBytes = demoLines * demoLine
)

type demoWords struct {
	stop    *atomic.Uint32
	slots   []demoSlotWords
	workers []demoWorkerWords
}

type demoSlotWords struct {
	counter    plainWord // see above
	lastHolder plainWord // the pid of the last worker that held the lock
}

type demoWorkerWords struct {
	hold     *atomic.Uint32 // set by the demo: lock the victim slot and keep it
	holding  *atomic.Uint32 // set by the worker once it holds it
	reclaims *atomic.Uint32 // locks this worker took over from a dead holder
	ready    *atomic.Uint32 // set by the worker once it has claimed every lock
	tally    []plainWord    // per lock: increments this worker made
}

// plainWord is a u64 of the demo's region read and written with a plain
// load and store (see above).
type plainWord []byte

func (w plainWord) Load() uint64   { return binary.NativeEndian.Uint64(w) }
func (w plainWord) Store(v uint64) { binary.NativeEndian.PutUint64(w, v) }

// demoWordsOf views the demo's words in seg: the demo makes its region
// (create), a worker finds it.
func demoWordsOf(seg *shm.Segment, create bool) (*demoWords, error) {
	size := 0 // a worker finds the region, of whatever size
	if create {
		size = demoDataBytes
	}
	region, err := seg.Data(demoRegion, size)
	if err != nil {
		return nil, fmt.Errorf("%s is not a demo segment: %w", seg.Path(), err)
	}
	if region.Len() < demoDataBytes {
		return nil, fmt.Errorf("%s is not a demo segment: its region %q has %d bytes, the demo needs %d", seg.Path(), demoRegion, region.Len(), demoDataBytes)
	}
	var errs []error
	u32 := func(off int) *atomic.Uint32 {
		w, err := region.Uint32(off)
		errs = append(errs, err)
		return w
	}
	u64 := func(off int) plainWord { return plainWord(region.Bytes()[off : off+8]) }
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
