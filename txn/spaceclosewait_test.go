package txn_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/txn"
)

// TestSpaceCloseEndsABorrowWait: a Borrow asleep until a promotion's
// source ends holds no pin, so its Space may be closed; the Borrow then
// returns ErrSpaceClosed at its next liveness check, as it would at its
// next step, rather than sleep on for as long as the source's close lasts.
// The source's close is held up by a pin of another handle, which owns
// both transactions.
func TestSpaceCloseEndsABorrowWait(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{})
	osp := newSpace(t, seg)
	sp, err := txn.Open(seg)
	require.NoError(t, err)
	bg := context.Background()
	cl := pinnedClosingLink(t, osp, 5)
	borrowed := make(chan error, 1)
	go func() { b, err := sp.Borrow(bg, cl.cell); b.Release(); borrowed <- err }()
	waitFor(t, func() bool { return osp.ClosersAsleep(cl.src.Index()) == 2 }, "the Borrow to sleep")

	require.NoError(t, sp.Close())
	require.ErrorIs(t, recv(t, borrowed), txn.ErrSpaceClosed)
	cl.pin.Release()
	require.NoError(t, recv(t, cl.closed))
	require.NoError(t, cl.dst.RequestCloseAndWait(bg))
}
