package upgrade_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/upgrade"
)

// A handle closed while one of its goroutines waits for a shared hold (it
// holds nothing then, so Close succeeds and frees its reader record): the
// waiter gets ErrClosed when the writer leaves. It counted its hold in the
// freed record, ownerless, which no release could find (UnlockShared:
// ErrNotHeld) and no repair clears (the owner is not a dead process): every
// writer after waited for it for ever.
func TestCloseWhileSharedWaits(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	w, h := open(t, seg), open(t, seg)
	require.NoError(t, h.LockShared()) // claims h's record
	require.NoError(t, h.UnlockShared())
	require.NoError(t, w.Lock())
	got := make(chan error, 1)
	go func() { got <- h.LockShared() }()
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.SharedWaiters == 1 }, "the reader to sleep")
	require.NoError(t, h.Close(), "the handle holds nothing")
	require.NoError(t, w.Unlock())
	require.ErrorIs(t, <-got, upgrade.ErrClosed)
	require.NoError(t, w.TryLock(), "no shared hold is left behind")
	require.NoError(t, w.Unlock())
	for _, r := range status(t, seg).Readers {
		require.Zero(t, r.Count, "record %d", r.Record)
	}
	require.NoError(t, w.Close())
}
