package lockmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/shmlock/shmlock/internal/futex"
	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/internal/spin"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// Options configure a Manager.
type Options struct {
	// Clock is the time source; nil means SystemClock.
	Clock Clock
	// Logger receives the warning for the release of a lock that does not
	// exist; nil means slog.Default().
	Logger *slog.Logger
}

// Manager is one process's handle on the lock-manager table of a segment.
// Every process that opens the same segment sees the same named locks.
// A Manager may be used by any number of goroutines. Once the segment is
// closed, every method that reads or changes the table but Release and
// MarkConsistent returns ErrClosed (List, Stats and DeclaredOnly, which
// return no error, report an empty table) and changes nothing in the
// segment's file; holds taken before stay in the table until released
// (Release and a holder's MarkConsistent work after Close), they expire,
// or their process dies.
type Manager struct {
	t     *table
	clock clock // on SystemClock, waits sleep on the resource's futex
	log   *slog.Logger
	ro    bool
	names nameCache // the last names packed (names.go)
	keep  keepOff   // how long its waiters keep off an entry (keepoff.go)
}

// Open returns a Manager over seg's lock-manager table (sized at creation
// by layout.Options.LockMgrEntries: one entry is the table's header, each
// other holds one resource or extra holders of one). ErrNoTable if the
// segment has none. A Manager over a read-only segment can only inspect.
func Open(seg *shm.Segment, opts Options) (*Manager, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	mem, err := seg.Region(layout.KindLockMgr)
	if errors.Is(err, shm.ErrClosed) {
		return nil, ErrClosed
	}
	if err != nil {
		return nil, err
	}
	count := seg.Len(layout.KindLockMgr)
	if count == 0 {
		return nil, ErrNoTable
	}
	t := &table{seg: seg, self: proc.Self().Pack(), entries: make([]*layout.LockMgrEntry, count),
		n: uint64(count - 1), alive: make(map[uint64]int64)}
	for i := range t.entries {
		if t.entries[i], err = entryAt(mem, i); err != nil {
			return nil, err
		}
	}
	t.head = t.entries[0]
	t.counting = !seg.ReadOnly()
	m := &Manager{t: t, clock: newClock(opts.Clock), log: opts.Logger, ro: seg.ReadOnly()}
	m.names.n = t.n
	if m.log == nil {
		m.log = slog.Default()
	}
	return m, nil
}

// closed reports whether the segment has been closed: from then on the
// table's addresses hold private zero pages (shm.Segment.Close), in which
// a lock would be granted that no other process sees, so every operation
// fails with ErrClosed instead. Operations check it on entry, and
// again where a Close that happened while they waited (between attempts,
// or for an entry lock: see table.closed) would lead them.
func (m *Manager) closed() bool { return m.t.seg.Closed() }

// Capacity is how many resources the table can hold at most.
func (m *Manager) Capacity() int { return int(m.t.n) }

// RetryForever, as AcquireOptions.Retries, retries until the context or
// AcquireOptions.Wait ends the acquisition.
const RetryForever = -1

// AcquireOptions say how long a hold lasts and what to do on a conflict.
type AcquireOptions struct {
	// TTL is how long the hold lasts unless refreshed; 0: until released
	// (or until its process dies).
	TTL time.Duration
	// Retries is how many more attempts follow a conflict, each after a
	// backoff wait; 0 fails at once with ErrResourceLocked (unless Wait is
	// set), RetryForever never stops. Running out gives
	// ErrAcquisitionFailed.
	Retries int
	// Wait bounds the whole acquisition on the Manager's clock; when it
	// passes, ErrTimeout. With Retries 0, a positive Wait retries until it
	// passes. A context deadline passing first gives ErrTimeout too.
	Wait time.Duration
	// Backoff is the schedule between attempts; the zero value is design
	// 004's.
	Backoff Backoff
	// OnWait, if set, is called before each wait between attempts, with
	// the acquisition in state Waiting (Attempts made so far) and the
	// longest the wait may last; for logging retries.
	OnWait func(info LockInfo, wait time.Duration)
	// Eager makes a waiting acquisition attempt at every end of a hold. By
	// default a waiter whose attempt failed first keeps off the resource
	// for a few microseconds (keepoff.go), which lets holders that take it
	// in a loop run series of holds; an eager waiter does not, for a
	// handoff that must happen now (a turn passed inside the lock), at the
	// cost of such a resource's throughput. The etcd backend ignores it.
	Eager bool
}

func (o AcquireOptions) retries() int {
	if o.Retries == 0 && o.Wait > 0 {
		return RetryForever
	}
	return o.Retries
}

// LockInfo describes one hold, as Acquire and Refresh return it.
type LockInfo struct {
	Resource   string
	Owner      string
	Mode       Mode
	State      State // Acquired on success, Failed on failure
	AcquiredAt time.Time
	Timeout    time.Duration // the TTL; 0 if the hold does not expire
	ExpiresAt  time.Time     // zero if the hold does not expire
	// Version is the resource's version after this grant: it only grows
	// (also across expiry, reclaim and recycling of the table entry), so it
	// serves as a fencing token.
	Version uint64
	// Reclaimed says that a holder whose process had died was removed to
	// grant this hold: what it protected may be half-updated.
	Reclaimed bool
	// Inconsistent says that a hold of the resource ended without its
	// owner's release (its process died, or its TTL passed) and no holder
	// has called MarkConsistent since: every grant is told until one does.
	Inconsistent bool
	Attempts     int // attempts made, 1 for a grant at the first try
}

// outcome of one attempt under the entry lock.
type outcome struct {
	granted   bool
	already   bool // the owner holds the resource already
	needRoom  bool // compatible, but no free holder record
	woke      bool // a hold ended: wake the sleepers after unlocking
	reclaimed bool // a dead holder was removed
	// inconsistent: the resource is marked inconsistent (ctlInconsistent)
	inconsistent bool
	// tombs: the only free holder records are tombstones (see manager.go)
	tombs     bool
	version   uint64 // after the grant
	seq       uint32 // Gate at the conflict, for the futex wait
	blocked   bool   // a live hold conflicts: blocker and blockMode say whose
	blocker   ownerWords
	blockMode Mode
	expiry    int64 // earliest expiry of a blocking hold; 0 if none
}

// ownerWords is an owner name as the table stores it, copied out of a
// holder record under the entry's lock.
type ownerWords [MaxOwnerLen / 8]uint64

// conflict is what an attempt met, kept as data: the error describing it
// is built only when the acquisition returns it, so an attempt that only
// leads to a retry allocates nothing.
type conflict struct {
	err   error // the table's refusal (ErrTooManyHolders); nil: a hold is in the way
	owner ownerWords
	mode  Mode
}

func (c *conflict) error(res *resKey) error {
	if c.err != nil {
		return fmt.Errorf("%w: %q", c.err, res.s)
	}
	return fmt.Errorf("%q is held by %q (%v)", res.s, unpackWords(c.owner[:]), c.mode)
}

// Acquire takes resource for owner in mode. On a conflict it fails at once
// with ErrResourceLocked, or, if opts ask for retries or a wait, retries
// with backoff (woken early by any end of a hold) until granted, out of
// retries (ErrAcquisitionFailed), out of time (ErrTimeout), or ctx is
// cancelled (ctx.Err()). A hold whose TTL passed, or whose process died,
// does not conflict: it is ended (Expired) and the grant proceeds (a death
// is noticed by the first attempt at least 50 ms after it: answers "alive"
// are cached that long; a sleeping waiter looks for dead holders between
// its sleep slices, every 100 ms, and attempts again when it finds one). A resource with
// MaxHolders holders is busy for a waiting acquisition, and
// ErrTooManyHolders for one that does not wait, unless some of them died:
// their holds are ended to make room. An owner that holds the
// resource already gets ErrAlreadyHeld: holds do not nest (a hold under
// the same owner name by a process that died is ended as a conflicting
// one would be, Reclaimed, rather than held against it). The holder of a
// grant learns of every hold granted before it from the version (the n'th
// grant of a resource has a higher version than every earlier one).
func (m *Manager) Acquire(ctx context.Context, resource, owner string, mode Mode, opts AcquireOptions) (info LockInfo, err error) {
	// info and opts go down by pointer: copies of them, at every call of
	// the fast path, were a tenth of an uncontended acquisition. info is
	// the named result, filled in place: a local returned by value was
	// copied out 16 bytes at a time, and the copy's loads of words just
	// stored (Mode with State, the times) stalled store forwarding, 3-8 ns
	// of a 100-110 ns acquire+release (alternated go test runs).
	if names := m.names.lookup(resource, owner); names != nil {
		err = m.acquireNames(ctx, names, mode, &opts, &info)
		return info, err
	}
	var scratch namePair // zeroed only here, off the path of a kept pair
	names, err := m.names.pack(&scratch, resource, owner)
	if err != nil {
		return LockInfo{Resource: resource, Owner: owner, Mode: mode, State: Failed}, err
	}
	err = m.acquireNames(ctx, names, mode, &opts, &info)
	return info, err
}

// acquireNames is Acquire once the names are known to be good: it fills
// info, which is zero. (Field by field: a composite literal is built on
// the stack and copied, and the copy reads 16 bytes where two 8-byte stores
// went, which stalls store forwarding: 6% of an acquisition.)
func (m *Manager) acquireNames(ctx context.Context, names *namePair, mode Mode, opts *AcquireOptions, info *LockInfo) error {
	info.Resource, info.Owner, info.Mode, info.State = names.res.s, names.own.s, mode, Failed
	var err error
	if mode != Exclusive && mode != Collaborative {
		err = fmt.Errorf("%w: %d", ErrBadMode, mode)
	}
	if err == nil {
		err = opts.check()
	}
	if err == nil {
		err = m.writable()
	}
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.acquire(ctx, &names.res, &names.own, mode, opts, info)
}

// checkNames fills res and own from resource and owner, which must be
// valid names.
func checkNames(res *resKey, own *ownKey, resource, owner string) error {
	if err := res.setResource(resource); err != nil {
		return err
	}
	return own.setOwner(owner)
}

// writable is nil if the table may be changed. The changes check it once
// their input is known to be good: bad input is reported as such on a
// closed or read-only table too.
func (m *Manager) writable() error {
	if m.closed() {
		return ErrClosed
	}
	if m.ro {
		return ErrReadOnly
	}
	return nil
}

// closedErr is the error of an operation that failed (err not nil):
// ErrClosed if the segment was closed meanwhile, for the failure may be
// a wait for an entry lock that Close ended (see table.closed). A success
// is real, in the file, closed or not.
func (m *Manager) closedErr(err error) error {
	if err != nil && m.closed() {
		return ErrClosed
	}
	return err
}

func (m *Manager) acquire(ctx context.Context, res *resKey, own *ownKey, mode Mode, opts *AcquireOptions, info *LockInfo) error {
	// The first attempt, without the waiting loop's state and its deferred
	// accounting: most acquisitions are granted here, and setting up the
	// loop's 848-byte frame and its defer cost them 3 ns of 100 (go test,
	// alternated runs).
	// It is attempt, written out: the call measured 2 ns of 95.
	now := m.clock.now()
	e, err := m.entryFor(res)
	if err != nil {
		info.State = Unlocked.to(Failed)
		return err
	}
	var o outcome
	m.try(e, own, mode, opts.TTL, now, true, false, &o)
	if o.granted && !o.woke {
		m.t.unlockEntryNoWake(e)
		m.granted(info, opts, now, &o, o.reclaimed, 1)
		return nil
	}
	m.t.unlockEntry(e)
	return m.acquireSlow(ctx, res, own, mode, opts, info, now, e, o)
}

// attempt makes one attempt (try) on res's entry, and returns when it was
// made and the entry, unlocked (acquire has a copy). The clock is read
// before the entry is locked: the lock is held for less time, and a
// reading a few nanoseconds early is as good.
func (m *Manager) attempt(res *resKey, own *ownKey, mode Mode, ttl time.Duration, first, reuseTombs bool, o *outcome) (int64, *layout.LockMgrEntry, error) {
	now := m.clock.now()
	e, err := m.entryFor(res)
	if err != nil {
		return now, nil, err
	}
	m.try(e, own, mode, ttl, now, first, reuseTombs, o)
	m.t.unlockEntry(e)
	return now, e, nil
}

// granted fills info for a grant at the attempts'th attempt.
func (m *Manager) granted(info *LockInfo, opts *AcquireOptions, now int64, o *outcome, reclaimed bool, attempts int) {
	info.State = Unlocked.to(Acquired)
	info.AcquiredAt = m.clock.time(now)
	info.Version, info.Reclaimed, info.Attempts = o.version, reclaimed, attempts
	info.Inconsistent = o.inconsistent
	if opts.TTL > 0 {
		info.Timeout, info.ExpiresAt = opts.TTL, m.clock.time(int64(expiry(now, opts.TTL)))
	}
}

// acquireSlow is acquire after a first attempt (made at now on entry e,
// with outcome o) that did not end it: it acts on that outcome, then
// attempts and waits until a grant or a failure.
func (m *Manager) acquireSlow(ctx context.Context, res *resKey, own *ownKey, mode Mode, opts *AcquireOptions, info *LockInfo, now int64, e *layout.LockMgrEntry, o outcome) error {
	st := Unlocked
	start := now // time of the first attempt, for opts.Wait
	retries := opts.retries()
	reclaimed := false
	reuseTombs := false // grow the chain before a grant takes a tombstone
	gone := 0           // grow found the resource gone (see maxGone)
	// A hold's end wakes one sleeper (see wakeOne): one that gives up
	// after sleeping may have taken that wake, so it passes it on.
	var slept *layout.LockMgrEntry
	var cancel cancelWake
	defer func() {
		cancel.stop()
		if slept != nil && info.State == Failed {
			m.t.wakeOne(slept)
		}
		if slept != nil { // it waited: a contended acquisition, granted or given up
			m.t.statsOf(slept).RecordWait(time.Duration(m.clock.now()-start), info.State == Failed)
		}
	}()
	for attempt, again := 0, false; ; again = true { // the first attempt was acquire's
		if again {
			o = outcome{} // zero for each attempt
			var err error
			if now, e, err = m.attempt(res, own, mode, opts.TTL, attempt == 0, reuseTombs, &o); err != nil {
				info.State = st.to(Failed)
				return err
			}
		}
		switch {
		case o.granted && mode == Collaborative && (o.woke || slept != nil):
			// Whoever waited behind the holds that ended may join too.
			m.t.wakeAll(e)
		case o.woke && !o.granted:
			m.t.wakeOne(e)
		}
		reclaimed = reclaimed || o.reclaimed
		if o.granted {
			m.granted(info, opts, now, &o, reclaimed, attempt+1)
			return nil
		}
		// Built only past a grant: the blocker's words are a copy that the
		// uncontended path has no use for.
		met := conflict{owner: o.blocker, mode: o.blockMode}
		switch {
		case o.already:
			info.State = st.to(Failed)
			return fmt.Errorf("%w: %q by %q", ErrAlreadyHeld, res.s, own.s)
		case o.needRoom:
			err := m.t.grow(res)
			if err == nil {
				continue // not a retry: nothing conflicted
			}
			if errors.Is(err, errGone) {
				// Recycled between the attempt and grow, which is rare;
				// again and again, it is a table whose lookups miss a
				// resource that inserts find: a damaged one.
				if gone++; gone < maxGone {
					continue
				}
				info.State = st.to(Failed)
				return fmt.Errorf("%w: %q: the resource's entry cannot be found again (a damaged table? shmctl check)", ErrTableFull, res.s)
			}
			if o.tombs && !reuseTombs && (errors.Is(err, ErrTooManyHolders) || errors.Is(err, ErrTableFull)) {
				reuseTombs = true // no more room: a tombstone's news gives way to a grant
				continue
			}
			// A resource with as many holders as it may have is, for an
			// acquisition that asked to wait, busy: any of them leaving
			// makes room, and bumps the gate.
			if !errors.Is(err, ErrTooManyHolders) || retries == 0 {
				info.State = st.to(Failed)
				return fmt.Errorf("%w: %q", err, res.s)
			}
			met.err = err
		}
		attempt++
		info.Attempts = attempt
		if retries == 0 {
			info.State = st.to(Failed)
			return fmt.Errorf("%w: %w", ErrResourceLocked, met.error(res))
		}
		if retries != RetryForever && attempt > retries {
			info.State = st.to(Failed)
			return fmt.Errorf("%w after %d attempts: %w", ErrAcquisitionFailed, attempt, met.error(res))
		}
		d := opts.Backoff.jittered(attempt - 1)
		tried := now
		now = m.clock.now()
		if m.clock.sys {
			m.keep.failed(now - tried)
		}
		if opts.Wait > 0 {
			left := time.Duration(start + int64(opts.Wait) - now)
			if left <= 0 {
				info.State = st.to(Failed)
				return fmt.Errorf("%w after %v: %w", ErrTimeout, opts.Wait, met.error(res))
			}
			d = min(d, left)
		}
		if o.expiry != 0 {
			d = max(min(d, time.Duration(o.expiry-now)), 0)
		}
		st = st.to(Waiting)
		if opts.OnWait != nil {
			info.State = st
			opts.OnWait(*info, d)
			info.State = Failed
		}
		m.wait(ctx, e, o.seq, d, m.keepOffFor(opts), &cancel)
		slept = e
		st = st.to(Unlocked)
		if m.closed() {
			info.State = st.to(Failed)
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			info.State = st.to(Failed)
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("%w: %w (%w)", ErrTimeout, err, met.error(res))
			}
			return err
		}
	}
}

// maxGone bounds how often one acquisition starts again because grow
// found its resource recycled: each time needs another process to recycle
// the entry in between, so a bound this high is reached only where every
// lookup misses an entry that every insert finds (a damaged table), where
// the loop would otherwise never end.
const maxGone = 64

// entryFor returns res's entry, locked, inserting it unless the table
// accepts declared resources only.
func (m *Manager) entryFor(res *resKey) (*layout.LockMgrEntry, error) {
	if m.t.n != 0 && m.t.head.Ctl.Load()&ctlDeclaredOnly != 0 {
		e := m.t.find(res)
		if e == nil {
			if m.closed() {
				return nil, ErrClosed // see table.closed
			}
			return nil, fmt.Errorf("%w: %q", ErrResourceNotFound, res.s)
		}
		if e.Ctl.Load()&ctlDeclared == 0 {
			m.t.unlockEntry(e)
			return nil, fmt.Errorf("%w: %q", ErrResourceNotFound, res.s)
		}
		return e, nil
	}
	e, err := m.t.findOrInsert(res, false)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot add %q", err, res.s)
	}
	return e, nil
}

// try is one attempt to grant own a hold of e, under e's lock. It ends the
// holds that expired; on a conflict it also ends the holds of dead
// processes, and grants if that removed every conflict; so it does when
// compatible holds leave no free record. It fills o, which
// is zero (a pointer: an outcome returned by value was copied through the
// stack).
func (m *Manager) try(e *layout.LockMgrEntry, own *ownKey, mode Mode, ttl time.Duration, now int64, first, reuseTombs bool, o *outcome) {
	// free is the record a grant takes: one never used or released first;
	// else the record of the last dead holder's hold this attempt ended
	// (ended: the one that ended a dead holder's hold is always the one
	// granted, so it alone is told Reclaimed); a tombstone (see
	// manager.go), of an earlier end or of a hold this attempt ended for
	// its TTL (expired), only once the chain cannot grow (reuseTombs), so
	// that the owners whose holds ended are told for as long as room
	// allows: LastExpired names only the last of them. But the record of
	// an earlier hold of own's that ended without its release (mine) goes
	// first: the new grant is own's news of it, as LastExpired's is
	// cleared below, and a tombstone left beside the new hold would tell
	// the new hold's second release that its hold had expired.
	var free, ended, expired, tomb, mine *layout.LockMgrHolder
	held := 0
	for h := range m.t.holders(e) {
		if h.Process.Load() == 0 {
			if c := h.Companion.Load(); c == tombExpired || c == tombForced {
				if sameOwner(h, own) {
					mine = h
				} else if tomb == nil {
					tomb = h
				}
			} else if free == nil {
				free = h
			}
			continue
		}
		if exp := int64(h.Expires.Load()); exp != 0 && now >= exp {
			m.endHold(e, h, endExpired, now)
			o.woke = true
			expired = h
			if sameOwner(h, own) {
				mine = h
			}
			continue
		}
		if sameOwner(h, own) {
			if !m.heldByDead(h, now) {
				o.already = true
				break
			}
			// A hold under own's name by a process that died (an owner
			// restarted under its name): ended as a conflict ends a dead
			// hold, not taken for own's, which would keep own out for
			// good (nobody else conflicts with it). The grant goes into
			// its record, own's news of it.
			m.endHold(e, h, endReclaimed, now)
			o.woke, o.reclaimed = true, true
			mine = h
			continue
		}
		held++
	}
	if o.already {
		return
	}
	ctl := e.Ctl.Load()
	if held > 0 && (mode == Exclusive || modeOf(ctl) != mode) {
		for h := range m.t.holders(e) {
			p := h.Process.Load()
			if p == 0 {
				continue
			}
			if m.t.isAlive(p, now) || m.t.isAlive(h.Companion.Load(), now) {
				if !o.blocked {
					o.blocked = true
					for i := range h.Owner {
						o.blocker[i] = h.Owner[i].Load()
					}
				}
				if exp := int64(h.Expires.Load()); exp != 0 && (o.expiry == 0 || exp < o.expiry) {
					o.expiry = exp
				}
				continue
			}
			m.endHold(e, h, endReclaimed, now)
			o.woke, o.reclaimed = true, true
			held--
			ended = h
		}
		ctl |= e.Ctl.Load() & ctlInconsistent // a reclaim above marked it
		if held > 0 {
			o.blockMode = modeOf(ctl)
			if first {
				memview.StoreOwned(&e.Conflicts, e.Conflicts.Load()+1)
			}
			o.seq = e.Gate.Load()
			return
		}
		o.blocked, o.blocker = false, ownerWords{}
	}
	if held > 0 && free == nil && mine == nil && ended == nil {
		// Compatible holds take every record. Those whose processes died
		// make room, ended as a conflict ends them: nothing else would end
		// them (no acquisition in their mode conflicts with them), and a
		// resource full of dead holders would refuse every later one.
		if h, n := m.reclaimDead(e, now); n > 0 {
			o.woke, o.reclaimed = true, true
			held -= n
			ended = h
			ctl |= e.Ctl.Load() & ctlInconsistent
		}
	}
	if held == 0 {
		ctl = withMode(ctl, 0)
	}
	switch {
	case mine != nil:
		free = mine
	case free != nil:
	case ended != nil:
		free = ended
	case reuseTombs && tomb != nil:
		free = tomb // the older news gives way first
	case reuseTombs:
		free = expired
	}
	if free == nil {
		o.needRoom, o.tombs = true, tomb != nil || expired != nil
		o.seq = e.Gate.Load()
		memview.StoreOwned32(&e.Ctl, ctl)
		return
	}
	o.version = e.Version.Load() + 1
	memview.StoreOwned(&e.Version, o.version)
	// A tombstone taken over stops being one before it names the new
	// owner: a process killed in between would leave a tombstone that
	// tells this owner's next release of a hold that never was.
	memview.StoreOwned(&free.Companion, 0)
	for i := range free.Owner {
		memview.StoreOwned(&free.Owner[i], own.w[i])
	}
	exp := expiry(now, ttl)
	memview.StoreOwned(&free.Acquired, uint64(now))
	memview.StoreOwned(&free.Expires, exp)
	memview.StoreOwned(&free.Process, m.t.self)
	memview.StoreOwned(&e.Grants, e.Grants.Load()+1)
	if held == 0 {
		ctl = withMode(ctl, mode)
	}
	memview.StoreOwned32(&e.Ctl, ctl)
	// The grant is own's news of its hold's end, by expiry or reclaim
	// (LastExpired is own's hash) or by an operator (its hash with
	// forcedMark flipped): either way a later release is not told again.
	if (e.LastExpired.Load()^own.hash)&^forcedMark == 0 {
		memview.StoreOwned(&e.LastExpired, 0)
	}
	o.granted, o.inconsistent = true, ctl&ctlInconsistent != 0
}

// heldByDead reports whether hold h belongs to processes that are all
// gone (its process and its companion). try asks only off its fast path:
// where it would otherwise refuse (ErrAlreadyHeld) or ask for room.
func (m *Manager) heldByDead(h *layout.LockMgrHolder, now int64) bool {
	return !m.t.isAlive(h.Process.Load(), now) && !m.t.isAlive(h.Companion.Load(), now)
}

// reclaimDead ends the holds of e whose processes (and companions) died,
// and returns the record of the last and how many there were. Under e's
// lock, on the way to a grant that found no free record (try).
func (m *Manager) reclaimDead(e *layout.LockMgrEntry, now int64) (last *layout.LockMgrHolder, n int) {
	for h := range m.t.holders(e) {
		if h.Process.Load() != 0 && m.heldByDead(h, now) {
			m.endHold(e, h, endReclaimed, now)
			last = h
			n++
		}
	}
	return last, n
}

// How a hold ends.
type ending uint8

const (
	endReleased  ending = iota // its owner released it
	endExpired                 // its TTL passed
	endReclaimed               // its processes died
	endForced                  // an operator ended it (ForceRelease)
)

// forcedMark marks LastExpired as the hash of an owner whose hold an
// operator ended (ForceRelease): its late release gets ErrLockNotHeld
// rather than ErrLockTimeout.
const forcedMark uint64 = 1 << 63

// Tombstones: a hold that ends without its owner's release leaves its
// record free (Process 0) but keeps the owner's name, with one of these in
// Companion (no packed identity has a zero pid field, so none is one), so
// that the owner's late Release or Refresh is told what happened:
// ErrLockTimeout, or ErrLockNotHeld after ForceRelease. Every expired
// owner is told, not only the last (LastExpired), as long as its record
// has not been granted to someone else: the memory is the resource's
// holder records, which a grant reuses when it needs room.
const (
	tombExpired uint64 = 1 << 62
	tombForced  uint64 = 1<<62 | 1<<61
)

// endHold ends hold h of e. A hold that ends without its release marks
// the resource inconsistent and names its owner in LastExpired before
// anything else, and then the Process word goes: a process that dies
// half-way leaves either the hold (which the next attempt ends again)
// beside the mark, or the record free and the mark set, never a freed
// record that the next holder is not told of. Under e's lock; the caller
// wakes the sleepers after unlocking.
func (m *Manager) endHold(e *layout.LockMgrEntry, h *layout.LockMgrHolder, why ending, now int64) {
	acquired := int64(h.Acquired.Load())
	switch why {
	case endExpired, endReclaimed:
		memview.StoreOwned(&e.LastExpired, ownerHash(h))
		memview.StoreOwned32(&e.Ctl, e.Ctl.Load()|ctlInconsistent)
	case endForced:
		memview.StoreOwned(&e.LastExpired, ownerHash(h)^forcedMark)
		memview.StoreOwned32(&e.Ctl, e.Ctl.Load()|ctlInconsistent)
	}
	memview.StoreOwned(&h.Process, 0)
	if testHookStep != nil {
		testHookStep("endHold:process")
	}
	switch why {
	case endReleased:
		memview.StoreOwned(&h.Companion, 0)
	case endForced:
		memview.StoreOwned(&h.Companion, tombForced)
	default:
		memview.StoreOwned(&h.Companion, tombExpired)
	}
	switch why {
	case endReleased:
		memview.StoreOwned(&e.Releases, e.Releases.Load()+1)
		if d := now - acquired; d > 0 {
			memview.StoreOwned(&e.HoldNanos, e.HoldNanos.Load()+uint64(d))
		}
	case endExpired:
		memview.StoreOwned32(&e.Expired, e.Expired.Load()+1)
	case endReclaimed:
		memview.StoreOwned32(&e.Reclaimed, e.Reclaimed.Load()+1)
		m.t.statsOf(e).AddReclaim()
	}
	memview.StoreOwned(&e.Version, e.Version.Load()+1)
	memview.StoreOwned32(&e.Gate, e.Gate.Load()+1)
}

// ownerHash is the hash of h's owner, as setOwner computes it, from the
// stored words: under the entry lock, without building the string. (A
// name has no NUL, so its words end at the first word of NULs.)
func ownerHash(h *layout.LockMgrHolder) uint64 {
	var w [MaxOwnerLen / 8]uint64
	n := 0
	for n < len(w) {
		if w[n] = h.Owner[n].Load(); w[n] == 0 {
			break
		}
		n++
	}
	return hashWords(w[:n])
}

// How long wait watches the gate before it sleeps: loads, the last
// waitYields of them after a sched_yield (another process, the holder
// perhaps, may run), and one runtime.Gosched before the sleep (a goroutine
// of this process may be the holder). Not a Gosched at every yield: in a
// process whose only busy goroutine is the waiter, each wakes an idle
// runtime thread for nothing (see the entry lock's waiting in entry.go).
const (
	waitSpins  = 200
	waitYields = 20
)

// cancelWake wakes the sleepers of the entry an acquisition sleeps on when
// its context ends: a sleeper cannot watch a channel. The others woken go
// back to sleep. One registration serves every wait of the acquisition, so
// a retry loop allocates only at its first wait.
type cancelWake struct {
	on     *atomic.Pointer[layout.LockMgrEntry] // the entry slept on; nil before the first wait
	cancel func() bool                          // ends the registration
}

// watch registers ctx (at the first call) and makes e the entry its end
// wakes.
func (c *cancelWake) watch(ctx context.Context, e *layout.LockMgrEntry) {
	if c.on != nil {
		c.on.Store(e)
		return
	}
	on := new(atomic.Pointer[layout.LockMgrEntry])
	on.Store(e) // before AfterFunc, which runs at once if ctx is done already
	c.on, c.cancel = on, context.AfterFunc(ctx, func() { _, _ = futex.WakeAll(&on.Load().Gate) })
}

// stop ends the registration, if any.
func (c *cancelWake) stop() {
	if c.cancel != nil {
		c.cancel()
	}
}

// wait sleeps for d or until a hold of e ends (its gate moves from seq) or
// ctx is done (through cancel), or, once the segment is closed, until its
// current sleep slice ends: a sleeper in the kernel at Close is woken only
// by a release in another process or its timeout.
func (m *Manager) wait(ctx context.Context, e *layout.LockMgrEntry, seq uint32, d, keepOff time.Duration, cancel *cancelWake) {
	if !m.clock.sys {
		m.clock.c.Sleep(ctx, d)
		return
	}
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	if d <= 0 {
		return
	}
	if keepOff > 0 {
		spin.KeepOff(min(d, keepOff))
	}
	// A hold of a contended resource is often short: watch the gate a
	// little before paying for a sleep and a wake in the kernel. The spin
	// is bounded and short next to the shortest backoff, so a waiter
	// behind a long hold still sleeps.
	for i := range waitSpins {
		if e.Gate.Load() != seq {
			return
		}
		if i >= waitSpins-waitYields {
			futex.Yield()
		}
	}
	runtime.Gosched() // the holder may be a goroutine of this process
	if e.Gate.Load() != seq {
		return
	}
	if ctx.Done() != nil {
		cancel.watch(ctx, e)
	}
	end := time.Now().Add(d)
	for {
		// Registered for one slice at a time: a registration dropped as
		// stale (internal/sleepers) costs a live sleeper one slice at most.
		ticket := sleepers.Register(&e.Sleepers)
		m.t.statsOf(e).AddSleep()
		_ = futex.Wait(&e.Gate, seq, min(d, maxSleepSlice))
		sleepers.Unregister(&e.Sleepers, ticket)
		if d = time.Until(end); d <= 0 || e.Gate.Load() != seq || ctx.Err() != nil || m.closed() || m.holderDied(e) {
			return
		}
	}
}

// holderDied reports whether a hold of e belongs to processes that are
// all gone, so that the next attempt would end it. A death wakes nobody:
// a waiter asks between its sleep slices (every maxSleepSlice), so it takes
// a dead holder's resource over within a slice rather than at the end of
// its backoff. The words are copied under e's lock, taken only if free at
// once (a process busy with e is alive), and judged outside it.
func (m *Manager) holderDied(e *layout.LockMgrEntry) bool {
	if !m.t.tryLockEntry(e) {
		return false
	}
	var ids [MaxHolders][2]uint64 // process, companion
	n := 0
	for h := range m.t.holders(e) {
		if p := h.Process.Load(); p != 0 && n < len(ids) {
			ids[n] = [2]uint64{p, h.Companion.Load()}
			n++
		}
	}
	m.t.unlockEntry(e)
	now := m.clock.now()
	for _, id := range ids[:n] {
		if !m.t.isAlive(id[0], now) && !m.t.isAlive(id[1], now) {
			return true
		}
	}
	return false
}

// Release ends owner's hold of resource, also after the segment's Close
// (ErrClosed only if it then had to wait for a resource's entry lock
// that another process keeps). ErrLockNotHeld if owner holds it
// not but someone else does; ErrLockTimeout if the hold expired (or its
// process was declared dead) before this release. Releasing a lock that
// does not exist, or that nobody holds, logs a warning and succeeds, as
// the release flow of the lock manager's specification says.
func (m *Manager) Release(resource, owner string) error {
	if names := m.names.lookup(resource, owner); names != nil {
		return m.release(names)
	}
	var scratch namePair // zeroed only here, off the path of a kept pair
	names, err := m.names.pack(&scratch, resource, owner)
	if err != nil {
		return err
	}
	return m.release(names)
}

// release is Release once the names are known to be good.
func (m *Manager) release(names *namePair) error {
	res, own := &names.res, &names.own
	resource, owner := res.s, own.s
	if m.ro {
		return ErrReadOnly // a release works after the segment's Close, though
	}
	now := m.clock.now() // before locking, as in acquire
	e, err := m.t.lookup(res)
	if err != nil {
		return err
	}
	if e == nil {
		m.warnUnknown(resource, owner)
		return nil
	}
	var mine *layout.LockMgrHolder
	others := 0
	for h := range m.t.holders(e) {
		if h.Process.Load() != 0 {
			if mine == nil && sameOwner(h, own) {
				mine = h
			} else {
				others++
			}
		}
	}
	if mine == nil {
		timedOut, forced := m.t.endedWithout(e, own)
		m.t.unlockEntry(e)
		switch {
		case forced:
			return fmt.Errorf("%w: %q by %q: an operator ended the hold (ForceRelease)", ErrLockNotHeld, resource, owner)
		case timedOut:
			return fmt.Errorf("%w: %q by %q", ErrLockTimeout, resource, owner)
		case others > 0:
			return fmt.Errorf("%w: %q by %q", ErrLockNotHeld, resource, owner)
		}
		m.warnUnknown(resource, owner)
		return nil
	}
	var result error
	if exp := int64(mine.Expires.Load()); exp != 0 && now >= exp {
		m.endHold(e, mine, endExpired, now)
		memview.StoreOwned(&e.LastExpired, 0) // told now, by this release
		memview.StoreOwned(&mine.Companion, 0)
		result = fmt.Errorf("%w: %q by %q", ErrLockTimeout, resource, owner)
	} else {
		m.endHold(e, mine, endReleased, now)
	}
	if others == 0 {
		memview.StoreOwned32(&e.Ctl, withMode(e.Ctl.Load(), 0))
	}
	m.t.unlockEntry(e)
	m.t.wakeOne(e)
	return result
}

func (m *Manager) warnUnknown(resource, owner string) {
	m.log.Warn("lockmgr: release of a lock that does not exist", "resource", resource, "owner", owner)
}

// Refresh extends owner's live hold of resource to ttl from now (0: no
// expiry). ErrLockTimeout if it had expired already, ErrLockNotHeld if
// owner does not hold it.
func (m *Manager) Refresh(resource, owner string, ttl time.Duration) (LockInfo, error) {
	info := LockInfo{Resource: resource, Owner: owner, State: Failed}
	names := m.names.lookup(resource, owner)
	var err error
	if names == nil {
		names, err = m.names.pack(new(namePair), resource, owner)
	}
	if err == nil && ttl < 0 {
		err = fmt.Errorf("%w: ttl %v", ErrBadOptions, ttl)
	}
	if err == nil {
		err = m.writable()
	}
	if err != nil {
		return info, err
	}
	got, err := m.refresh(&names.res, &names.own, ttl, info)
	if err != nil {
		return info, m.closedErr(err)
	}
	return got, nil
}

func (m *Manager) refresh(res *resKey, own *ownKey, ttl time.Duration, info LockInfo) (LockInfo, error) {
	resource, owner := res.s, own.s
	e := m.t.find(res)
	if e == nil {
		return info, fmt.Errorf("%w: %q by %q", ErrLockNotHeld, resource, owner)
	}
	now := m.clock.now()
	var mine *layout.LockMgrHolder
	for h := range m.t.holders(e) {
		if h.Process.Load() != 0 && sameOwner(h, own) {
			mine = h
			break
		}
	}
	switch {
	case mine == nil:
		timedOut, forced := m.t.endedWithout(e, own)
		m.t.unlockEntry(e)
		if forced {
			return info, fmt.Errorf("%w: %q by %q: an operator ended the hold (ForceRelease)", ErrLockNotHeld, resource, owner)
		}
		if timedOut {
			return info, fmt.Errorf("%w: %q by %q", ErrLockTimeout, resource, owner)
		}
		return info, fmt.Errorf("%w: %q by %q", ErrLockNotHeld, resource, owner)
	case expiredAt(mine.Expires.Load(), now):
		m.endHold(e, mine, endExpired, now)
		memview.StoreOwned(&e.LastExpired, 0)  // told now, by this refresh:
		memview.StoreOwned(&mine.Companion, 0) // a later release is not told again
		m.t.unlockEntry(e)
		m.t.wakeOne(e)
		return info, fmt.Errorf("%w: %q by %q", ErrLockTimeout, resource, owner)
	}
	exp := expiry(now, ttl)
	if ttl > 0 {
		info.Timeout, info.ExpiresAt = ttl, m.clock.time(int64(exp))
	}
	memview.StoreOwned(&mine.Expires, exp)
	info.Mode = modeOf(e.Ctl.Load())
	info.AcquiredAt = m.clock.time(int64(mine.Acquired.Load()))
	info.Version = e.Version.Load()
	info.State = Acquired
	m.t.unlockEntry(e)
	return info, nil
}

// MarkConsistent says that the data the resource protects is whole again
// (owner, which holds it, repaired it or found nothing to repair): later
// grants are no longer told (LockInfo.Inconsistent). ErrLockNotHeld if
// owner holds no live hold of resource. Like Release, and like the
// MarkConsistent of packages spinlock and upgrade, it works after the
// segment's Close (ErrClosed only if it then had to wait for the entry
// lock that another process keeps): a holder that repaired the data as it
// unwinds says so before its release, else every later holder, in every
// process, is told of damage that is no more, and the resource, never
// recycled while marked, keeps its entry.
func (m *Manager) MarkConsistent(resource, owner string) error {
	var res resKey
	var own ownKey
	if err := checkNames(&res, &own, resource, owner); err != nil {
		return err
	}
	if m.ro {
		return ErrReadOnly
	}
	now := m.clock.now()
	e, err := m.t.lookup(&res)
	if err != nil {
		return err
	}
	if e == nil {
		return fmt.Errorf("%w: %q by %q", ErrLockNotHeld, resource, owner)
	}
	defer m.t.unlockEntry(e)
	held := false
	for h := range m.t.holders(e) {
		if held = h.Process.Load() != 0 && sameOwner(h, &own) && !expiredAt(h.Expires.Load(), now); held {
			break
		}
	}
	if !held {
		return fmt.Errorf("%w: %q by %q", ErrLockNotHeld, resource, owner)
	}
	memview.StoreOwned32(&e.Ctl, e.Ctl.Load()&^ctlInconsistent)
	return nil
}

// SetCompanion records process pid as the companion of owner's hold of
// resource: the hold then counts as alive while either its own process or
// the companion lives. shmctl lock names the guard process it runs its
// command under, so the lock is not reclaimed after shmctl died while the
// guard still kills what the command started.
func (m *Manager) SetCompanion(resource, owner string, pid int) error {
	var res resKey
	var own ownKey
	if err := checkNames(&res, &own, resource, owner); err != nil {
		return err
	}
	if pid <= 0 || pid > proc.MaxPID {
		return fmt.Errorf("%w: pid %d", ErrBadOptions, pid)
	}
	if err := m.writable(); err != nil {
		return err
	}
	id, err := proc.Lookup(uint32(pid))
	if err != nil {
		return fmt.Errorf("%w: companion: %w", ErrBadOptions, err) // no such process
	}
	return m.closedErr(m.setCompanion(&res, &own, id.Pack()))
}

func (m *Manager) setCompanion(res *resKey, own *ownKey, id uint64) error {
	resource, owner := res.s, own.s
	e := m.t.find(res)
	if e == nil {
		return fmt.Errorf("%w: %q by %q", ErrLockNotHeld, resource, owner)
	}
	defer m.t.unlockEntry(e)
	found := false
	for h := range m.t.holders(e) {
		if h.Process.Load() != 0 && sameOwner(h, own) {
			memview.StoreOwned(&h.Companion, id)
			found = true
			break
		}
	}
	if !found {
		return fmt.Errorf("%w: %q by %q", ErrLockNotHeld, resource, owner)
	}
	return nil
}
