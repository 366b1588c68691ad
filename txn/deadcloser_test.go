package txn_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

// TestBorrowThroughCellOfDeadCloser: the owner of a promotion's source is
// killed while its close waits for a pin, so the source stays Closing (in
// barrier mode under the dead leader's barrier) until a Reclaim. A Borrow
// of the cell does not wait for a close that nobody runs any more: it
// fails with ErrClosing, as TryPin of the source does, at its first
// liveness check. Once the source is reclaimed the cell reads the copy.
func TestBorrowThroughCellOfDeadCloser(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		c := testproc.StartWithStdin(t, "close-cpu", m.ownerArgs(path)...)
		r, dst, cell := linkToChild(t, sp, c)
		p, err := sp.TryPin(r) // holds the child's close
		require.NoError(t, err)
		c.Send(t, "close")
		waitFor(t, func() bool { return txnInfo(t, seg, int(r.Txn)).State == txn.StateClosing }, "the close to start")
		c.Kill(t)

		_, err = sp.Borrow(ctx, cell)
		require.ErrorIs(t, err, txn.ErrClosing, "the source's closer is dead")
		require.NoError(t, ctx.Err())

		done := make(chan error, 1)
		go func() { done <- sp.Reclaim(ctx, int(r.Txn)) }()
		p.Release()
		require.NoError(t, recv(t, done))
		b, err := sp.Borrow(ctx, cell)
		require.NoError(t, err)
		require.Equal(t, "x", string(b.Bytes()), "the copy")
		b.Release()
		require.NoError(t, dst.RequestCloseAndWait(ctx))
	})
}
