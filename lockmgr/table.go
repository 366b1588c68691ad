package lockmgr

import (
	"errors"
	"iter"
	"sync"
	"time"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

type (
	resKey = key
	ownKey = key
)

// table is one process's view of a segment's lock-manager table.
type table struct {
	seg     *shm.Segment
	self    uint64                 // this process's packed identity
	entries []*layout.LockMgrEntry // entries[0] is the header
	head    *layout.LockMgrEntry
	n       uint64 // resource entries: len(entries)-1

	aliveMu sync.Mutex
	alive   map[uint64]int64 // identities seen alive, and when (segment time)

	counting bool // the segment is writable: slow paths bump the entries' layout.LockStats
}

// statsOf returns the contention counters of entry e (slow paths only), or
// nil if there are none or the table is only read.
func (t *table) statsOf(e *layout.LockMgrEntry) *layout.LockStats {
	if !t.counting {
		return nil
	}
	i := memview.Index(t.head, e)
	if i < 0 || i >= len(t.entries) {
		return nil
	}
	return t.seg.LockStats(layout.KindLockMgr, i)
}

// probe is the index of the entry d steps along hash's probe sequence,
// 1 + (hash mod n + d) mod n, for d < n, with one division where the
// formula has two (a 64-bit division is tens of cycles, and every
// acquisition and release probes).
func (t *table) probe(hash, d uint64) int { return t.probeFrom(hash%t.n, d) }

// probeFrom is probe from home, hash mod n, computed already.
func (t *table) probeFrom(home, d uint64) int {
	i := home + d
	if i >= t.n {
		i -= t.n
	}
	return 1 + int(i)
}

// homeOf is hash mod n for resource key k.
func (t *table) homeOf(k *resKey) uint64 {
	if k.home != 0 {
		return k.home - 1
	}
	return k.hash % t.n
}

func sameName(e *layout.LockMgrEntry, k *resKey) bool {
	for i := range k.w {
		if e.Name[i].Load() != k.w[i] {
			return false
		}
	}
	return true
}

func sameOwner(h *layout.LockMgrHolder, k *ownKey) bool {
	for i := range h.Owner {
		if h.Owner[i].Load() != k.w[i] {
			return false
		}
	}
	return true
}

// find returns the entry of resource k, locked, or nil.
func (t *table) find(k *resKey) *layout.LockMgrEntry {
	e, _ := t.lookup(k)
	return e
}

// lookup is find that tells a resource not found (nil, nil) from a wait
// for its entry lock that the segment's Close ended (nil, ErrClosed).
func (t *table) lookup(k *resKey) (*layout.LockMgrEntry, error) {
	return t.lookupUntil(k, nil)
}

// lookupUntil is lookup whose wait for the entry lock w, if not nil,
// bounds too: (nil, nil) with w.ended set if it ended the wait.
func (t *table) lookupUntil(k *resKey, w *entryWait) (*layout.LockMgrEntry, error) {
	switch i := t.searchUntil(k, true, w); {
	case i >= 0:
		return t.entries[i], nil
	case i == gaveUp && (w == nil || !w.ended):
		return nil, ErrClosed
	}
	return nil, nil
}

// gaveUp is search's answer when Close (or an entryWait) ended its wait
// for an entry lock.
const gaveUp = -2

// search returns the index of resource k's entry, or -1: with lock, the
// entry is returned locked and its name checked under the lock; without,
// nothing is locked (for the readers, which must not stall behind a dead
// process's entry lock) and the answer may be stale by the time it is
// used. It probes at most as far as any resource was ever inserted from
// its home entry, and stops at an entry never used (resources are inserted
// at the first free entry of their probe sequence, and entries never
// become unused again).
func (t *table) search(k *resKey, lock bool) int { return t.searchUntil(k, lock, nil) }

// searchUntil is search whose wait for an entry lock w, if not nil, bounds
// too (see entryWait): gaveUp if it ended the wait.
func (t *table) searchUntil(k *resKey, lock bool, w *entryWait) int {
	if t.n == 0 {
		return -1
	}
	limit := min(uint64(t.head.Next.Load()), t.n-1)
	home := t.homeOf(k)
	for d := uint64(0); d <= limit; d++ {
		i := t.probeFrom(home, d)
		e := t.entries[i]
		if e.Hash.Load() != k.hash {
			if kindOf(e.Ctl.Load()) == kindEmpty {
				return -1
			}
			continue
		}
		if lock {
			var locked bool
			if w == nil {
				locked = t.lockEntry(e) // inlined: the fast path of every call
			} else {
				locked = t.tryLockEntry(e) || t.lockEntrySlow(e, w)
			}
			if !locked {
				return gaveUp // see table.closed
			}
		}
		if kindOf(e.Ctl.Load()) == kindResource && sameName(e, k) {
			return i
		}
		if lock {
			t.unlockEntry(e)
		}
	}
	return -1
}

// findOrInsert returns the entry of resource k, locked, inserting it if it
// is not in the table.
func (t *table) findOrInsert(k *resKey, declared bool) (*layout.LockMgrEntry, error) {
	if e := t.find(k); e != nil {
		return e, nil
	}
	return t.insert(k, declared)
}

// insert is findOrInsert's slow path. Under the insert lock no entry
// changes its kind, so the scan for k is exact.
func (t *table) insert(k *resKey, declared bool) (*layout.LockMgrEntry, error) {
	if t.n == 0 {
		return nil, ErrTableFull
	}
	if !t.lockEntry(t.head) {
		return nil, ErrClosed
	}
	defer t.unlockEntry(t.head)
	free, freeAt := (*layout.LockMgrEntry)(nil), uint64(0)
	for d := range t.n {
		e := t.entries[t.probe(k.hash, d)]
		c := kindOf(e.Ctl.Load())
		if c == kindEmpty {
			if free == nil {
				free, freeAt = e, d
			}
			break
		}
		if c == kindFree && free == nil {
			free, freeAt = e, d
		}
		if c == kindResource && e.Hash.Load() == k.hash {
			if !t.lockEntry(e) {
				return nil, ErrClosed
			}
			if kindOf(e.Ctl.Load()) == kindResource && sameName(e, k) {
				if d > uint64(t.head.Next.Load()) {
					// Beyond the reach that search trusts: a damaged
					// table (the entries' insert only ever raises it).
					// Lookups would miss the resource and grow would
					// find it gone at every attempt.
					t.head.Next.Store(uint32(d))
				}
				return e, nil
			}
			t.unlockEntry(e)
		}
	}
	if free != nil {
		if !t.lockEntry(free) {
			return nil, ErrClosed
		}
	} else {
		free, freeAt = t.recycle(k.hash)
		if free == nil {
			return nil, ErrTableFull
		}
	}
	for i := range k.w {
		memview.StoreOwned(&free.Name[i], k.w[i])
	}
	memview.StoreOwned(&free.Hash, k.hash)
	memview.StoreOwned(&free.Version, t.head.Version.Load())
	memview.StoreOwned(&free.LastExpired, 0)
	memview.StoreOwned32(&free.Next, 0)
	zeroCounters(free)
	// The contention counters are the resource's, as the statistics
	// words are: a resource taking a recycled entry must not inherit the
	// last one's, which package metrics exports under the new name (and
	// a name that comes back at another entry would go back, read as a
	// counter reset).
	t.statsOf(free).Reset()
	for j := range free.Holders {
		memview.StoreOwned(&free.Holders[j].Companion, 0) // no tombstone of the entry's last use
	}
	if freeAt > uint64(t.head.Next.Load()) {
		t.head.Next.Store(uint32(freeAt))
	}
	ctl := kindResource
	if declared {
		ctl |= ctlDeclared
	}
	free.Ctl.Store(ctl)
	return free, nil
}

// testHookStep, nil but in tests, is called at the named steps of the
// changes made under an entry lock, so that a test can kill a process
// there (crash_test.go), and at steps of the readers (stats:head; stats:wait,
// Stats about to sleep for an insert under way), so that a test can change
// the table under them.
var testHookStep func(step string)

func zeroCounters(e *layout.LockMgrEntry) {
	memview.StoreOwned(&e.Grants, 0)
	memview.StoreOwned(&e.Releases, 0)
	memview.StoreOwned(&e.HoldNanos, 0)
	memview.StoreOwned(&e.Conflicts, 0)
	memview.StoreOwned32(&e.Expired, 0)
	memview.StoreOwned32(&e.Reclaimed, 0)
}

// recycle frees the first resource along hash's probe sequence that nobody
// holds (its entry lock free, or left by a dead process), nobody declared
// and that is not marked inconsistent (its next holder must be told), for
// a new resource or an overflow entry (grow), and returns it locked with
// its distance. Called under
// the insert lock when no entry is free. Its statistics move to the header
// and its version raises the header's high-water mark, so a later insert
// of the same name starts above it.
func (t *table) recycle(hash uint64) (*layout.LockMgrEntry, uint64) {
	for d := range t.n {
		e := t.entries[t.probe(hash, d)]
		// An entry whose lock a dead process left is taken over, as a
		// lookup would (lockEntrySlow): else, with nobody looking its
		// name up, it would never be recycled.
		if kindOf(e.Ctl.Load()) != kindResource || !t.tryLockEntry(e) && !t.takeOver(e, e.Lock.Load()) {
			continue
		}
		c := e.Ctl.Load()
		if kindOf(c) != kindResource || c&(ctlDeclared|ctlInconsistent) != 0 || t.holderCount(e) != 0 {
			t.unlockEntry(e)
			continue
		}
		t.retire(e)
		return e, d
	}
	return nil, 0
}

// retire folds a resource entry's statistics and version into the header
// and frees its overflow entries. Under the insert lock and e's lock.
func (t *table) retire(e *layout.LockMgrEntry) {
	h := t.head
	h.Grants.Add(e.Grants.Load())
	h.Releases.Add(e.Releases.Load())
	h.HoldNanos.Add(e.HoldNanos.Load())
	h.Conflicts.Add(e.Conflicts.Load())
	h.Expired.Add(e.Expired.Load())
	h.Reclaimed.Add(e.Reclaimed.Load())
	// One more than the entry's last version, so that the resource
	// inserted here next (which starts at the header's) does not start at
	// the version the entry has now: the readers (see read) take an
	// unchanged version as proof that the entry held still.
	v := e.Version.Load() + 1
	memview.StoreOwned(&e.Version, v)
	if v > h.Version.Load() {
		h.Version.Store(v)
	}
	// The chain is unlinked before its entries are freed: a process that
	// dies in between leaves them unreachable (freeOrphans frees them), not
	// a link from e to a free entry, which a grow of another resource may
	// make its overflow entry, shared then by both chains.
	next := e.Next.Load()
	memview.StoreOwned32(&e.Next, 0)
	if testHookStep != nil {
		testHookStep("retire:unlinked")
	}
	for i, steps := next, 0; i != 0 && steps < maxOverflow; steps++ {
		o := t.overflow(i)
		if o == nil {
			break
		}
		i = o.Next.Load()
		o.Next.Store(0)
		o.Ctl.Store(kindFree)
	}
	if testHookStep != nil {
		testHookStep("retire:overflow")
	}
	memview.StoreOwned32(&e.Ctl, kindFree)
}

// freeOrphans frees the overflow entries that no resource's chain reaches,
// and returns how many. Only a process that died in grow (between the
// entry's kind and its link) or in retire (between the unlink and the
// free) leaves one, holding the insert lock: so whoever takes the insert
// lock over from the dead calls this (takeOver), and so does Reclaim.
// Under the insert lock, which every change of a chain or of an entry's
// kind takes: the chains hold still. An orphan has no holder (grow zeroes
// its records, and retire only retires a resource nobody holds) and
// nobody reads it (lookups go through the chains), so it is freed as
// retire would.
func (t *table) freeOrphans() int {
	reached := make([]bool, len(t.entries))
	for _, e := range t.entries[1:] {
		if kindOf(e.Ctl.Load()) != kindResource {
			continue
		}
		for i, steps := e.Next.Load(), 0; steps < maxOverflow; steps++ {
			o := t.overflow(i)
			if o == nil || reached[i] {
				break
			}
			reached[i] = true
			i = o.Next.Load()
		}
	}
	freed := 0
	for i, o := range t.entries {
		if i > 0 && !reached[i] && kindOf(o.Ctl.Load()) == kindOverflow {
			o.Next.Store(0)
			o.Ctl.Store(kindFree)
			freed++
		}
	}
	return freed
}

// overflow returns overflow entry i, or nil if i names none (a corrupted
// link is treated as the end of the chain).
func (t *table) overflow(i uint32) *layout.LockMgrEntry {
	if i == 0 || uint64(i) > t.n {
		return nil
	}
	o := t.entries[i]
	if kindOf(o.Ctl.Load()) != kindOverflow {
		return nil
	}
	return o
}

// holders yields each holder record of e and its overflow entries, used
// or not. An iterator rather than a callback: it inlines into the range
// loops of the acquisition's and the release's fast paths, where the
// callback's indirect calls and captured variables cost 5% of an
// uncontended acquire+release (go test, 8 alternated rounds).
func (t *table) holders(e *layout.LockMgrEntry) iter.Seq[*layout.LockMgrHolder] {
	return func(yield func(*layout.LockMgrHolder) bool) {
		for i := range e.Holders {
			if !yield(&e.Holders[i]) {
				return
			}
		}
		if next := e.Next.Load(); next != 0 {
			t.overflowHolders(next, yield)
		}
	}
}

// overflowHolders yields the holder records of the overflow chain from
// entry i on, until yield returns false.
func (t *table) overflowHolders(i uint32, yield func(*layout.LockMgrHolder) bool) {
	for steps := 0; steps < maxOverflow; steps++ {
		o := t.overflow(i)
		if o == nil {
			return
		}
		for j := range o.Holders {
			if !yield(&o.Holders[j]) {
				return
			}
		}
		i = o.Next.Load()
	}
}

// holderCount is the number of used holder records of e.
func (t *table) holderCount(e *layout.LockMgrEntry) int {
	n := 0
	for h := range t.holders(e) {
		if h.Process.Load() != 0 {
			n++
		}
	}
	return n
}

// errGone is grow's answer for a resource no longer in the table: it was
// recycled meanwhile, and the caller starts again from the lookup.
var errGone = errors.New("lockmgr: the resource left the table")

// grow links one more overflow entry to resource k's chain, unless the
// chain already has a free record or is as long as it may be. It takes the
// insert lock first and then the resource's entry, as insert does. With no
// empty or free entry it recycles a resource as an insert does: a resource
// stays in the table after its last release, so a table in use for a
// while has no free entry, and the next holder of a collaborative
// resource would get ErrTableFull for as long as idle resources stayed.
// (recycle never picks k's entry: it holds holders and this lock.)
func (t *table) grow(k *resKey) error {
	if !t.lockEntry(t.head) {
		return ErrClosed
	}
	defer t.unlockEntry(t.head)
	e := t.find(k)
	if e == nil {
		return errGone
	}
	defer t.unlockEntry(e)
	last, links, spare := e, 0, false
	for h := range t.holders(e) {
		if c := h.Companion.Load(); h.Process.Load() == 0 && c != tombExpired && c != tombForced {
			spare = true
			break
		}
	}
	if spare {
		return nil
	}
	for o := t.overflow(e.Next.Load()); o != nil && links < maxOverflow; o = t.overflow(o.Next.Load()) {
		last, links = o, links+1
	}
	if links >= maxOverflow {
		return ErrTooManyHolders
	}
	for d := range t.n {
		if c := kindOf(t.entries[t.probe(k.hash, d)].Ctl.Load()); c == kindEmpty || c == kindFree {
			t.link(e, last, k.hash, d)
			return nil
		}
	}
	o, d := t.recycle(k.hash)
	if o == nil {
		return ErrTableFull
	}
	t.link(e, last, k.hash, d)
	t.unlockEntry(o)
	return nil
}

// link makes the empty or free entry at distance d of hash's probe
// sequence an overflow entry after last, the end of e's chain. Under the
// insert lock and e's lock.
func (t *table) link(e, last *layout.LockMgrEntry, hash, d uint64) {
	idx := t.probe(hash, d)
	o := t.entries[idx]
	for j := range o.Holders {
		o.Holders[j].Process.Store(0)
		o.Holders[j].Companion.Store(0) // no tombstone of the entry's last use
	}
	o.Hash.Store(0)
	o.Next.Store(0)
	o.Ctl.Store(kindOverflow) // an orphan until linked (freeOrphans)
	if testHookStep != nil {
		testHookStep("grow:unlinked")
	}
	if last == e {
		memview.StoreOwned32(&e.Next, uint32(idx))
	} else {
		last.Next.Store(uint32(idx))
	}
}

// isAlive reports whether the process w (a holder's Process or Companion)
// lives. Answers "alive" are remembered for livenessInterval: a waiter
// retrying against a live holder would otherwise read /proc every attempt,
// and a late "dead" only delays a reclaim.
func (t *table) isAlive(w uint64, now int64) bool {
	if w == 0 {
		return false
	}
	if w == t.self {
		return true
	}
	t.aliveMu.Lock()
	seen, ok := t.alive[w]
	t.aliveMu.Unlock()
	if ok && now-seen < int64(livenessInterval) && now >= seen {
		return true
	}
	if !t.seg.OwnerAlive(w) {
		return false
	}
	t.aliveMu.Lock()
	if len(t.alive) > 1024 {
		clear(t.alive)
	}
	t.alive[w] = now
	t.aliveMu.Unlock()
	return true
}

// Sleepers of an entry is an internal/sleepers word over its Gate: the
// count of waiters registered to sleep there, a wake-pending bit, the
// futile-wake count that drops the registrations of killed waiters and the
// epoch of those drops (sleepers.Ticket). A
// hold's end wakes one sleeper (wakeOne) or, after a collaborative grant,
// all (wakeAll). Sleepers sleep in slices of at most maxSleepSlice and
// register again for each, so a wake-pending bit left by a woken process
// that was then killed, or a live sleeper's registration dropped as stale,
// holds it up for one slice at most.
const maxSleepSlice = 100 * time.Millisecond

// wakeOne wakes one waiter asleep on e's gate, after a hold of e ended.
// One is enough: if it gets the resource, nobody else could have (or, for
// a collaborative grant, it wakes the rest); if someone else got it first,
// that holder's end wakes the next; if it gives up, it passes the wake on.
// Waking every sleeper would make them all fight for the entry's lock
// word, of whom one wins.
func (t *table) wakeOne(e *layout.LockMgrEntry) {
	if sleepers.WakeOne(&e.Sleepers, &e.Gate) {
		t.statsOf(e).AddWakeup()
	}
}

// wakeAll wakes every waiter asleep on e's gate.
func (t *table) wakeAll(e *layout.LockMgrEntry) {
	if sleepers.WakeAll(&e.Sleepers, &e.Gate) {
		t.statsOf(e).AddWakeup()
	}
}

// endedWithout reports whether own's hold of e ended without its release:
// timedOut if it expired or its process died, forced if an operator ended
// it (see the tombstones in manager.go, and LastExpired for one whose
// record was reused). It consumes what it found, so one late release is
// told once. Under e's lock.
func (t *table) endedWithout(e *layout.LockMgrEntry, own *ownKey) (timedOut, forced bool) {
	for h := range t.holders(e) {
		if h.Process.Load() != 0 {
			continue
		}
		switch c := h.Companion.Load(); {
		case c != tombExpired && c != tombForced, !sameOwner(h, own):
			continue
		case c == tombForced:
			forced = true
		default:
			timedOut = true
		}
		memview.StoreOwned(&h.Companion, 0)
		break
	}
	switch last := e.LastExpired.Load(); {
	case last == own.hash:
		timedOut = !forced
	case last == own.hash^forcedMark:
		forced = !timedOut
	default:
		return timedOut, forced
	}
	memview.StoreOwned(&e.LastExpired, 0)
	return timedOut, forced
}
