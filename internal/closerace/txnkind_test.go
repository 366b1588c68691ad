package closerace_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

// txn-close: each waiter closes a transaction of its own
// (RequestCloseAndWait), which waits for a pin the helper process holds
// on it. A close the segment's Close interrupts must call itself off (the
// transaction open again, nothing Closing left); one that completed shows
// the transaction closed. The waiter's cleanup closes a transaction left
// open once the helper unpinned it: a close after the segment's Close is
// this process's release of its transaction.
func txnCloseKind() kind {
	return kind{
		name: "txn-close", waiters: 4,
		hold: func(seg *shm.Segment) (func() error, error) {
			if err := txnPins.open(seg); err != nil {
				return nil, err
			}
			return txnPins.releaseAll, nil
		},
		waiter: func(tb testing.TB, seg *shm.Segment, h *holder) (waiter, error) {
			sp, err := txn.Open(seg)
			if err != nil {
				return nil, err
			}
			tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 64})
			if err != nil {
				return nil, err
			}
			ref, err := tx.Alloc([]byte("pinned by the helper"))
			if err != nil {
				return nil, err
			}
			h.do(tb, "pin "+ref.String(), "pinned")
			return &txnWaiter{tb: tb, h: h, sp: sp, tx: tx, ref: ref}, nil
		},
		held: func(tb testing.TB, o *shm.Segment) int { return len(ownTxns(tb, o)) },
		// A close begun after the segment's Close is a release that runs
		// to its end, waiting for the helper's pin: the test closes the
		// segment only once every close has begun (its transaction is
		// Closing).
		started: func(tb testing.TB, seg *shm.Segment, waiters int) bool {
			n := 0
			for _, ti := range ownTxns(tb, seg) {
				if ti.State == txn.StateClosing {
					n++
				}
			}
			return n == waiters
		},
		checkGrants: func(tb testing.TB, o *shm.Segment, granted, waiters int) string {
			open := 0
			for _, ti := range ownTxns(tb, o) {
				if ti.State != txn.StateOpen {
					return fmt.Sprintf("transaction %d of this process is %v: a close left half-way", ti.Index, ti.State)
				}
				open++
			}
			if open != waiters-granted {
				return fmt.Sprintf("%d transactions of this process open, want %d (of %d closes, %d completed)", open, waiters-granted, waiters, granted)
			}
			return ""
		},
		trace: func(tb testing.TB, o *shm.Segment) string {
			snap, err := txn.Inspect(o, false)
			require.NoError(tb, err)
			// The helper's row stays while its Space is open: only pins,
			// and this process's rows, are the waiters' business.
			var rows []txn.RowInfo
			for _, r := range snap.Rows {
				if r.Owner == self || r.Pins != 0 || r.GlobalPins != 0 {
					rows = append(rows, r)
				}
			}
			return fmt.Sprintf("leader %x txns %+v rows %+v", snap.BarrierLeader, snap.Txns, rows)
		},
		take: func(o *shm.Segment) error {
			sp, err := txn.Open(o)
			if err != nil {
				return err
			}
			defer sp.Close()
			tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 64})
			if err != nil {
				return err
			}
			return tx.RequestCloseAndWait(context.Background())
		},
	}
}

// ownTxns are the transactions of this process in use (open, closing or
// finishing).
func ownTxns(tb testing.TB, o *shm.Segment) []txn.TxnInfo {
	snap, err := txn.Inspect(o, false)
	require.NoError(tb, err)
	var own []txn.TxnInfo
	for _, ti := range snap.Txns {
		if ti.Owner == self {
			own = append(own, ti)
		}
	}
	return own
}

type txnWaiter struct {
	tb  testing.TB
	h   *holder
	sp  *txn.Space
	tx  *txn.Txn
	ref txn.Ref
}

func (w *txnWaiter) acquire() error { return w.tx.RequestCloseAndWait(context.Background()) }
func (w *txnWaiter) release() error { return nil } // the transaction is closed: nothing is held

// close unpins the helper's pin (if the close was interrupted, it is still
// there) and closes the transaction if it is still open: after the
// segment's Close, as a release.
func (w *txnWaiter) close() error {
	w.h.do(w.tb, "unpin "+w.ref.String(), "unpinned")
	if w.tx.Open() {
		if err := w.tx.RequestCloseAndWait(context.Background()); err != nil {
			return err
		}
	}
	return w.sp.Close()
}

// txnPins is the helper's side: a Space, and the pins it holds by Ref.
var txnPins = &pinSet{pins: map[string]*txn.Pin{}}

type pinSet struct {
	sp   *txn.Space
	pins map[string]*txn.Pin
}

func (p *pinSet) open(seg *shm.Segment) error {
	if p.sp != nil {
		return nil
	}
	sp, err := txn.Open(seg)
	p.sp = sp
	return err
}

func (p *pinSet) do(cmd, ref string) error {
	switch cmd {
	case "pin":
		r, err := txn.ParseRef(ref)
		if err != nil {
			return err
		}
		pin, err := p.sp.TryPin(r)
		if err != nil {
			return err
		}
		p.pins[ref] = &pin
	case "unpin":
		if pin, ok := p.pins[ref]; ok {
			pin.Release()
			delete(p.pins, ref)
		}
	}
	return nil
}

// releaseAll releases every pin: the helper's "release".
func (p *pinSet) releaseAll() error {
	for ref, pin := range p.pins {
		pin.Release()
		delete(p.pins, ref)
	}
	return nil
}
