package txn

import (
	"context"
	"errors"
	"fmt"

	"github.com/shmlock/shmlock/spinlock"
)

// Barrier closes transactions begun with BeginOptions.Barrier through a
// global close barrier: readers of such transactions
// take global pins (TryPin and Borrow do that by themselves), and a close
// raises the barrier, which makes every new global pin fail, waits for the
// global pins to drain, closes its batch of transactions one by one and
// lowers the barrier. One close at a time holds the barrier, across
// processes (a robust leader lock: a leader that dies is taken over).
type Barrier struct {
	s *Space
}

// NewBarrier returns the barrier of s's segment.
func NewBarrier(s *Space) (*Barrier, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if _, err := s.barrierLock(); err != nil {
		return nil, err
	}
	return &Barrier{s: s}, nil
}

type closeItem struct {
	idx int
	gen uint32
}

// Close closes txs, which must be barrier-mode transactions of this
// process (ErrWrongMode otherwise) with no pin taken through their handles
// (ErrCloserPinned); nothing changes on those errors. The transactions are
// the batch the leader closes under one raising of the barrier. On a done
// context the transactions not yet closed are reopened and ctx.Err() is
// returned. A transaction that is already closed gives ErrClosed, joined
// with the others' errors. A batch with nothing left to close (empty, or
// of closed transactions) waits for no pin. A nil Txn, or one given twice,
// is ErrInvalid, and nothing changes.
//
// A Close in progress when the segment is closed returns shm.ErrClosed at
// its next wake, having lowered the barrier and reopened the transactions
// still Closing (one already Finishing is finished first). After the segment's Close a Barrier cannot
// close (its leader lock is an acquisition): close barrier-mode
// transactions before the segment.
func (b *Barrier) Close(ctx context.Context, txs ...*Txn) error {
	items := make([]closeItem, 0, len(txs))
	seen := make(map[*Txn]bool, len(txs))
	for _, t := range txs {
		if t == nil || seen[t] {
			return fmt.Errorf("%w: a transaction nil or given twice in a barrier batch", ErrInvalid)
		}
		seen[t] = true
		if t.s != b.s || !t.barrier {
			return ErrWrongMode
		}
		if t.own.Load() != 0 {
			return ErrCloserPinned
		}
		items = append(items, closeItem{idx: int(t.idx), gen: t.gen})
	}
	return b.s.closeBarrier(ctx, items)
}

// closeBarrier is the leader's work.
func (s *Space) closeBarrier(ctx context.Context, items []closeItem) error {
	if err := s.usable(); err != nil {
		return err
	}
	s.closing.Add(1) // before the check: see Space.closing
	defer s.closing.Add(-1)
	if s.closed.Load() {
		return ErrSpaceClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(items) == 0 {
		return nil // nothing to raise the barrier for, nor to wait for
	}
	lock, err := s.barrierLock()
	if err != nil {
		return err
	}
	var g spinlock.Guard
	if err := g.LockContext(ctx, lock, spinlock.NewHolder()); err != nil {
		return err
	}
	defer g.Release()
	// A leader that died left the barrier up and perhaps its batch
	// Closing; the barrier is ours now, and its batch is closed by
	// Reclaim (its owner is dead).
	s.bar.Leader.Store(s.ident)
	defer func() {
		s.bar.Leader.Store(0)
		wake(drain{&s.bar.Drain, &s.bar.Sleepers})
	}()

	var errs []error
	batch := items[:0:0]
	for _, it := range items {
		rec := s.recs[it.idx]
		open, closing := ctlWord(stateOpen, it.gen, flagBarrier), ctlWord(stateClosing, it.gen, flagBarrier)
		finishing := ctlWord(stateFinishing, it.gen, flagBarrier)
		if !rec.Ctl.CompareAndSwap(open, closing) {
			// Closing or Finishing: the batch of a dead leader (Reclaim),
			// resumed from where it stopped.
			if c := rec.Ctl.Load(); c != closing && c != finishing {
				err := ownErr(refErr(c&^flagBarrier, it.gen))
				if err == nil {
					err = ErrWrongMode
				}
				errs = append(errs, fmt.Errorf("txn %d: %w", it.idx, err))
				continue
			}
		}
		batch = append(batch, it)
	}
	// A dead leader's transactions already Finishing end first: they can no
	// longer be reopened, whatever becomes of this close.
	closing := batch[:0]
	for _, it := range batch {
		finishing := ctlWord(stateFinishing, it.gen, flagBarrier)
		if s.recs[it.idx].Ctl.Load() == finishing {
			if err := s.drainFinishing(it.idx); err != nil {
				return err
			}
			if err := s.finish(it.idx, finishing); err != nil {
				return err
			}
			continue
		}
		closing = append(closing, it)
	}
	batch = closing
	if len(batch) == 0 {
		// Every item was closed already (or finished above): the global
		// pins are other transactions' business, and may never drain.
		return errors.Join(errs...)
	}
	err = s.waitDrained(ctx, drain{&s.bar.Drain, &s.bar.Sleepers}, len(s.recs), false)
	for i, it := range batch {
		closing := ctlWord(stateClosing, it.gen, flagBarrier)
		if err == nil {
			// Per-transaction pins: those of Link and of other closers'
			// promotions, never held for long.
			err = s.settle(ctx, it.idx, closing, false)
		}
		if err != nil {
			for _, undo := range batch[i:] {
				r := s.recs[undo.idx]
				if r.Ctl.CompareAndSwap(ctlWord(stateClosing, undo.gen, flagBarrier), ctlWord(stateOpen, undo.gen, flagBarrier)) {
					wake(drain{&r.Drain, &r.Sleepers})
				} else {
					err = s.unlessClosed(err) // not reopened (see closeTxn)
				}
			}
			return err
		}
		if err := s.finish(it.idx, withState(closing, stateFinishing)); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}
