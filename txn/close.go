package txn

import (
	"context"
	"errors"
	"fmt"

	"github.com/shmlock/shmlock/internal/futex"
	"github.com/shmlock/shmlock/internal/mono"
	"github.com/shmlock/shmlock/internal/racesync"
	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/shm"
)

// Test hooks (export_test.go), nil outside tests: testHookDrained runs in
// settle between the count that found no pin on record idx and its flip to
// Finishing; testHookFinishing at the start of record idx's end sequence;
// testHookPromotePinned when a promoter has pinned destination idx, before
// it copies.
var testHookDrained, testHookFinishing, testHookPromotePinned func(idx int)

// testHookReclaimRead runs in Reclaim between its read of record idx's Ctl
// word and its read of the owner (export_test.go).
var testHookReclaimRead func(idx int)

// closeTxn is the per-transaction close, the
// request_close_and_wait followed by the end sequence:
//
//  1. flip Open -> Closing: from here every TryPin fails, and a TryPin
//     that incremented before the flip but re-checks after it backs out;
//  2. sleep on the record's Drain futex until no live process counts a
//     pin on the record: every release while Closing bumps Drain, and a
//     sleeper wakes at least every livenessInterval to stop counting the
//     pins of processes that died;
//  3. flip Closing -> Finishing, and wait for the promotion pins that came
//     in between the count and the flip (see settle);
//  4. finalize promotions, destroy unpromoted objects, poison the arena,
//     and mark the record Closed (which frees the arena for Begin).
//
// A context done during step 2 reverts the record to Open and returns
// ctx.Err(); from step 3 on the close no longer looks at ctx.
//
// One closer runs the end sequence: the one whose CAS flipped the state.
// Another goroutine's close of a transaction already Closing or Finishing
// waits for that close to end and then reports ErrClosed (or tries again,
// if it was cancelled): were it to run the end sequence too, it could
// poison the arena of the record's next use. Only resume, for Reclaim
// after it took the ownership over from a dead owner (whose close may have
// died half-way), runs it on a record already Closing (from step 2) or
// Finishing (from step 3: every step of the end sequence may be run
// again).
//
// The segment's Close ends a close that waits for pins with shm.ErrClosed
// at the next wake, the record reopened; one past the point of no return
// (Finishing) runs to its end, and so does a close begun after the
// segment's Close (late).
func (s *Space) closeTxn(ctx context.Context, idx int, gen uint32, resume bool) error {
	s.closing.Add(1) // before the check: see Space.closing
	defer s.closing.Add(-1)
	if s.closed.Load() {
		return ErrSpaceClosed
	}
	// A close begun after the segment's Close ends a transaction of this
	// process (a release, as Pin.Release is): it runs to its end, and the
	// segment's Close no longer stops its waits.
	late := s.seg.Closed()
	rec := s.recs[idx]
	open, closing := ctlWord(stateOpen, gen, 0), ctlWord(stateClosing, gen, 0)
	finishing := ctlWord(stateFinishing, gen, 0)
	if resume && rec.Ctl.Load() == finishing {
		// Past the point of no return: ctx no longer matters.
		if err := s.drainFinishing(idx); err != nil {
			return err
		}
		return s.finish(idx, finishing)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if rec.Ctl.CompareAndSwap(open, closing) {
			break
		}
		c := rec.Ctl.Load()
		if resume && c == closing {
			break
		}
		if c != closing && c != finishing {
			if c == open {
				continue // a cancelled close reopened it meanwhile
			}
			if err := refErr(c, gen); err != nil {
				return s.unlessClosed(err)
			}
			return s.unlessClosed(ErrWrongMode)
		}
		if err := s.awaitEnd(ctx, Ref{Txn: uint32(idx), Gen: gen}, late); err != nil {
			return err
		}
	}
	if err := s.settle(ctx, idx, closing, late); err != nil {
		if !rec.Ctl.CompareAndSwap(closing, open) {
			// Not reopened: on a closed segment the record stays Closing
			// in the file, and ctx.Err() would say it had been.
			return s.unlessClosed(err)
		}
		wake(drain{&rec.Drain, &rec.Sleepers})
		return err
	}
	return s.finish(idx, finishing)
}

// settle takes record idx, Closing with Ctl word closing, to Finishing:
// it waits until no live process counts a pin on it, flips it to
// Finishing, and waits for the pins that were taken in between. On a done
// ctx it returns ctx.Err() with the record still Closing, for the caller
// to reopen; ErrCorrupt if the record left Closing under it (only its
// closer moves it); shm.ErrClosed once the segment is closed.
//
// The pins that can appear between the count and the flip are those of
// other closers promoting into this transaction (finalizePromotions pins
// a Closing destination) and those of pinners that back out at once. A
// promoter increments and then re-checks for Open or Closing; the flip
// comes before the closer's next count: of the two, at least one sees the
// other, so a promoter either backs out (and skips the transaction, which
// ends with its cells) or is counted and waited for.
func (s *Space) settle(ctx context.Context, idx int, closing uint64, late bool) error {
	rec := s.recs[idx]
	if err := s.waitDrained(ctx, drain{&rec.Drain, &rec.Sleepers}, idx, late); err != nil {
		return err
	}
	if testHookDrained != nil {
		testHookDrained(idx)
	}
	if !rec.Ctl.CompareAndSwap(closing, withState(closing, stateFinishing)) {
		return s.unlessClosed(fmt.Errorf("%w: record %d left Closing under its closer", ErrCorrupt, idx))
	}
	return s.drainFinishing(idx)
}

// drainFinishing waits until no live process counts a pin on record idx,
// which is Finishing: the pins left are promoters' and pinners' about to
// back out, which never block while they hold them, so there is no context
// to cancel the wait with (the record could not be reopened anyway), and
// the segment's Close does not end it either.
func (s *Space) drainFinishing(idx int) error {
	rec := s.recs[idx]
	// Past the point of no return, and the pins left are never held for
	// long: the segment's Close does not stop this wait either, so a
	// Finishing record is never left half-way for this process's life.
	return s.waitDrained(context.Background(), drain{&rec.Drain, &rec.Sleepers}, idx, true)
}

// waitDrained sleeps until no live process counts a pin in column col of
// the pin table (a record's, or the global column), or ctx is done, or the
// segment is closed (shm.ErrClosed; sleeps are bounded by
// livenessInterval) unless late: the wait began after the segment's Close.
func (s *Space) waitDrained(ctx context.Context, d drain, col int, late bool) error {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { _, _ = futex.WakeAll(d.seq) })
		defer stop()
	}
	dead := map[uint64]bool{}
	check := false
	st := s.recordStats(col)
	var start int64 // when the wait began; 0 while the pins have not made it wait
	for {
		if !late && s.seg.Closed() {
			return s.waited(st, start, shm.ErrClosed)
		}
		ticket := sleepers.Register(d.sleepers)
		seq := d.seq.Load()
		if s.pinCount(col, dead, check) == 0 {
			sleepers.Unregister(d.sleepers, ticket)
			s.raceAcquirePins(col)
			return s.waited(st, start, nil)
		}
		if start == 0 {
			start = mono.Now()
		}
		st.AddSleep()
		err := futex.Wait(d.seq, seq, livenessInterval)
		sleepers.Unregister(d.sleepers, ticket)
		if err := ctx.Err(); err != nil {
			return s.waited(st, start, err)
		}
		// Only a sleep that timed out looks at liveness: a wake means a
		// pin was released, and pins normally are.
		check = errors.Is(err, futex.ErrTimeout)
	}
}

// raceAcquirePins tells the race detector that every pin of column col
// has been released: what their holders did under them happens-before what
// the closer does next (see internal/racesync). A pin's Release releases
// its counter, in the pin row of its Space; the closer acquires the
// column's counter in every row, as pinCount reads them.
func (s *Space) raceAcquirePins(col int) {
	if racesync.Enabled {
		for row := range s.geo.rows {
			racesync.Acquire(s.geo.counter(row, col))
		}
	}
}

// pinCount sums column col over the pin rows of live processes. With
// check, it asks the process table about every row that counts pins, and
// remembers in dead the processes that died: their pins no longer count.
// A live process's pins always count.
func (s *Space) pinCount(col int, dead map[uint64]bool, check bool) uint64 {
	var n uint64
	for row := range s.geo.rows {
		id := s.geo.rowIdent(row).Load()
		if id == 0 || dead[id] {
			continue
		}
		c := s.geo.counter(row, col).Load()
		if c == 0 {
			continue
		}
		if check && !s.seg.OwnerAlive(id) {
			dead[id] = true
			continue
		}
		n += uint64(c)
	}
	return n
}

// finish runs the end sequence of a drained transaction, in the
// order. finishing is its Ctl word (state Finishing).
func (s *Space) finish(idx int, finishing uint64) error {
	rec := s.recs[idx]
	gen := ctlGen(finishing)
	if testHookFinishing != nil {
		testHookFinishing(idx)
	}
	s.finalizePromotions(idx, gen)
	start, size, ok := s.geo.arenaBounds(rec.Arena.Load())
	if ok {
		s.destroyUnpromoted(rec, start, size)
		arena := s.geo.region[start : start+size]
		for i := range arena {
			arena[i] = poisonByte
		}
	}
	// Only the closer moves a Finishing record, so this CAS fails only on
	// a corrupted record.
	if !rec.Ctl.CompareAndSwap(finishing, withState(finishing, stateClosed)) {
		return fmt.Errorf("%w: record %d left Finishing under its closer", ErrCorrupt, idx)
	}
	wake(drain{&rec.Drain, &rec.Sleepers})
	return nil
}

// finalizePromotions copies the objects of transaction idx that cells of
// other transactions refer to into those cells, and rebinds the cells.
// Each destination is pinned meanwhile with a promotion pin (pinPromote),
// so it cannot end under the copy. A destination that is Closing is
// promoted into like an open one: its close may yet be cancelled, and its
// cells must then hold the copies. One that is Finishing is skipped: its
// cells end with it. The caller is itself Finishing and never waits here
// for another closer, so two transactions that link each other's objects
// and close together cannot deadlock: at most one of them sees the other
// still Closing and promotes into it, and that one only holds a pin while
// it copies.
func (s *Space) finalizePromotions(idx int, gen uint32) {
	src := s.recs[idx]
	for d, drec := range s.recs {
		if d == idx || drec.Promos.Load() == 0 {
			continue
		}
		var p Pin
		c, ok := s.pinPromote(&p, d)
		if !ok {
			continue
		}
		if testHookPromotePinned != nil {
			testHookPromotePinned(d)
		}
		next := drec.Promos.Load()
		// The walk is bounded by the cells the arena can hold, too, so that
		// a corrupted list (a cycle, a wild count) cannot keep it going.
		steps := min(uint64(drec.NPromos.Load()), uint64(drec.Used.Load())/(headerSize+cellBodySize))
		for ; next != 0 && steps > 0; steps-- {
			kind, room, cb, err := s.object(Ref{Txn: uint32(d), Gen: ctlGen(c), Off: next - 1})
			if err != nil || kind != kindCell {
				break // a corrupted list: stop rather than wander
			}
			next = cb.Next.Load()
			if cb.TTxn.Load() != uint32(idx) || cb.TGen.Load() != gen || cb.State.Load() != cellOriginal {
				continue
			}
			t := Ref{Txn: uint32(idx), Gen: gen, Off: cb.TOff.Load()}
			tk, data, _, err := s.object(t)
			if err != nil || tk != kindObject || len(data) != len(room) {
				continue
			}
			copy(room, data)
			cb.State.Store(cellPromoted)
			start, _, _ := s.geo.arenaBounds(src.Arena.Load())
			h := s.header(start + uint64(t.Off))
			if w := h.Word.Load(); hdrState(w) == objLive {
				h.Word.Store(headerWord(kindObject, objPromoted, hdrSize(w)))
				src.Promoted.Add(1)
			}
		}
		p.Release()
	}
}

// pinPromote takes a promotion pin on record d: a per-transaction pin that,
// unlike TryPin's, is taken on a Closing transaction too (the original design's
// try_pin otherwise: increment, re-check, back out). It fails on any other
// state, and if the record changed generation between the check and the
// re-check. c is the Ctl word it pinned under.
func (s *Space) pinPromote(p *Pin, d int) (c uint64, ok bool) {
	rec := s.recs[d]
	c = rec.Ctl.Load()
	if st := ctlState(c); st != stateOpen && st != stateClosing {
		return 0, false
	}
	ctr := s.ctrs[d]
	ctr.Add(1)
	now := rec.Ctl.Load()
	if st := ctlState(now); (st != stateOpen && st != stateClosing) || now&^stateMask != c&^stateMask || s.closed.Load() {
		// Finishing (or reused, or Space.Close): back out, and wake the
		// closer, which may have counted this pin.
		ctr.Add(^uint32(0))
		if ctlEnding(rec.Ctl.Load()) {
			wake(drain{&rec.Drain, &rec.Sleepers})
		}
		return 0, false
	}
	*p = Pin{ctr: ctr, rec: rec}
	return c, true
}

// destroyUnpromoted marks every live object of the arena destroyed (the
// original design's destructors: here the ledger of what ended unpromoted).
func (s *Space) destroyUnpromoted(rec *record, start, size uint64) {
	used := min(uint64(rec.Used.Load()), size)
	for off := uint64(0); off+headerSize <= used; {
		h := s.header(start + off)
		capacity := uint64(h.Cap.Load())
		// A header that is not one, or a capacity that would lead the walk
		// off the object grid, is a corrupted arena: stop, it is poisoned
		// next anyway.
		if h.Check.Load() != objMagic^uint32(off) || capacity%objAlign != 0 {
			return
		}
		w := h.Word.Load()
		if hdrKind(w) == kindObject && hdrState(w) == objLive {
			h.Word.Store(headerWord(kindObject, objDestroyed, hdrSize(w)))
			rec.Destroyed.Add(1)
		}
		off += headerSize + capacity
	}
}

// Reclaim closes transaction index if its owner died: it takes the
// ownership over (one CAS, so of several reclaimers one wins) and runs the
// close, waiting for the pins of live readers like the owner would.
// ErrOwnerAlive if the owner lives, ErrClosed if the record is not in use.
// A close that fails (ctx done while live readers keep their pins) gives
// the ownership back to the dead owner, so that the transaction can be
// reclaimed again. A transaction whose closer died Finishing is finished
// whatever ctx does (a barrier-mode one needs the barrier's leader lock
// first, which ctx may interrupt).
func (s *Space) Reclaim(ctx context.Context, index int) error {
	if err := s.usable(); err != nil {
		return err
	}
	if index < 0 || index >= len(s.recs) {
		return ErrBadRef
	}
	rec := s.recs[index]
	var c, owner uint64
	for {
		c = rec.Ctl.Load()
		if !ctlLive(c) {
			return s.unlessClosed(ErrClosed)
		}
		if testHookReclaimRead != nil {
			testHookReclaimRead(index)
		}
		owner = rec.Owner.Load()
		if s.seg.OwnerAlive(owner) || !rec.Owner.CompareAndSwap(owner, s.ident) {
			// A CAS that failed on a segment closed since the owner was read
			// says nothing of the owner.
			return s.unlessClosed(ErrOwnerAlive)
		}
		// The owner was read after the state: the record may have been
		// closed meanwhile (by another reclaimer) and begun anew, the owner
		// taken over being the new use's. Once the ownership is ours, the
		// generation can no longer change under us (only an owner or its
		// reclaimer closes a record): if it is still the one read, the
		// record is ours to close; otherwise give the ownership back and
		// look again.
		if now := rec.Ctl.Load(); ctlLive(now) && ctlGen(now) == ctlGen(c) {
			break
		}
		rec.Owner.CompareAndSwap(s.ident, owner)
	}
	var err error
	if c&flagBarrier != 0 {
		err = s.closeBarrier(ctx, []closeItem{{idx: index, gen: ctlGen(c)}})
	} else {
		err = s.closeTxn(ctx, index, ctlGen(c), true)
	}
	if err != nil && ctlGen(rec.Ctl.Load()) == ctlGen(c) && ctlLive(rec.Ctl.Load()) {
		rec.Owner.CompareAndSwap(s.ident, owner)
	}
	return err
}
