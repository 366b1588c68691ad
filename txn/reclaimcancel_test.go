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

// TestReclaimCancelledGivesBack: a Reclaim whose context ends while a
// live reader still pins the dead owner's transaction reopens it and gives
// the ownership back to the dead owner, so that nothing of the failed
// reclaim remains: readers pin it again, and a later Reclaim closes it.
func TestReclaimCancelledGivesBack(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		c := testproc.Start(t, "own", m.ownerArgs(path)...)
		r := childRef(t, c)
		p, err := sp.TryPin(r)
		require.NoError(t, err)
		dead := txnInfo(t, seg, int(r.Txn)).Owner
		c.Kill(t)

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sp.Reclaim(ctx, int(r.Txn)) }()
		waitFor(t, func() bool { return txnInfo(t, seg, int(r.Txn)).State == txn.StateClosing }, "the reclaim to wait for the pin")
		cancel()
		require.ErrorIs(t, recv(t, done), context.Canceled)
		ti := txnInfo(t, seg, int(r.Txn))
		require.Equal(t, txn.StateOpen, ti.State, "reopened")
		require.Equal(t, dead, ti.Owner, "the dead owner's again")
		p2, err := sp.TryPin(r)
		require.NoError(t, err, "open to readers")
		p2.Release()

		p.Release()
		require.NoError(t, sp.Reclaim(context.Background(), int(r.Txn)))
		require.Equal(t, txn.StateClosed, txnInfo(t, seg, int(r.Txn)).State)
	})
}
