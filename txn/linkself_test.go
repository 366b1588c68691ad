package txn_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/txn"
)

// TestLinkWithinUnderRaisedBarrier: a barrier-mode transaction that links
// one of its own objects while the barrier is up for another batch gets
// the object's Ref, as Alloc on it succeeds: it is open, and the barrier
// stops readers' global pins, not its owner's writes. The leader is held
// up by a reader's global pin on the batch.
func TestLinkWithinUnderRaisedBarrier(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	b, err := txn.NewBarrier(sp)
	require.NoError(t, err)
	closed, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024, Barrier: true})
	require.NoError(t, err)
	cr, err := closed.Alloc(pattern(0, 10))
	require.NoError(t, err)
	tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024, Barrier: true})
	require.NoError(t, err)
	obj, err := tx.Alloc(pattern(1, 10))
	require.NoError(t, err)

	p, err := sp.TryPin(cr)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.Close(context.Background(), closed) }()
	waitFor(t, func() bool {
		snap, err := txn.Inspect(seg, false)
		require.NoError(t, err)
		return snap.BarrierLeader != 0
	}, "the barrier")

	_, err = tx.Alloc(pattern(2, 10))
	require.NoError(t, err, "the owner writes while the barrier is up")
	got, err := tx.Link(obj)
	require.NoError(t, err, "a link within an open transaction")
	require.Equal(t, obj, got)

	p.Release()
	require.NoError(t, recv(t, done))
	require.NoError(t, b.Close(context.Background(), tx))
}
