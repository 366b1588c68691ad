package txn

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/shmlock/shmlock/internal/futex"
	"github.com/shmlock/shmlock/internal/mono"
	"github.com/shmlock/shmlock/internal/racesync"
	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/shm"
)

// testHookPinned runs between a pin's increment and its re-check of the
// state, so a test can close the transaction right there (export_test.go).
var testHookPinned func()

// testHookSourceRefused runs in Borrow after a promotion cell's source
// refused its pin (ErrClosing), before the source's state is read again;
// it gets the source's record index.
var testHookSourceRefused func(idx int)

// testHookUnchecked runs where the segment's Close can come between an
// operation's last check of it and its use of the segment: after the
// stores of Open, Begin, Alloc and Link (stored), before a pinned object
// is read (export_test.go).
var testHookUnchecked func(stored bool)

// Pin keeps one transaction from being closed: while it is held, the
// transaction's close waits, and its objects stay valid. The zero Pin holds
// nothing. Release it as soon as the read is done; never hold one across
// blocking I/O or a lock. A Pin must not be copied after first use (a copy
// would release twice; it has no noCopy marker only because TryPin returns
// it by value, which keeps the fast path free of allocations) and is used
// by one goroutine at a time. What a pin's holder did before Release
// happens before the return of the close that waited for the pin
// (RequestCloseAndWait, Barrier.Close), for the race detector too.
type Pin struct {
	ctr *atomic.Uint32 // the counter incremented, in this Space's pin row
	// Exactly one of rec and bar is set: the record of a per-transaction
	// pin, whose state says whether a closer waits and whose Drain it
	// sleeps on, or the barrier of a global pin (its Leader, its Drain).
	rec *record
	bar *barrierWords
	own *atomic.Int32 // pins of the owner's Txn handle (closer detection)
}

// Held reports whether p holds a pin.
func (p *Pin) Held() bool { return p.ctr != nil }

// Release releases the pin; a second Release does nothing. If the
// transaction is closing or finishing (or the barrier is up, for a global
// pin), it wakes the closer. After the segment's Close, Release can no
// longer reach the file: the pin stays counted there, and holds up the
// transaction's close, until this process exits. Release pins before
// closing the segment.
func (p *Pin) Release() {
	ctr := p.ctr
	if ctr == nil {
		return
	}
	p.ctr = nil
	if p.own != nil {
		p.own.Add(-1)
	}
	if racesync.Enabled { // before the decrement a closer may be waiting for (raceAcquirePins)
		racesync.Release(ctr)
	}
	ctr.Add(^uint32(0))
	if r := p.rec; r != nil {
		if ctlEnding(r.Ctl.Load()) {
			wake(drain{&r.Drain, &r.Sleepers})
		}
	} else if b := p.bar; b.Leader.Load() != 0 {
		wake(drain{&b.Drain, &b.Sleepers})
	}
}

// TryPin pins the transaction r belongs to. It fails with ErrClosing while
// the transaction closes, ErrClosed after, ErrStale if its record has been
// reused, ErrBadRef for a Ref that names no record, ErrSpaceClosed after
// s.Close, shm.ErrClosed after the segment's Close, ErrInvalid for a Space
// not made by Open. A transaction begun in barrier mode gets a global pin,
// any other a per-transaction pin: the caller need not know which.
func (s *Space) TryPin(r Ref) (Pin, error) {
	var p Pin
	err := s.pin(&p, r.Txn, r.Gen)
	return p, err
}

// pin is the try-pin: check, increment, re-check, back out if a
// closer came in between. The checks compare the whole Ctl word, so the
// generation is checked with the state.
func (s *Space) pin(p *Pin, idx, gen uint32) error {
	if s == nil || int(idx) >= len(s.recs) {
		if s == nil || s.seg == nil {
			return s.usable() // no Space: ErrInvalid, not the Ref's fault
		}
		return ErrBadRef
	}
	rec := s.recs[idx]
	want := ctlWord(stateOpen, gen, 0)
	if c := rec.Ctl.Load(); c != want {
		if c == want|flagBarrier && gen != 0 {
			return s.pinGlobal(p, rec, c)
		}
		if err := s.usable(); err != nil {
			return err // a closed segment reads a zero Ctl
		}
		return refErr(c, gen)
	}
	ctr := s.ctrs[idx]
	ctr.Add(1)
	if testHookPinned != nil {
		testHookPinned()
	}
	// The segment's closed flag is the fast path's one added load: a
	// closed segment's Ctl reads zero and fails the first check, unless
	// this process wrote there after Close (an operation that raced with
	// it), and a pin must not succeed on those private pages either.
	if c := rec.Ctl.Load(); c != want || s.closed.Load() || s.seg.Closed() {
		// Lost the race with Closing (or a reuse, or Space.Close, or the
		// segment's Close): back out, and wake the closer, which may have
		// counted this pin.
		ctr.Add(^uint32(0))
		if ctlEnding(rec.Ctl.Load()) {
			wake(drain{&rec.Drain, &rec.Sleepers})
		}
		if err := s.usable(); err != nil {
			return err
		}
		if err := refErr(c, gen); err != nil {
			return err
		}
		return ErrClosing
	}
	*p = Pin{ctr: ctr, rec: rec}
	return nil
}

// pinGlobal pins a barrier-mode transaction: a global pin, which the
// barrier's leader waits for. The transaction's state is checked after the
// barrier's, so a leader that flipped the barrier and then the state is
// seen either way.
func (s *Space) pinGlobal(p *Pin, rec *record, want uint64) error {
	if l := s.bar.Leader.Load(); l != 0 {
		if err := s.usable(); err != nil {
			return err
		}
		s.clearDeadLeader(l)
		return ErrClosing
	}
	ctr := s.ctrs[len(s.recs)]
	ctr.Add(1)
	if testHookPinned != nil {
		testHookPinned()
	}
	if lead, c := s.bar.Leader.Load(), rec.Ctl.Load(); lead != 0 || c != want || s.closed.Load() || s.seg.Closed() {
		// Lost the race with a leader (or a close, or Space.Close, or the
		// segment's Close): back out, and wake the leader, which may have
		// counted this pin.
		ctr.Add(^uint32(0))
		if s.bar.Leader.Load() != 0 {
			wake(drain{&s.bar.Drain, &s.bar.Sleepers})
		}
		if err := s.usable(); err != nil {
			return err
		}
		if err := refErr(c, ctlGen(want)); err != nil {
			return err
		}
		return ErrClosing
	}
	*p = Pin{ctr: ctr, bar: s.bar}
	return nil
}

// clearDeadLeader lowers a barrier whose leader died with it up.
func (s *Space) clearDeadLeader(l uint64) {
	if !s.seg.OwnerAlive(l) {
		s.bar.Leader.CompareAndSwap(l, 0)
	}
}

// pinTxn pins a transaction with a per-transaction pin whatever its mode,
// if its Ctl word is still c: the pins of Link and of Alloc on the
// transactions they write in or read from. (A global pin there could
// deadlock against a barrier close.) Promotions pin with pinPromote.
func (s *Space) pinTxn(p *Pin, idx int, c uint64) bool {
	rec := s.recs[idx]
	ctr := s.ctrs[idx]
	ctr.Add(1)
	if rec.Ctl.Load() != c || s.closed.Load() {
		ctr.Add(^uint32(0))
		if ctlEnding(rec.Ctl.Load()) {
			wake(drain{&rec.Drain, &rec.Sleepers})
		}
		return false
	}
	*p = Pin{ctr: ctr, rec: rec}
	return true
}

// SRef is a scoped read borrow: the bytes of one object, valid
// while the SRef holds its pins (one on the transaction the Ref names, one
// more on the source of a promotion cell not yet promoted). Release it when
// the read is done; a second Release does nothing. Like a Pin, an SRef
// must not be copied after first use (a copy would release twice); it has
// no noCopy marker only because Borrow returns it by value, which keeps
// borrowing free of allocations.
type SRef struct {
	ref  Ref
	data []byte
	pins [2]Pin
}

// Bytes returns the object's data. The slice aliases the segment: it is
// valid, and its bytes do not change, until Release or the segment's Close
// (after which it reads zeros). Do not write to it.
func (b *SRef) Bytes() []byte { return b.data }

// Ref is the reference b was borrowed through.
func (b *SRef) Ref() Ref { return b.ref }

// Release releases the borrow's pins (see Pin.Release for what it cannot
// do after the segment's Close).
func (b *SRef) Release() {
	b.data = nil
	b.pins[1].Release()
	b.pins[0].Release()
}

// Borrow pins r's transaction and returns r's object. Through a promotion
// cell it reads the target in its source transaction, or its copy once the
// source has closed; when the source is closing, Borrow releases its pins
// and waits for the close to end, so the reader sees the copy (or ErrClosed
// if the copy was not made because the cell's own transaction was
// finishing then). A close whose closer died ends only when Space.Reclaim
// takes it over: Borrow stops waiting for it at its next liveness check
// (within 50 ms) and fails with ErrClosing, as TryPin of the source does.
// It fails like TryPin, with ErrBadRef if r names no object, or with
// ctx.Err(). A Borrow asleep waiting for a close when the segment is
// closed returns shm.ErrClosed at its next liveness check, and when s is
// closed, ErrSpaceClosed.
func (s *Space) Borrow(ctx context.Context, r Ref) (SRef, error) {
	var b SRef
	err := s.borrow(ctx, r, &b)
	return b, err
}

// borrow is Borrow into b, which holds nothing when it fails.
func (s *Space) borrow(ctx context.Context, r Ref, b *SRef) error {
	b.ref = r
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.pin(&b.pins[0], r.Txn, r.Gen); err != nil {
			return err
		}
		kind, data, cell, err := s.object(r)
		if err != nil {
			b.Release()
			return err
		}
		if kind == kindObject {
			b.data = data
			return nil
		}
		if cell.State.Load() == cellPromoted {
			b.data = data
			return nil
		}
		t := Ref{Txn: cell.TTxn.Load(), Gen: cell.TGen.Load(), Off: cell.TOff.Load()}
		err = s.pin(&b.pins[1], t.Txn, t.Gen)
		if err == nil {
			kind, tdata, _, err := s.object(t)
			if err == nil && kind != kindObject {
				err = ErrBadRef
			}
			if err != nil {
				b.Release()
				return err // ErrBadRef, or shm.ErrClosed
			}
			b.data = tdata
			return nil
		}
		if err == ErrBadRef {
			b.Release()
			return ErrBadRef // a corrupted cell
		}
		if err == shm.ErrClosed || err == ErrSpaceClosed {
			b.Release()
			return err // not the source's end: this side's
		}
		if err != ErrClosing {
			// The source ended: it promoted the cell before marking
			// itself Closed, unless this cell's transaction was closing.
			if cell.State.Load() == cellPromoted {
				b.data = data
				return nil
			}
			b.Release()
			return s.unlessClosed(ErrClosed)
		}
		b.Release()
		if testHookSourceRefused != nil {
			testHookSourceRefused(int(t.Txn))
		}
		if c := s.recs[t.Txn].Ctl.Load(); !ctlEnding(c) {
			if c&flagBarrier != 0 && s.bar.Leader.Load() != 0 {
				return s.unlessClosed(ErrClosing) // the barrier is up, for other transactions
			}
			// The source's close ended since the pin looked (the cell
			// is promoted now), or was called off (it is open again):
			// look again.
			continue
		}
		if err := s.awaitEnd(ctx, t, false); err != nil {
			return err
		}
	}
}

// awaitEnd sleeps until t's transaction is no longer Closing or Finishing
// in t's generation, or ctx is done, or the segment is closed
// (shm.ErrClosed; sleeps are bounded by livenessInterval) unless late (see
// waitDrained), or its closer is found dead at a liveness check
// (ErrClosing), or s is closed (ErrSpaceClosed).
func (s *Space) awaitEnd(ctx context.Context, t Ref, late bool) error {
	rec := s.recs[t.Txn]
	closing, finishing := ctlWord(stateClosing, t.Gen, 0), ctlWord(stateFinishing, t.Gen, 0)
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { _, _ = futex.WakeAll(&rec.Drain) })
		defer stop()
	}
	st := s.recordStats(int(t.Txn))
	var start int64 // when the wait began; 0 before it slept
	for {
		if !late && s.seg.Closed() {
			return s.waited(st, start, shm.ErrClosed)
		}
		// A Borrow asleep here holds no pin, so s may be closed under it.
		// A close through s (closeTxn) counts in closing, which keeps
		// Space.Close from succeeding: the flag it sees then is the
		// moment a refused Space.Close raises it, not to be acted on.
		if s.closed.Load() && s.closing.Load() == 0 {
			return s.waited(st, start, ErrSpaceClosed)
		}
		ticket := sleepers.Register(&rec.Sleepers)
		seq := rec.Drain.Load()
		if c := rec.Ctl.Load() &^ flagBarrier; c != closing && c != finishing {
			sleepers.Unregister(&rec.Sleepers, ticket)
			return s.waited(st, start, nil)
		}
		if start == 0 {
			start = mono.Now()
		}
		st.AddSleep()
		err := futex.Wait(&rec.Drain, seq, livenessInterval)
		sleepers.Unregister(&rec.Sleepers, ticket)
		if err := ctx.Err(); err != nil {
			return s.waited(st, start, err)
		}
		// A closer that died ends nothing: its close resumes only when a
		// Reclaim takes the record over (the owner is then the live
		// reclaimer), which may never come. The record refuses pins
		// meanwhile, and so does this wait. A closer of this process is
		// alive whatever the segment can tell (a second close of the
		// owner's waits for the first).
		if owner := rec.Owner.Load(); errors.Is(err, futex.ErrTimeout) && owner != s.ident && !s.seg.OwnerAlive(owner) {
			if c := rec.Ctl.Load() &^ flagBarrier; c == closing || c == finishing {
				return s.waited(st, start, s.unlessClosed(ErrClosing))
			}
		}
	}
}

// livenessInterval is the longest a closer sleeps before it checks whether
// the processes whose pins it waits for are still alive.
const livenessInterval = 50 * time.Millisecond

// object validates r against its (pinned) transaction and returns the
// object's data, or for a cell its copy area and body. shm.ErrClosed
// rather than ErrBadRef when the segment closed after the pin: the words
// read were then the zeros of private pages, not the object's.
func (s *Space) object(r Ref) (kind uint64, data []byte, cell *cellBody, err error) {
	if testHookUnchecked != nil {
		testHookUnchecked(false)
	}
	kind, data, cell, err = s.objectAt(r)
	if err != nil {
		return 0, nil, nil, s.unlessClosed(err)
	}
	return kind, data, cell, nil
}

func (s *Space) objectAt(r Ref) (kind uint64, data []byte, cell *cellBody, err error) {
	rec := s.recs[r.Txn]
	start, size, ok := s.geo.arenaBounds(rec.Arena.Load())
	if !ok {
		return 0, nil, nil, ErrBadRef
	}
	used := uint64(rec.Used.Load())
	off := uint64(r.Off)
	if used > size || off%objAlign != 0 || off+headerSize > used {
		return 0, nil, nil, ErrBadRef
	}
	h := s.header(start + off)
	if h.Check.Load() != objMagic^r.Off {
		return 0, nil, nil, ErrBadRef
	}
	w := h.Word.Load()
	capacity := uint64(h.Cap.Load())
	body := start + off + headerSize
	if off+headerSize+capacity > used {
		return 0, nil, nil, ErrBadRef
	}
	switch hdrKind(w) {
	case kindObject:
		n := uint64(hdrSize(w))
		if n > capacity {
			return 0, nil, nil, ErrBadRef
		}
		return kindObject, s.geo.region[body : body+n : body+n], nil, nil
	case kindCell:
		if capacity < cellBodySize {
			return 0, nil, nil, ErrBadRef
		}
		c := s.cell(body)
		n := uint64(c.TSize.Load())
		if cellBodySize+n > capacity {
			return 0, nil, nil, ErrBadRef
		}
		d := body + cellBodySize
		return kindCell, s.geo.region[d : d+n : d+n], c, nil
	}
	return 0, nil, nil, ErrBadRef
}
