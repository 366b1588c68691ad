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
	src, err := osp.Begin(txn.BeginOptions{})
	require.NoError(t, err)
	dst, err := osp.Begin(txn.BeginOptions{})
	require.NoError(t, err)
	obj, err := src.Alloc(pattern(5, 30))
	require.NoError(t, err)
	cell, err := dst.Link(obj)
	require.NoError(t, err)
	p, err := osp.TryPin(obj)
	require.NoError(t, err)
	closed := closeAsync(src)
	waitFor(t, func() bool { return osp.ClosersAsleep(src.Index()) == 1 }, "the source's closer to sleep")
	borrowed := make(chan error, 1)
	go func() { b, err := sp.Borrow(bg, cell); b.Release(); borrowed <- err }()
	waitFor(t, func() bool { return osp.ClosersAsleep(src.Index()) == 2 }, "the Borrow to sleep")

	require.NoError(t, sp.Close())
	require.ErrorIs(t, recv(t, borrowed), txn.ErrSpaceClosed)
	p.Release()
	require.NoError(t, recv(t, closed))
	require.NoError(t, dst.RequestCloseAndWait(bg))
}
