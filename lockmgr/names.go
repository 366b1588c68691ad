package lockmgr

import "sync/atomic"

// Packing a pair of names (checking every byte, packing them into the
// words an entry stores, hashing them) is about a quarter of an
// uncontended Acquire+Release: each call packs both names again. A Manager
// keeps the last pair it packed that was asked for twice running, and a
// call with equal strings uses it: comparing two short strings costs a
// fraction of packing them.
//
// The kept pair is immutable once published (atomic.Pointer), so any
// number of goroutines read it. A pair is published (one allocation) only
// once the same pair was packed anew three times running: an Acquire and
// its Release make two, so callers that lock ever new names pay an atomic
// swap and an add per call and never allocate. Goroutines that race on
// lastMiss and runs can only make the cache keep a pair sooner or later;
// what it keeps is always a pair packed and checked in full.
type namePair struct {
	res resKey
	own ownKey
}

type nameCache struct {
	n        uint64 // the size of the Manager's table (resource entries), for key.home; 0: none
	kept     atomic.Pointer[namePair]
	lastMiss atomic.Uint64 // pairHash of the last pair packed anew
	runs     atomic.Uint32 // packs of that pair since it was first missed
}

func pairHash(p *namePair) uint64 { return p.res.hash ^ p.own.hash*0x9e3779b97f4a7c15 }

// lookup is the kept pair, if it is resource and owner's.
func (c *nameCache) lookup(resource, owner string) *namePair {
	if p := c.kept.Load(); p != nil && p.res.s == resource && p.own.s == owner {
		return p
	}
	return nil
}

// pack checks and packs resource and owner into scratch, and keeps the
// pair if it was packed the two times before too; it returns the pair to
// use.
// The caller has found the kept pair is not theirs (lookup).
func (c *nameCache) pack(scratch *namePair, resource, owner string) (*namePair, error) {
	if err := checkNames(&scratch.res, &scratch.own, resource, owner); err != nil {
		return nil, err
	}
	if h := pairHash(scratch); c.lastMiss.Swap(h) != h {
		c.runs.Store(0)
	} else if c.runs.Add(1) >= 2 {
		kept := *scratch
		if c.n != 0 {
			kept.res.home = 1 + kept.res.hash%c.n
		}
		c.kept.Store(&kept)
	}
	return scratch, nil
}
