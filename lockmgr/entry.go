package lockmgr

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shmlock/shmlock/internal/futex"
	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/racesync"
	"github.com/shmlock/shmlock/internal/spin"
	"github.com/shmlock/shmlock/layout"
)

// The table. Entry 0 is the table's own header; entries 1..count-1 hold
// resources. A resource lives in the entry its name hashes to, or in the
// next one that was free when it was inserted (linear probing), so a lookup
// touches one entry in the common case and takes no table-wide lock.
//
// Each entry (layout.LockMgrEntry) has a lock word of its own, Lock: 0 when
// free, otherwise the packed identity (internal/proc) of the process
// changing the entry. Every field but the futex bookkeeping (Gate reads,
// Sleepers) changes only under it, so the fields themselves are written with
// plain stores that the unlocking store publishes. The critical sections
// are a few dozen instructions and never block; a process that dies inside
// one is detected by identity and its lock taken over (see lockEntrySlow).
// Every change is ordered so that any prefix of it is a valid entry: a holder
// record is filled before its Process word is set and its Process word is
// cleared before anything else, a name is written before the entry's kind
// says it is a resource.
//
// Every grant and every release of a resource, exclusive or collaborative,
// happens under its entry's lock, so the entry locks carry the
// happens-before of the resource locks: a release's unlock of the entry
// comes before the next grant's lock of it. The race detector does not see
// atomics on a segment's words, so the entry lock tells it
// (internal/racesync): every acquisition of it calls racesync.Acquire
// after its CAS, every unlock racesync.Release before its store. A
// resource recycled into another entry between a release and a grant is
// ordered through the insert lock (the header's), which both the recycling
// and the insert take. A hold that expires is not a release: what its
// owner did after its last call into the manager is not ordered before the
// next holder, and -race reports Go data they both touch (rightly: the
// owner may still have been at it).
//
// Ctl of a resource entry:
//
//	bits 0-1  kind: kindEmpty (never used), kindResource, kindFree (recycled,
//	          probes continue past it), kindOverflow (holds more holder
//	          records of the resource whose chain links it through Next)
//	bit  2    ctlDeclared: named by Declare; never recycled
//	bits 3-4  the mode of the current holders; 0 when there are none
//	bit  5    ctlInconsistent: a hold ended without its owner's release
//	          (its process died, or its TTL passed while it may still have
//	          been writing), and no holder has called MarkConsistent since:
//	          every grant reports it (LockInfo.Inconsistent); never recycled
//
// Ctl of the header entry holds ctlDeclaredOnly; its Lock is the insert
// lock, which serialises the (rare) changes of an entry's kind; its Next is
// the longest probe distance of any resource ever inserted, which bounds
// lookups; its Version is the highest version of any recycled resource, from
// which a newly inserted resource starts, so a resource's version never goes
// back even when its entry is recycled and the name comes back elsewhere;
// its counters hold the statistics of recycled entries.
//
// Version: bumped by every grant and every end of a hold (release, expiry,
// reclaim); a holder may use the version it was granted as a fencing token.
// Gate: bumped whenever a hold ends; waiters sleep on it, registered in
// Sleepers. LastExpired: hash of the owner whose hold last ended without a
// release, so that owner's Release can say ErrLockTimeout.
const (
	kindMask     uint32 = 3
	kindEmpty    uint32 = 0
	kindResource uint32 = 1
	kindFree     uint32 = 2
	kindOverflow uint32 = 3

	ctlDeclared     uint32 = 1 << 2 // resource entry: declared
	ctlDeclaredOnly uint32 = 1 << 2 // header entry: undeclared names are refused
	ctlModeShift           = 3
	ctlModeMask     uint32 = 3 << ctlModeShift
	ctlInconsistent uint32 = 1 << 5 // resource entry: see above
)

// Limits.
const (
	// MaxResourceLen and MaxOwnerLen are the longest names in bytes.
	MaxResourceLen = layout.LockMgrNameLen
	MaxOwnerLen    = layout.LockMgrOwnerLen
	// MaxHolders is the most holders one resource may have (collaborative
	// mode): layout.LockMgrHolders in its entry and as many in each of up to
	// maxOverflow overflow entries.
	MaxHolders  = layout.LockMgrHolders * (1 + maxOverflow)
	maxOverflow = 7
)

// Waiting for an entry lock: spin (the holder is a few instructions from
// unlocking), loads spaced by runs of PAUSEs, then sleep in growing steps,
// checking every livenessInterval whether the holder still lives. Entry
// locks are held for well under a microsecond, so only a descheduled,
// stopped or dead holder gets a waiter as far as sleeping; a futex would
// cost every unlock a check for sleepers that the fast path does not need.
// Before each sleep the waiter lets this process's other goroutines run
// (runtime.Gosched): the holder may be one of them.
//
// Why PAUSEs and not runtime.Gosched between the loads: in a process whose
// only busy goroutine is the waiter, Gosched hands the thread straight
// back, but first wakes an idle thread of the runtime to look for work
// (wakep): a futex wake and a context switch on the other CPU, which may be
// running the holder. At rw90 with 8 processes on 2 vCPUs perf counted
// 5,200 such wakes and as many sleeps of the woken threads per 2.4M
// operations, and 40-48k futex calls in all, 6-9k with the waiting that
// replaced it (libshmlock's: loads spaced with PAUSEs here, sched_yields
// while watching a resource's gate in Manager.wait, and the keep-off a
// plain spin). Measured on the far-placed host, bench/matrix -baseline, 10
// rounds, twice (the first without the Gosched before a sleep): rw90 1.14x
// and 1.06x at 8 processes (9 and 7 of 10 rounds), 1.13x and 1.10x at 4,
// counter 0.94-1.04x, pingpong_retry 1.02x and 1.11x. Within one process
// the change is larger: 8 goroutines taking turns at one resource with
// GOMAXPROCS=2 went from 630-720 to 210-280 ns an acquire+release (their
// Goscheds had switched between the waiters), with GOMAXPROCS=1 230-240 to
// 230-260 ns. A sched_yield after each Gosched instead (libshmlock's old
// yields) had been measured and not kept: rw90 0.73x/0.78x at 4/8
// processes, counter 0.91x at 8.
const (
	spinLoads        = 64
	spinPaused       = 16 // loads after spinPause PAUSEs each
	spinPause        = 8
	maxNap           = time.Millisecond
	livenessInterval = 50 * time.Millisecond
)

func kindOf(ctl uint32) uint32 { return ctl & kindMask }
func modeOf(ctl uint32) Mode   { return Mode((ctl & ctlModeMask) >> ctlModeShift) }

func withMode(ctl uint32, m Mode) uint32 { return ctl&^ctlModeMask | uint32(m)<<ctlModeShift }

// entryAt views entry i of a table region.
func entryAt(mem []byte, i int) (*layout.LockMgrEntry, error) {
	return memview.At[layout.LockMgrEntry](mem, uint64(i)*layout.LockMgrEntrySize)
}

// lockEntry takes e's lock word for this process; false, without it, if
// the segment closed while it waited (see closed). The exported operations
// hold at most one entry lock at a time, plus the insert lock around it on
// the slow paths (always insert lock first).
func (t *table) lockEntry(e *layout.LockMgrEntry) bool {
	if e.Lock.CompareAndSwap(0, t.self) {
		if racesync.Enabled {
			racesync.Acquire(&e.Lock)
		}
		return true
	}
	return t.lockEntrySlow(e, nil)
}

// tryLockEntry takes e's lock word only if it is free.
func (t *table) tryLockEntry(e *layout.LockMgrEntry) bool {
	if !e.Lock.CompareAndSwap(0, t.self) {
		return false
	}
	if racesync.Enabled {
		racesync.Acquire(&e.Lock)
	}
	return true
}

func (t *table) unlockEntry(e *layout.LockMgrEntry) {
	if racesync.Enabled {
		racesync.Release(&e.Lock)
	}
	e.Lock.Store(0)
}

// unlockEntryNoWake is unlockEntry for an unlock that no check for
// sleepers follows (a grant that ended no hold): a release store, without
// the full fence of unlockEntry's exchange, which only orders the unlock
// before the load of Sleepers in wakeOne and wakeAll. The entry's fields,
// written with plain stores under the lock, are published by it all the
// same (memview.StoreRelease64).
func (t *table) unlockEntryNoWake(e *layout.LockMgrEntry) {
	if racesync.Enabled {
		racesync.Release(&e.Lock)
	}
	memview.StoreRelease64(&e.Lock, 0)
}

// closed reports whether the segment has been closed. The acquisitions and
// changes check it on entry (releases do not: they work after Close). A
// goroutine that waits for an entry lock (lockEntrySlow), held by another
// process that does not let go, gives up when the segment closes: the
// resource then looks not found, and those paths check closed again, so
// that the operation fails with ErrClosed having changed nothing.
func (t *table) closed() bool { return t.seg.Closed() }

// entryWait bounds a wait for an entry lock (lockEntrySlow) besides the
// segment's Close, for an operator's call that must not wait for ever for
// a holder that lives but does not let go: a process stopped (SIGSTOP, a
// debugger) inside a call into the manager. The wait gives up once done is
// closed, and records the lock's word then, its holder's identity, for the
// error to name.
type entryWait struct {
	done   <-chan struct{}
	ended  bool   // done ended the wait
	holder uint64 // the lock's word when it did
}

// lockEntrySlow is kept out of lockEntry so that the fast path inlines.
// bound, if not nil, ends the wait as the segment's Close does.
func (t *table) lockEntrySlow(e *layout.LockMgrEntry, bound *entryWait) bool {
	nap := time.Microsecond
	var checked time.Time
	for i := 0; ; i++ {
		w := e.Lock.Load()
		if w == 0 {
			if e.Lock.CompareAndSwap(0, t.self) {
				if racesync.Enabled {
					racesync.Acquire(&e.Lock)
				}
				return true
			}
			continue
		}
		switch {
		case i < spinLoads:
			continue
		case i < spinLoads+spinPaused:
			spin.Pause(spinPause)
			continue
		}
		if now := time.Now(); now.Sub(checked) >= livenessInterval {
			checked = now
			if t.takeOver(e, w) {
				return true
			}
		}
		if t.closed() {
			return false
		}
		if bound != nil {
			select {
			case <-bound.done:
				bound.ended, bound.holder = true, w
				return false
			default:
			}
		}
		runtime.Gosched()
		futex.Nap(nap) // time.Sleep would stretch a 1 us nap to hundreds
		nap = min(2*nap, maxNap)
	}
}

// takeOver takes e's lock word from w, its value, if w is a dead
// process's: true if it did.
func (t *table) takeOver(e *layout.LockMgrEntry, w uint64) bool {
	if w == 0 || w == t.self || t.seg.OwnerAlive(w) || !e.Lock.CompareAndSwap(w, t.self) {
		return false
	}
	if racesync.Enabled { // the dead process released nothing; earlier holders did
		racesync.Acquire(&e.Lock)
	}
	// The dead process may have stopped between a hold's end and the wake
	// that goes with it: wake every sleeper. The bump is a locked add, not
	// a plain store: a plain store may still sit in this CPU's store buffer
	// when wakeAll loads Sleepers, and a sleeper registering meanwhile
	// would then sleep on the old gate unwoken, for a slice (a release's
	// bump is fenced by its unlock's exchange instead).
	e.Gate.Add(1)
	t.wakeAll(e)
	if e == t.head {
		// It may have died in a grow or a retire, and left an overflow
		// entry that no chain reaches: a leak for good otherwise.
		t.freeOrphans()
	}
	return true
}

// key is a checked resource or owner name, packed into the words an entry
// stores it in (NUL-padded, little-endian), with its hash.
// An owner key uses the first MaxOwnerLen/8 words.
type key struct {
	s    string
	w    [MaxResourceLen / 8]uint64
	hash uint64
	// home is 1 + hash mod the table's size, for a resource key that a
	// Manager's name cache packed (it serves that Manager's table only);
	// 0: not computed. It spares the lookups of a kept pair a 64-bit
	// division.
	home uint64
}

// checkName reports whether s can be a name of at most max bytes: not
// empty, valid UTF-8, no control characters (so no NUL, which pads names in
// the table).
func checkName(s string, max int) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > max:
		return fmt.Sprintf("%d bytes, at most %d", len(s), max)
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b < 0x20 || b == 0x7f {
			return fmt.Sprintf("%q has a control character", s)
		}
		if b >= utf8.RuneSelf {
			return checkUnicode(s)
		}
	}
	return ""
}

func checkUnicode(s string) string {
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%q is not valid UTF-8", s)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Sprintf("%q has a control character", s)
		}
	}
	return ""
}

// setResource sets k to resource name s; ErrBadResource if s is none.
func (k *key) setResource(s string) error {
	if why := k.set(s, MaxResourceLen); why != "" {
		return fmt.Errorf("%w: %w: %s", ErrBadResource, layout.ErrBadName, why)
	}
	return nil
}

// setOwner sets k to owner name s; ErrBadOwner if s is none.
func (k *key) setOwner(s string) error {
	if why := k.set(s, MaxOwnerLen); why != "" {
		return fmt.Errorf("%w: %w: %s", ErrBadOwner, layout.ErrBadName, why)
	}
	return nil
}

// set checks s (see checkName) and packs it into k in one pass: the bytes
// NUL-padded into little-endian words, and their hash, never 0. It
// returns why s is not a valid name, or "".
func (k *key) set(s string, max int) string {
	if s == "" || len(s) > max {
		return checkName(s, max)
	}
	ascii := true
	w := &k.w
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b < 0x20 || b == 0x7f {
			return checkName(s, max)
		}
		ascii = ascii && b < utf8.RuneSelf
		w[i>>3] |= uint64(b) << (8 * (i & 7))
	}
	if !ascii {
		if why := checkUnicode(s); why != "" {
			return why
		}
	}
	k.s, k.hash = s, hashWords(w[:(len(s)+7)>>3])
	return ""
}

// hashWords is the hash of a name packed into words w (without the words
// of NULs after it), never 0. It hashes the words, not the bytes: a
// multiply per word instead of one per byte. The constants are FNV-1a's
// and a 64-bit finaliser's.
func hashWords(w []uint64) uint64 {
	h := uint64(14695981039346656037)
	for _, x := range w {
		h = (h ^ x) * 1099511628211
		h ^= h >> 29
	}
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	if h == 0 {
		h = 1
	}
	return h
}

// unpack is the string stored in words w.
func unpack(w []atomic.Uint64) string {
	var words [MaxResourceLen / 8]uint64
	for i := range w {
		words[i] = w[i].Load()
	}
	return unpackWords(words[:len(w)])
}

// unpackWords is the string stored in words w, read already.
func unpackWords(w []uint64) string {
	var buf [MaxResourceLen]byte
	for i := range w {
		binary.LittleEndian.PutUint64(buf[8*i:], w[i])
	}
	n := 0
	for n < 8*len(w) && buf[n] != 0 {
		n++
	}
	return string(buf[:n])
}
