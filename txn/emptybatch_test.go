package txn_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/txn"
)

// TestBarrierCloseOfNothing: a barrier close with nothing to close (an
// empty batch, or one whose transactions are all closed already) returns
// at once: it does not wait for the global pins of transactions it does
// not close, which here are held by the caller and would never drain.
func TestBarrierCloseOfNothing(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	b, err := txn.NewBarrier(sp)
	require.NoError(t, err)
	closed, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024, Barrier: true})
	require.NoError(t, err)
	require.NoError(t, b.Close(ctx, closed))
	bt, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024, Barrier: true})
	require.NoError(t, err)
	r, err := bt.Alloc(pattern(0, 10))
	require.NoError(t, err)
	p, err := sp.TryPin(r)
	require.NoError(t, err)
	defer p.Release()

	require.NoError(t, b.Close(ctx), "an empty batch")
	require.ErrorIs(t, b.Close(ctx, closed), txn.ErrClosed, "a batch of a closed transaction")
	require.NoError(t, ctx.Err(), "neither waited for the pin")
	p2, err := sp.TryPin(r)
	require.NoError(t, err, "the barrier is down")
	p2.Release()
}
