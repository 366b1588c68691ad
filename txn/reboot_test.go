package txn_test

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

// A segment in a file that survived a reboot: the owners of its
// transactions, its pinners and the holders of the arena's locks and
// barrier belong to the previous boot, and after the first writable open
// none of them may be taken for a live process of this one (whose pid and
// start time a pre-reboot identity may match: this process plays one).
// Before, the reboot recovery marked no word of the txn tables stale: the
// transaction read as owned by a live process and could not be reclaimed
// (ErrOwnerAlive), its pin row was never taken over, and a lock word left
// by the previous boot would have been waited for as a live holder's.
func TestOpenAfterRebootMarksTxnOwnersStale(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	tx, err := sp.Begin(txn.BeginOptions{})
	require.NoError(t, err)
	me := proc.Self().Pack()
	arena, err := seg.Region(layout.KindTxnArena)
	require.NoError(t, err)
	arenaWords := map[string]uint64{"barrier leader": layout.TxnLeader,
		"allocator lock": layout.TxnAllocLock, "barrier leader lock": layout.TxnBarrierLock}
	for _, off := range arenaWords {
		w, err := memview.Uint64(arena, off)
		require.NoError(t, err)
		w.Store(me) // held at the reboot
	}
	require.NoError(t, seg.Close())
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte{0xAB}, 16), layout.OffOwnersBoot)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	seg, err = shm.Open(path, shm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	words := map[string]uint64{}
	word := func(mem []byte, off uint64) uint64 {
		w, err := memview.Uint64(mem, off)
		require.NoError(t, err)
		return w.Load()
	}
	recs, err := seg.Region(layout.KindTxnRecords)
	require.NoError(t, err)
	words["transaction owner"] = word(recs, uint64(tx.Index())*layout.TxnRecordSize+layout.TxnRecordOwner)
	arena, err = seg.Region(layout.KindTxnArena)
	require.NoError(t, err)
	for name, off := range arenaWords {
		words[name] = word(arena, off)
	}
	rows, rowSize := layout.TxnPinRows(seg.Len(layout.KindTxnRecords), uint64(len(arena)))
	for row := range rows {
		if v := word(arena, layout.TxnCtlAreaSize+uint64(row)*rowSize); v != 0 {
			words["pin row"] = v
		}
	}
	require.Contains(t, words, "pin row")
	for name, w := range words {
		if id, stale := proc.Unpack(w); !stale || id != proc.Self() {
			t.Errorf("%s after reboot: got %v stale=%v, want %v stale", name, id, stale, proc.Self())
		}
	}
	require.False(t, txnInfo(t, seg, tx.Index()).OwnerAlive)
	sp = newSpace(t, seg)
	require.NoError(t, sp.Reclaim(context.Background(), tx.Index()))
	require.Equal(t, txn.StateClosed, txnInfo(t, seg, tx.Index()).State)
}
