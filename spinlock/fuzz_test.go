package spinlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/spinlock"
)

// FuzzSlot: whatever words an owner slot holds (a damaged or hostile
// segment), in either mode the calls return, with an error or not, and
// never panic or hang: Check, Owner, the Try acquisitions (recursively
// too; a grant is released again), a wait of 200 µs (it is granted, or
// times out), Reclaim and ForceUnlock. A free slot that a try was granted
// is free again after its release; after a ForceUnlock a try is granted.
func FuzzSlot(f *testing.F) {
	seg, _ := newSegment(f)
	slots, err := seg.Region(layout.KindOwnerSlots)
	require.NoError(f, err)
	slot := slots[:layout.OwnerSlotSize]
	locks := map[spinlock.Mode]*spinlock.Lock{}
	for _, mode := range modes {
		l, err := spinlock.Open(seg, 0, mode)
		require.NoError(f, err)
		locks[mode] = l
	}
	holder, token := spinlock.NewHolder(), spinlock.NewToken()

	f.Add(append([]byte(nil), slot...))
	g, err := locks[spinlock.PIDTID].Lock(holder)
	require.NoError(f, err)
	f.Add(append([]byte(nil), slot...))
	require.NoError(f, g.Release())
	clear(slot) // a released pid/tid slot keeps its generation in Token: held, to token mode
	g, err = locks[spinlock.Token].Lock(token)
	require.NoError(f, err)
	f.Add(append([]byte(nil), slot...))
	require.NoError(f, g.Release())

	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mode := range modes {
			clear(slot)
			copy(slot, data)
			l := locks[mode]
			id := holder
			if mode == spinlock.Token {
				id = token
			}
			_, err := spinlock.Check(seg)
			testproc.RequireTyped(t, "Check", err, slotErrors...)
			_, heldBefore := l.Owner()
			_ = l.Generation()
			g, err := l.TryLock(id)
			testproc.RequireTyped(t, "TryLock", err, slotErrors...)
			if err == nil {
				g2, err := l.TryLock(id)
				testproc.RequireTyped(t, "a nested TryLock", err, slotErrors...)
				if err == nil {
					require.NoError(t, g2.Release(), "the inner hold")
				}
				require.NoError(t, g.Release())
				// (A slot that says this holder holds it already was
				// locked recursively: it stays held.)
				if _, held := l.Owner(); held && !heldBefore {
					t.Fatalf("%v: held after the grant's release: %x", mode, slot)
				}
			}
			// A wait ends by its deadline, whatever the words (the
			// watchdog makes a hang a failure).
			stop := testproc.Watchdog(time.Minute, "TryLockFor")
			g, err = l.TryLockFor(id, 200*time.Microsecond)
			stop()
			if err == nil {
				require.NoError(t, g.Release(), "%v: the release of a waited grant", mode)
			} else if !errors.Is(err, spinlock.ErrTimeout) && !errors.Is(err, spinlock.ErrRecursion) {
				t.Fatalf("%v: a wait that ended with %v", mode, err)
			}
			if g, err := l.Reclaim(id); err == nil {
				_ = g.Release()
			} else {
				testproc.RequireTyped(t, "Reclaim", err, slotErrors...)
			}
			// An operator's ForceUnlock frees the lock: a try is then
			// granted, told in pid/tid mode that the data may be half
			// written, and may mark it whole again.
			_, err = l.ForceUnlock()
			testproc.RequireTyped(t, "ForceUnlock", err, slotErrors...)
			if err == nil {
				if _, held := l.Owner(); held {
					t.Fatalf("%v: held after ForceUnlock: %x", mode, slot)
				}
				g, err := l.TryLock(id)
				require.NoError(t, err, "%v: a try after ForceUnlock", mode)
				if mode == spinlock.PIDTID {
					require.True(t, g.Inconsistent(), "after ForceUnlock")
				}
				require.NoError(t, g.MarkConsistent())
				require.False(t, l.Inconsistent(), "%v: after MarkConsistent", mode)
				require.NoError(t, g.Release())
			}
		}
	})
}

// slotErrors are the errors FuzzSlot's calls may end with, whatever the
// words: the package's sentinels.
var slotErrors = []error{
	spinlock.ErrNotOwner, spinlock.ErrWouldBlock, spinlock.ErrTimeout, spinlock.ErrNotHeld,
	spinlock.ErrGuardInUse, spinlock.ErrBadIdentity, spinlock.ErrRecursion, spinlock.ErrLockClosed,
	spinlock.ErrBadMode, spinlock.ErrNoSlot, spinlock.ErrModeMismatch,
}
