package txn_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

// Once its segment is closed, every operation of a Space, Txn or Barrier
// opened on it, and Inspect and Open of the segment, fail with
// shm.ErrClosed and change nothing in the file, byte for byte; what the
// process had there at Close (a pin, its pin row, open transactions)
// stays, as another handle on the file sees, until released: the pin's
// Release and the Space's Close still reach the file. The operations
// still fail with shm.ErrClosed after that.
func TestUseAfterSegmentClose(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			other, path := newSegment(t, layout.Options{})
			seg, sp := openClosable(t, path)
			opts := txn.BeginOptions{ArenaBytes: 1024, Barrier: m.barrier}
			src, dst, obj, cell := linked(t, sp, opts, opts, 1, 40)
			b, err := txn.NewBarrier(sp)
			require.NoError(t, err)
			p, err := sp.TryPin(obj) // held across Close
			require.NoError(t, err)

			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			ops := []struct {
				name string
				op   func() error
			}{
				{"Open", func() error { _, err := txn.Open(seg); return err }},
				{"Inspect", func() error { _, err := txn.Inspect(seg, true); return err }},
				{"Begin", func() error { _, err := sp.Begin(opts); return err }},
				{"Space.TryPin", func() error { _, err := sp.TryPin(obj); return err }},
				{"Space.TryPin of a cell", func() error { _, err := sp.TryPin(cell); return err }},
				{"Space.Borrow", func() error { _, err := sp.Borrow(ctx, obj); return err }},
				{"Space.Borrow of a cell", func() error { _, err := sp.Borrow(ctx, cell); return err }},
				{"Txn.TryPin", func() error { _, err := src.TryPin(); return err }},
				{"Txn.Borrow", func() error { _, err := dst.Borrow(ctx, cell); return err }},
				{"Alloc", func() error { _, err := src.Alloc([]byte("more")); return err }},
				{"Link", func() error { _, err := dst.Link(obj); return err }},
				{"Link of its own object", func() error { _, err := src.Link(obj); return err }},
				{"Barrier.Close", func() error {
					if !m.barrier {
						_, err := sp.Begin(opts) // ErrWrongMode comes first: no call of the barrier's to make
						return err
					}
					return b.Close(ctx, src)
				}},
				{"NewBarrier", func() error { _, err := txn.NewBarrier(sp); return err }},
				{"Reclaim", func() error { return sp.Reclaim(ctx, src.Index()) }},
				{"Reclaim of a free record", func() error { return sp.Reclaim(ctx, sp.Records()-1) }},
			}

			before, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, seg.Close())
			for _, o := range ops {
				require.ErrorIs(t, o.op(), shm.ErrClosed, o.name)
			}
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, bytes.Equal(before, after), "an operation after Close changed the file")

			ti := txnInfo(t, other, src.Index())
			require.Equal(t, txn.StateOpen, ti.State, "Close does not close transactions")
			require.True(t, ti.OwnerAlive)
			snap, err := txn.Inspect(other, false)
			require.NoError(t, err)
			require.Len(t, snap.Rows, 1, "the Space's row is taken")
			row := snap.Rows[0]
			require.Equal(t, proc.Self().Pack(), row.Owner)
			if m.barrier {
				require.Equal(t, uint32(1), row.GlobalPins, "the pin held at Close still counts")
			} else {
				require.Equal(t, uint64(1), row.Pins, "the pin held at Close still counts")
			}

			require.ErrorIs(t, sp.Close(), txn.ErrPinsHeld)
			p.Release() // reaches the file
			if !m.barrier {
				// A transaction's close is this process's release of it.
				require.NoError(t, src.RequestCloseAndWait(ctx), "a close after the segment's Close")
				require.Equal(t, txn.StateClosed, txnInfo(t, other, src.Index()).State)
			}
			require.NoError(t, sp.Close(), "the Space gives its row up after the segment's Close")
			require.ErrorIs(t, sp.Close(), txn.ErrSpaceClosed)
			for _, o := range ops {
				require.ErrorIs(t, o.op(), shm.ErrClosed, o.name+" after Space.Close")
			}
			snap, err = txn.Inspect(other, false)
			require.NoError(t, err)
			require.Empty(t, snap.Rows, "the row was given up")
		})
	}
}

// A Space and its segment can be closed in either order, and the Space's
// row is given up either way. A second Space.Close is ErrSpaceClosed, and
// the operations fail with shm.ErrClosed.
func TestSpaceAndSegmentCloseOrder(t *testing.T) {
	t.Parallel()
	for _, spaceFirst := range []bool{true, false} {
		name := map[bool]string{true: "space first", false: "segment first"}[spaceFirst]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			other, path := newSegment(t, layout.Options{})
			seg, sp := openClosable(t, path)
			if spaceFirst {
				require.NoError(t, sp.Close())
				require.NoError(t, seg.Close())
			} else {
				require.NoError(t, seg.Close())
				require.NoError(t, sp.Close())
			}
			require.ErrorIs(t, sp.Close(), txn.ErrSpaceClosed)
			_, err := sp.Begin(txn.BeginOptions{})
			require.ErrorIs(t, err, shm.ErrClosed)
			snap, err := txn.Inspect(other, false)
			require.NoError(t, err)
			require.Empty(t, snap.Rows, "the row was given up")
		})
	}
}

// A goroutine asleep in a wait of a Space whose segment closes returns
// shm.ErrClosed at its next liveness check, having undone what it did in
// the file: a close it began is called off (the transaction is open
// again), a barrier it raised comes down. The pins the waits wait for are
// held through another handle on the same file (another Open, as another
// process would).
func TestSegmentCloseEndsAWait(t *testing.T) {
	t.Parallel()
	type wait struct {
		results []<-chan error
		asleep  func() bool      // every waiter sleeps
		after   func(*testing.T) // checks the file through the other handle, once the waits returned
	}
	bg := context.Background()
	cases := []struct {
		name  string
		start func(t *testing.T, sp, osp *txn.Space, other *shm.Segment) wait
	}{
		{"RequestCloseAndWait, and a second closer awaiting its end", func(t *testing.T, sp, osp *txn.Space, other *shm.Segment) wait {
			tx, err := sp.Begin(txn.BeginOptions{})
			require.NoError(t, err)
			r, err := tx.Alloc(pattern(2, 30))
			require.NoError(t, err)
			p, err := osp.TryPin(r)
			require.NoError(t, err)
			return wait{
				results: []<-chan error{closeAsync(tx), closeAsync(tx)},
				asleep:  func() bool { return osp.ClosersAsleep(tx.Index()) == 2 },
				after: func(t *testing.T) {
					ti := txnInfo(t, other, tx.Index())
					require.Equal(t, txn.StateOpen, ti.State, "the close was called off")
					require.Equal(t, proc.Self().Pack(), ti.Owner)
					require.Zero(t, ti.Destroyed, "nothing was destroyed")
					p2, err := osp.TryPin(r)
					require.NoError(t, err, "open to readers again")
					p2.Release()
					p.Release()
				},
			}
		}},
		{"Barrier.Close", func(t *testing.T, sp, osp *txn.Space, other *shm.Segment) wait {
			tx, err := sp.Begin(txn.BeginOptions{Barrier: true})
			require.NoError(t, err)
			r, err := tx.Alloc(pattern(3, 30))
			require.NoError(t, err)
			p, err := osp.TryPin(r)
			require.NoError(t, err)
			b, err := txn.NewBarrier(sp)
			require.NoError(t, err)
			ch := make(chan error, 1)
			go func() { ch <- b.Close(bg, tx) }()
			return wait{
				results: []<-chan error{ch},
				asleep:  func() bool { return osp.LeadersAsleep() == 1 },
				after: func(t *testing.T) {
					p.Release()
					snap, err := txn.Inspect(other, false)
					require.NoError(t, err)
					require.Zero(t, snap.BarrierLeader, "the barrier came down")
					ti := txnInfo(t, other, tx.Index())
					require.Equal(t, txn.StateOpen, ti.State, "the close was called off")
					require.Zero(t, ti.Destroyed)
				},
			}
		}},
		{"Borrow of a cell whose source closes", func(t *testing.T, sp, osp *txn.Space, other *shm.Segment) wait {
			cl := pinnedClosingLink(t, osp, 4)
			ch := make(chan error, 1)
			go func() { b, err := sp.Borrow(bg, cl.cell); b.Release(); ch <- err }()
			return wait{
				results: []<-chan error{ch},
				asleep:  func() bool { return osp.ClosersAsleep(cl.src.Index()) == 2 },
				after: func(t *testing.T) {
					cl.pin.Release()
					require.NoError(t, recv(t, cl.closed), "the other handle's close ends as usual")
					b, err := osp.Borrow(bg, cl.cell)
					require.NoError(t, err)
					require.NoError(t, checkBytes(b.Bytes(), 4), "the cell holds the copy")
					b.Release()
					require.NoError(t, cl.dst.RequestCloseAndWait(bg))
				},
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			other, path := newSegment(t, layout.Options{})
			osp := newSpace(t, other)
			seg, sp := openClosable(t, path)
			w := c.start(t, sp, osp, other)
			waitFor(t, w.asleep, "the waiters to sleep")
			require.NoError(t, seg.Close())
			for _, ch := range w.results {
				require.ErrorIs(t, recv(t, ch), shm.ErrClosed)
			}
			w.after(t)
			require.NoError(t, sp.Close())
		})
	}
}

// A close whose context is cancelled just after its segment closed fails,
// with shm.ErrClosed or ctx.Err() depending on which it saw first, and
// either way calls the close off: the file shows the transaction open.
func TestSegmentCloseThenCancel(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			other, path := newSegment(t, layout.Options{})
			osp := newSpace(t, other)
			seg, sp := openClosable(t, path)
			tx, err := sp.Begin(txn.BeginOptions{Barrier: m.barrier})
			require.NoError(t, err)
			r, err := tx.Alloc(pattern(5, 30))
			require.NoError(t, err)
			p, err := osp.TryPin(r)
			require.NoError(t, err)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch := make(chan error, 1)
			asleep := func() bool { return osp.ClosersAsleep(tx.Index()) == 1 }
			if m.barrier {
				b, err := txn.NewBarrier(sp)
				require.NoError(t, err)
				go func() { ch <- b.Close(ctx, tx) }()
				asleep = func() bool { return osp.LeadersAsleep() == 1 }
			} else {
				go func() { ch <- tx.RequestCloseAndWait(ctx) }()
			}
			waitFor(t, asleep, "the closer to sleep")
			require.NoError(t, seg.Close())
			cancel()
			if err := recv(t, ch); !errors.Is(err, context.Canceled) {
				require.ErrorIs(t, err, shm.ErrClosed)
			}

			p.Release()
			require.Equal(t, txn.StateOpen, txnInfo(t, other, tx.Index()).State, "the close was called off")
			require.NoError(t, sp.Close())
		})
	}
}

// An operation whose segment closes between its last check and its use of
// the segment (after its stores, before its read of a pinned object)
// either completes (its stores and reads are the file's, and what it did is
// there for another handle to see) or, if it had more to acquire (a second
// pin, arena room), fails with shm.ErrClosed having left nothing: no pin
// of it stays counted, so the Space then closes cleanly. Not parallel:
// the hook is the package's.
func TestSegmentCloseUnderAnOperation(t *testing.T) {
	type refs struct{ obj, cell, other txn.Ref } // obj of src; cell and other (an object) of the other handle's
	ops := []struct {
		name   string
		stored bool // Close comes after the operation's stores, else before it reads an object
		op     func(sp *txn.Space, src *txn.Txn, r refs) error
	}{
		{"Open", true, func(sp *txn.Space, _ *txn.Txn, _ refs) error {
			_, err := txn.Open(sp.Segment())
			return err
		}},
		{"Begin", true, func(sp *txn.Space, _ *txn.Txn, _ refs) error {
			_, err := sp.Begin(txn.BeginOptions{})
			return err
		}},
		{"Alloc", true, func(_ *txn.Space, src *txn.Txn, _ refs) error {
			_, err := src.Alloc([]byte("more"))
			return err
		}},
		{"Link", true, func(_ *txn.Space, src *txn.Txn, r refs) error {
			_, err := src.Link(r.other)
			return err
		}},
		{"Link's read of its target", false, func(_ *txn.Space, src *txn.Txn, r refs) error {
			_, err := src.Link(r.other)
			return err
		}},
		{"Link of its own object", false, func(_ *txn.Space, src *txn.Txn, r refs) error {
			_, err := src.Link(r.obj)
			return err
		}},
		{"Borrow", false, func(sp *txn.Space, _ *txn.Txn, r refs) error {
			b, err := sp.Borrow(context.Background(), r.obj)
			b.Release()
			return err
		}},
		{"Borrow of a cell", false, func(sp *txn.Space, _ *txn.Txn, r refs) error {
			b, err := sp.Borrow(context.Background(), r.cell)
			b.Release()
			return err
		}},
	}
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			other, path := newSegment(t, layout.Options{})
			osp := newSpace(t, other)
			var r refs
			_, _, r.other, r.cell = linked(t, osp, txn.BeginOptions{}, txn.BeginOptions{}, 8, 20)
			seg, sp := openClosable(t, path)
			src, err := sp.Begin(txn.BeginOptions{})
			require.NoError(t, err)
			r.obj, err = src.Alloc(pattern(9, 20))
			require.NoError(t, err)

			var closeErr error
			var once sync.Once
			txn.SetUncheckedHook(func(stored bool) {
				if stored == o.stored {
					once.Do(func() { closeErr = seg.Close() })
				}
			})
			defer txn.SetUncheckedHook(nil)
			if err := o.op(sp, src, r); err != nil {
				require.ErrorIs(t, err, shm.ErrClosed, "an operation Close came under")
			}
			require.NoError(t, sp.Close(), "no pin of the operation is left")
			require.NoError(t, closeErr)
			require.True(t, seg.Closed(), "the hook ran")
			snap, err := txn.Inspect(other, false)
			require.NoError(t, err)
			require.NotEmpty(t, snap.Txns, "the file keeps what the operations did")
		})
	}
}

// openClosable opens a second handle on the segment at path, and a Space
// on it, for the test to close (the cleanup's second Close is harmless).
func openClosable(t *testing.T, path string) (*shm.Segment, *txn.Space) {
	t.Helper()
	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	sp, err := txn.Open(seg)
	require.NoError(t, err)
	return seg, sp
}

// A nil segment or Space is an error, not a panic.
func TestNilSegmentAndSpace(t *testing.T) {
	t.Parallel()
	_, err := txn.Open(nil)
	require.ErrorIs(t, err, shm.ErrNoSegment)
	_, err = txn.Inspect(nil, true)
	require.ErrorIs(t, err, shm.ErrNoSegment)
	_, err = txn.Check(nil)
	require.ErrorIs(t, err, shm.ErrNoSegment)
	_, err = txn.NewBarrier(nil)
	require.ErrorIs(t, err, txn.ErrInvalid)
	// Every method of a Space not made by Open fails the same way, none
	// panics.
	ctx, ref := context.Background(), txn.Ref{Txn: 0, Gen: 1}
	for name, sp := range map[string]*txn.Space{"nil": nil, "zero": {}} {
		_, err = sp.Begin(txn.BeginOptions{})
		require.ErrorIs(t, err, txn.ErrInvalid, "%s Space: Begin", name)
		_, err = sp.TryPin(ref)
		require.ErrorIs(t, err, txn.ErrInvalid, "%s Space: TryPin", name)
		_, err = sp.Borrow(ctx, ref)
		require.ErrorIs(t, err, txn.ErrInvalid, "%s Space: Borrow", name)
		require.ErrorIs(t, sp.Reclaim(ctx, 0), txn.ErrInvalid, "%s Space: Reclaim", name)
		require.ErrorIs(t, sp.Close(), txn.ErrInvalid, "%s Space: Close", name)
	}
}
