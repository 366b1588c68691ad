package txn_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/txn"
)

// FuzzCorruptSegment writes fuzzed bytes over the transaction records and
// the objects of two transactions (a stray writer, a bug in another
// program), then uses everything: references, promotion cells, Inspect,
// Alloc, Link, the close, Begin, Reclaim. Whatever the damage, nothing may
// panic or hang, every failure is one of the package's errors, and no pin
// is left behind. (The pin table is left
// alone: a pin count set by a stray writer in a live process's row is a pin
// of that process, which a close rightly waits for.)
//
// Each 3 bytes of input are one write: a 16-bit offset into the record
// table followed by the used part of the data area, and the byte.
func FuzzCorruptSegment(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x00, 0x00, 0x02})                   // record 0's state: closing
	f.Add([]byte{0x00, 0x00, 0x04})                   // record 0's state: finishing
	f.Add([]byte{0x00, 0x00, 0x05})                   // record 0's state: none
	f.Add([]byte{0x00, 0x00, 0x04, 0x00, 0x08, 0x07}) // finishing, owner dead: Reclaim finishes it
	f.Add([]byte{0x00, 0x14, 0xff})                   // record 0's arena length
	f.Add([]byte{0x00, 0x28, 0x41})                   // record 0's promotion list head
	f.Add([]byte{0x00, 0x88, 0x07})                   // record 1's owner
	f.Add([]byte{0x02, 0x08, 0x03})                   // a header's capacity
	f.Add([]byte{0x02, 0x0c, 0x00, 0x04, 0x00, 0x77})
	f.Fuzz(func(t *testing.T, ops []byte) {
		seg, _ := newSegment(t, layout.Options{Slots: 4, TxnRecords: 4, TxnArenaBytes: 16 << 10})
		sp := newSpace(t, seg)
		src, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
		require.NoError(t, err)
		dst, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
		require.NoError(t, err)
		var refs []txn.Ref
		for i := range 3 {
			r, err := src.Alloc(pattern(i, 40+i))
			require.NoError(t, err)
			refs = append(refs, r)
		}
		cell, err := dst.Link(refs[0])
		require.NoError(t, err)
		r, err := dst.Alloc(pattern(7, 20))
		require.NoError(t, err)
		refs = append(refs, cell, r)

		recs, err := seg.Region(layout.KindTxnRecords)
		require.NoError(t, err)
		region, err := seg.Region(layout.KindTxnArena)
		require.NoError(t, err)
		data := region[sp.DataStart() : sp.DataStart()+2048]
		for ; len(ops) >= 3; ops = ops[3:] {
			off := int(binary.BigEndian.Uint16(ops)) % (len(recs) + len(data))
			if off < len(recs) {
				recs[off] = ops[2]
			} else {
				data[off-len(recs)] = ops[2]
			}
			// Refs the writer could have meant, too.
			refs = append(refs, txn.Ref{Txn: uint32(ops[0] % 5), Gen: uint32(ops[1] % 3), Off: uint32(ops[2]) * 16})
		}

		known := []error{txn.ErrClosing, txn.ErrClosed, txn.ErrStale, txn.ErrBadRef, txn.ErrNotObject,
			txn.ErrArenaFull, txn.ErrNoRecord, txn.ErrWrongMode, txn.ErrOwnerAlive, txn.ErrCorrupt, context.DeadlineExceeded}
		check := func(what string, err error) {
			t.Helper()
			testproc.RequireTyped(t, what, err, known...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		for _, r := range refs {
			b, err := sp.Borrow(ctx, r)
			check("borrow", err)
			if err == nil {
				_ = len(b.Bytes()) // sliced from the region: a bad bound would have panicked
				b.Release()
			}
			p, err := sp.TryPin(r)
			check("pin", err)
			p.Release()
		}
		_, err = txn.Inspect(seg, true)
		require.NoError(t, err)
		_, err = src.Alloc([]byte("more"))
		check("alloc", err)
		_, err = dst.Link(refs[1])
		check("link", err)
		check("close src", src.RequestCloseAndWait(ctx))
		check("close dst", dst.RequestCloseAndWait(ctx))
		for i := range 4 {
			check("reclaim", sp.Reclaim(ctx, i))
		}
		tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 64})
		check("begin", err)
		if err == nil {
			check("close new", tx.RequestCloseAndWait(ctx))
		}
		for i := range 4 {
			require.Zero(t, sp.OwnPinCount(i), "no pin left behind on record %d", i)
		}
	})
}
