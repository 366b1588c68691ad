package upgrade_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/upgrade"
)

// deadIdentity is the packed identity of a process that has exited, as a
// lock word killed at some step would record it.
func deadIdentity(tb testing.TB) uint64 { return testproc.ExitedIdentity(tb) }

// A writer killed on Lock's fast path after its CAS of the Writer word
// (writerUnique) and before its step back, because a live handle holds the
// upgrade lock: readers, which the upgrade holder does not block, must
// release the dead writer's bit and get in, not wait for as long as the
// upgrade lock is held.
func TestDeadFastPathWriterUnderUpgradeHolder(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	u := open(t, seg)
	require.NoError(t, u.LockUpgrade())
	e := entry(t, seg)
	e.Writer.Store(deadIdentity(t) | upgrade.WriterUnique) // the dead writer's CAS
	r := open(t, seg)
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout) // a bound on a hang
	defer cancel()
	require.NoError(t, r.LockSharedContext(ctx), "a reader waits for a dead writer's bit under a live upgrade holder")
	require.NoError(t, r.UnlockShared())
	require.NoError(t, u.UnlockUpgrade())
}

// An upgrade seeker killed right after its CAS of the Upgrader word (before
// it set stateUpgrade) leaves the word. A writer that then downgrades
// with UniqueToUpgrade must take the dead one's word over, not report
// ErrWouldBlock until some other upgrade seeker happens to come by.
func TestUniqueToUpgradeOverDeadSeeker(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	for _, form := range []string{"fast", "try"} {
		w := open(t, seg)
		if form == "fast" {
			require.NoError(t, w.Lock()) // writerUnique
		} else {
			require.NoError(t, w.TryLock()) // stateWrite
		}
		e := entry(t, seg)
		dead := deadIdentity(t)
		e.Upgrader.Store(dead) // the dead seeker's CAS
		require.NoError(t, w.UniqueToUpgrade(), form)
		require.True(t, w.HoldsUpgrade())
		require.NoError(t, w.UnlockUpgrade())
		require.Zero(t, e.Upgrader.Load())
		require.NoError(t, w.Close())
	}
}
