package spinlock_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/spinlock"
)

// shortWait is how long the tests below let a lock attempt wait for a lock
// that stays held: long enough to go to sleep and check liveness (every
// 50 ms) a few times.
const shortWait = 150 * time.Millisecond

func newLock(mode spinlock.Mode) *spinlock.Lock {
	return spinlock.New(spinlock.NewInProcessState(), mode)
}

// holderFor returns a new identity that fits mode: a holder or a token.
func holderFor(mode spinlock.Mode) spinlock.Identity {
	return identityFor(mode, spinlock.NewHolder())
}

func TestLockRelease(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			l := newLock(mode)
			require.Equal(t, mode, l.Mode())
			id := holderFor(mode)
			var g spinlock.Guard
			require.False(t, g.Held())
			require.NoError(t, g.Lock(l, id))
			require.True(t, g.Held())
			require.False(t, g.Reclaimed())
			require.False(t, g.Recursive())
			require.Equal(t, id, g.Identity())
			owner, held := l.Owner()
			require.True(t, held)
			require.Equal(t, id, owner)
			want := slotState{PID: id.PID, TID: id.TID, Token: id.Token}
			require.Equal(t, want, stateOf(l.Slot()))

			require.NoError(t, g.Release())
			require.False(t, g.Held())
			require.Equal(t, spinlock.Identity{}, g.Identity())
			_, held = l.Owner()
			require.False(t, held)
			want = slotState{}
			if mode == spinlock.PIDTID {
				want.Token = 1 // the generation
			}
			require.Equal(t, want, stateOf(l.Slot()))
			require.EqualValues(t, want.Token, l.Generation())

			// The guard is reusable once released.
			require.NoError(t, g.Lock(l, holderFor(mode)))
			require.NoError(t, g.Release())
		})
	}
}

// The same holder locks three times: the count says so, three releases are
// needed, and only the last frees the lock and bumps the generation.
func TestRecursion(t *testing.T) {
	t.Parallel()
	l := newLock(spinlock.PIDTID)
	me := spinlock.NewHolder()
	var gs [3]spinlock.Guard
	require.NoError(t, gs[0].Lock(l, me))
	require.NoError(t, gs[1].TryLock(l, me), "TryLock by the holder recurses")
	require.NoError(t, gs[2].TryLockFor(l, me, time.Second))
	require.False(t, gs[0].Recursive())
	require.True(t, gs[1].Recursive())
	require.True(t, gs[2].Recursive())
	require.Equal(t, slotState{PID: me.PID, TID: me.TID, Recursion: 2}, stateOf(l.Slot()))

	_, err := l.TryLock(spinlock.NewHolder())
	require.ErrorIs(t, err, spinlock.ErrWouldBlock, "another holder of this process is shut out")

	require.NoError(t, gs[2].Release())
	require.Equal(t, slotState{PID: me.PID, TID: me.TID, Recursion: 1}, stateOf(l.Slot()))
	require.NoError(t, gs[1].Release())
	require.Equal(t, slotState{PID: me.PID, TID: me.TID}, stateOf(l.Slot()))
	require.NoError(t, gs[0].Release())
	require.Equal(t, slotState{Token: 1}, stateOf(l.Slot()), "free, generation bumped once")
}

func TestRecursionLimit(t *testing.T) {
	t.Parallel()
	l := newLock(spinlock.PIDTID)
	me := spinlock.NewHolder()
	_, err := l.Lock(me)
	require.NoError(t, err)
	l.Slot().RecursionCount.Store(math.MaxUint32)
	before := stateOf(l.Slot())
	var g spinlock.Guard
	require.ErrorIs(t, g.Lock(l, me), spinlock.ErrRecursion)
	require.False(t, g.Held())
	require.Equal(t, before, stateOf(l.Slot()))
}

// A release by anyone but the holder fails and changes nothing.
func TestReleaseByNonOwner(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			l := newLock(mode)
			id := holderFor(mode)
			var g spinlock.Guard
			require.NoError(t, g.Lock(l, id))
			if mode == spinlock.PIDTID {
				_, err := l.Lock(id) // recursive, so the count is in play too
				require.NoError(t, err)
			}
			before := stateOf(l.Slot())

			strangers := []spinlock.Identity{holderFor(mode)}
			if mode == spinlock.PIDTID {
				strangers = append(strangers,
					spinlock.Identity{PID: id.PID, TID: id.TID + 1}, // same process, other holder
					spinlock.Identity{PID: id.PID + 1, TID: id.TID}, // other process, same holder id
				)
			} else {
				strangers = append(strangers, spinlock.Identity{Token: id.Token ^ 1<<40})
			}
			for _, s := range strangers {
				require.ErrorIs(t, l.Unlock(s), spinlock.ErrNotOwner, "Unlock(%v)", s)
				var other spinlock.Guard
				require.ErrorIs(t, other.Adopt(l, s), spinlock.ErrNotOwner, "Adopt(%v)", s)
				require.False(t, other.Held())
				require.Equal(t, before, stateOf(l.Slot()), "after Unlock(%v)", s)
			}
			require.True(t, g.Held())
		})
	}
}

// An identity of the other mode, or a malformed one, is refused everywhere.
func TestBadIdentity(t *testing.T) {
	t.Parallel()
	holder, token := spinlock.NewHolder(), spinlock.NewToken()
	bad := map[spinlock.Mode][]spinlock.Identity{
		spinlock.PIDTID: {token, {}, {PID: holder.PID}, {TID: holder.TID}, {PID: holder.PID, TID: holder.TID, Token: 1},
			{PID: 1 << 32, TID: holder.TID}}, // a PID whose low half (the futex word) is 0
		spinlock.Token: {holder, {}, {Token: 1 << 32}, {PID: 1, Token: token.Token}},
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			l := newLock(mode)
			owner := holderFor(mode)
			var held spinlock.Guard
			require.NoError(t, held.Lock(l, owner))
			before := stateOf(l.Slot())
			for _, id := range bad[mode] {
				require.ErrorIs(t, l.Unlock(id), spinlock.ErrBadIdentity, "Unlock(%+v)", id)
				var g spinlock.Guard
				require.ErrorIs(t, g.Lock(l, id), spinlock.ErrBadIdentity, "Lock(%+v)", id)
				require.ErrorIs(t, g.TryLock(l, id), spinlock.ErrBadIdentity, "TryLock(%+v)", id)
				require.ErrorIs(t, g.TryLockFor(l, id, time.Second), spinlock.ErrBadIdentity, "TryLockFor(%+v)", id)
				require.ErrorIs(t, g.LockContext(context.Background(), l, id), spinlock.ErrBadIdentity)
				require.ErrorIs(t, g.Adopt(l, id), spinlock.ErrBadIdentity, "Adopt(%+v)", id)
				_, err := l.Reclaim(id)
				require.ErrorIs(t, err, spinlock.ErrBadIdentity, "Reclaim(%+v)", id)
				require.Panics(t, func() { l.Locker(id) }, "Locker(%+v)", id)
				require.False(t, g.Held())
				require.Equal(t, before, stateOf(l.Slot()))
			}
		})
	}
}

// Detach leaves the lock held; a new guard adopts the hold and releases it;
// the detached guard has nothing to release.
func TestDetachThenAdopt(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			l := newLock(mode)
			id := holderFor(mode)
			var g spinlock.Guard
			require.NoError(t, g.Lock(l, id))
			held := stateOf(l.Slot())
			g.Detach()
			require.False(t, g.Held())
			require.Equal(t, held, stateOf(l.Slot()), "Detach must not release")
			require.ErrorIs(t, g.Release(), spinlock.ErrNotHeld)

			var g2 spinlock.Guard
			require.NoError(t, g2.Adopt(l, id))
			require.True(t, g2.Held())
			require.False(t, g2.Reclaimed())
			require.Equal(t, id, g2.Identity())
			require.NoError(t, g2.Release())
			_, stillHeld := l.Owner()
			require.False(t, stillHeld)
			require.ErrorIs(t, g2.Adopt(l, id), spinlock.ErrNotOwner, "the hold is gone")

			// The detached guard can be used again.
			require.NoError(t, g.Lock(l, holderFor(mode)))
			require.NoError(t, g.Release())
		})
	}
}

// Releasing twice: the second finds nothing to release and changes nothing.
func TestDoubleRelease(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		l := newLock(mode)
		var g spinlock.Guard
		require.NoError(t, g.Lock(l, holderFor(mode)))
		require.NoError(t, g.Release())
		after := stateOf(l.Slot())
		require.ErrorIs(t, g.Release(), spinlock.ErrNotHeld, "%v", mode)
		require.Equal(t, after, stateOf(l.Slot()))
		var zero spinlock.Guard
		require.ErrorIs(t, zero.Release(), spinlock.ErrNotHeld)
	}
}

// A guard's hold released behind its back (with its token) is reported.
func TestReleaseAfterUnlockByToken(t *testing.T) {
	t.Parallel()
	l := newLock(spinlock.Token)
	var g spinlock.Guard
	require.NoError(t, g.Lock(l, spinlock.NewToken()))
	require.NoError(t, l.Unlock(g.Identity()))
	require.ErrorIs(t, g.Release(), spinlock.ErrNotOwner)
	require.False(t, g.Held(), "the guard is empty afterwards")
	require.Equal(t, slotState{}, stateOf(l.Slot()))
}

// A guard that holds a lock refuses to take another hold, of any lock.
func TestGuardInUse(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		l, other := newLock(mode), newLock(mode)
		id := holderFor(mode)
		var g spinlock.Guard
		require.NoError(t, g.Lock(l, id))
		before := stateOf(l.Slot())
		for _, target := range []*spinlock.Lock{l, other} {
			require.ErrorIs(t, g.Lock(target, holderFor(mode)), spinlock.ErrGuardInUse)
			require.ErrorIs(t, g.TryLock(target, holderFor(mode)), spinlock.ErrGuardInUse)
			require.ErrorIs(t, g.TryLockFor(target, holderFor(mode), time.Second), spinlock.ErrGuardInUse)
			require.ErrorIs(t, g.LockContext(context.Background(), target, holderFor(mode)), spinlock.ErrGuardInUse)
			require.ErrorIs(t, g.Adopt(target, id), spinlock.ErrGuardInUse)
		}
		require.Equal(t, id, g.Identity())
		require.Equal(t, before, stateOf(l.Slot()))
		require.Equal(t, slotState{}, stateOf(other.Slot()))
		require.NoError(t, g.Release())
	}
}

func TestTryLockHeld(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		l := newLock(mode)
		_, err := l.Lock(holderFor(mode))
		require.NoError(t, err)
		before := stateOf(l.Slot())
		g, err := l.TryLock(holderFor(mode))
		require.ErrorIs(t, err, spinlock.ErrWouldBlock, "%v", mode)
		require.False(t, g.Held())
		require.Equal(t, before, stateOf(l.Slot()))
	}
}

// TryLockFor gives up with ErrTimeout and leaves the slot as it found it,
// with no sleeper left registered.
func TestTryLockForTimesOut(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			l := newLock(mode)
			_, err := l.Lock(holderFor(mode))
			require.NoError(t, err)
			before := stateOf(l.Slot())
			require.Zero(t, before.Pad)
			start := time.Now()
			g, err := l.TryLockFor(holderFor(mode), shortWait)
			require.ErrorIs(t, err, spinlock.ErrTimeout)
			if waited := time.Since(start); waited < shortWait {
				t.Fatalf("gave up after %v, before its %v were up", waited, shortWait)
			}
			require.False(t, g.Held())
			require.Equal(t, before, stateOf(l.Slot()))
		})
	}
}

// A context that is already done fails at once, even on a free lock.
func TestLockContextAlreadyDone(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, mode := range modes {
		l := newLock(mode)
		for ctx, want := range map[context.Context]error{cancelled: context.Canceled, expired: context.DeadlineExceeded} {
			var g spinlock.Guard
			require.ErrorIs(t, g.LockContext(ctx, l, holderFor(mode)), want, "%v", mode)
			require.False(t, g.Held())
			require.Equal(t, slotState{}, stateOf(l.Slot()), "a free lock stays free and unchanged")
		}
	}
}

// Cancelling a waiting LockContext makes it return context.Canceled and
// leaves the lock as it was.
func TestLockContextCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			l := newLock(mode)
			_, err := l.Lock(holderFor(mode))
			require.NoError(t, err)
			before := stateOf(l.Slot())

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			var g spinlock.Guard
			go func() { done <- g.LockContext(ctx, l, holderFor(mode)) }()
			waitFor(t, func() bool { return l.Slot().Pad.Load() == 1 }, "the waiter to sleep")
			cancel()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.Canceled)
			case <-time.After(reclaimBound):
				t.Fatalf("LockContext still waiting %v after its context was cancelled", reclaimBound)
			}
			require.False(t, g.Held())
			require.Equal(t, before, stateOf(l.Slot()))
		})
	}
}

func TestLockContextDeadline(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			l := newLock(mode)
			_, err := l.Lock(holderFor(mode))
			require.NoError(t, err)
			before := stateOf(l.Slot())
			ctx, cancel := context.WithTimeout(context.Background(), shortWait)
			defer cancel()
			g, err := l.LockContext(ctx, holderFor(mode))
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NotErrorIs(t, err, spinlock.ErrTimeout, "a context's deadline is reported as the context's error")
			require.False(t, g.Held())
			require.Equal(t, before, stateOf(l.Slot()))
		})
	}
}

// LockContext on a free lock with a live context just locks.
func TestLockContextAcquires(t *testing.T) {
	t.Parallel()
	l := newLock(spinlock.PIDTID)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	holder := spinlock.NewHolder()
	first, err := l.Lock(holder)
	require.NoError(t, err)
	done := make(chan error, 1)
	var g spinlock.Guard
	go func() { done <- g.LockContext(ctx, l, spinlock.NewHolder()) }()
	waitFor(t, func() bool { return l.Slot().Pad.Load() == 1 }, "the waiter to sleep")
	require.NoError(t, first.Release())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(reclaimBound):
		t.Fatalf("waiter not woken by the release within %v", reclaimBound)
	}
	require.NoError(t, g.Release())
	require.Equal(t, slotState{Token: 2}, stateOf(l.Slot()))
}

// The sync.Locker adapter excludes, and its Unlock panics when not held.
func TestLocker(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			l := newLock(mode)
			const goroutines, iters = 4, 5000
			var counter int
			var wg sync.WaitGroup
			for range goroutines {
				var lk sync.Locker = l.Locker(holderFor(mode))
				wg.Go(func() {
					for range iters {
						lk.Lock()
						counter++
						lk.Unlock()
					}
				})
			}
			wg.Wait()
			require.Equal(t, goroutines*iters, counter)
			free := slotState{} // a pid/tid slot keeps its generation in Token: one per release
			if mode == spinlock.PIDTID {
				free.Token = goroutines * iters
			}
			require.Equal(t, free, stateOf(l.Slot()), "every Unlock released all it holds")

			lk := l.Locker(holderFor(mode))
			require.Panics(t, lk.Unlock, "Unlock of a free lock")
			lk.Lock()
			require.Panics(t, l.Locker(holderFor(mode)).Unlock, "Unlock by a stranger")
			lk.Unlock()
			require.Panics(t, lk.Unlock, "second Unlock")
		})
	}
}

// The Locker's Unlock writes out the release (see guard.go): in pid/tid
// mode an inner Unlock of a recursive hold keeps the lock, and an Unlock
// with a sleeper registered wakes (here the registration is the test's own,
// with nobody in the kernel, so the wake counts itself futile).
func TestLockerRecursionAndWake(t *testing.T) {
	t.Parallel()
	l := newLock(spinlock.PIDTID)
	lk := l.Locker(spinlock.NewHolder())
	lk.Lock()
	lk.Lock()
	lk.Unlock()
	st := stateOf(l.Slot())
	require.NotZero(t, st.PID, "the outer hold remains")
	require.Zero(t, st.Recursion)
	ticket := sleepers.Register(&l.Slot().Pad)
	lk.Unlock()
	require.Equal(t, uint32(1), (l.Slot().Pad.Load()&sleepers.FutileMask)>>sleepers.FutileShift, "the Unlock woke the gate")
	sleepers.Unregister(&l.Slot().Pad, ticket)
	require.Equal(t, slotState{Token: 1}, stateOf(l.Slot()))
}

// A Token guard goes from the goroutine that locked to one that releases
// (the seed's promise/future handoff), and around a relay of goroutines.
func TestTokenGuardHandoff(t *testing.T) {
	t.Parallel()
	l := newLock(spinlock.Token)
	promise := make(chan *spinlock.Guard)
	released := make(chan error)
	go func() {
		g := new(spinlock.Guard)
		if err := g.Lock(l, spinlock.NewToken()); err != nil {
			t.Error(err)
			close(promise)
			return
		}
		promise <- g
	}()
	go func() {
		g, ok := <-promise
		if !ok {
			released <- nil
			return
		}
		_, held := l.Owner()
		if !held || !g.Held() {
			t.Error("handed-over guard does not hold the lock")
		}
		released <- g.Release()
	}()
	select {
	case err := <-released:
		require.NoError(t, err)
	case <-time.After(testTimeout):
		t.Fatal("handoff did not complete")
	}
	require.Equal(t, slotState{}, stateOf(l.Slot()))

	// A relay: each goroutine increments under the guard it was handed and
	// passes it on; the last releases.
	const relay = 16
	var counter int
	first := make(chan *spinlock.Guard, 1)
	in := first
	for range relay {
		out := make(chan *spinlock.Guard, 1)
		go func(in <-chan *spinlock.Guard, out chan<- *spinlock.Guard) {
			g := <-in
			counter++
			out <- g
		}(in, out)
		in = out
	}
	g := new(spinlock.Guard)
	require.NoError(t, g.Lock(l, spinlock.NewToken()))
	first <- g
	select {
	case g = <-in:
	case <-time.After(testTimeout):
		t.Fatal("relay did not complete")
	}
	require.Equal(t, relay, counter)
	require.NoError(t, g.Release())
	require.Equal(t, slotState{}, stateOf(l.Slot()))
}

func TestModes(t *testing.T) {
	t.Parallel()
	require.Equal(t, "pid/tid", spinlock.PIDTID.String())
	require.Equal(t, "token", spinlock.Token.String())
	require.Equal(t, "Mode(7)", spinlock.Mode(7).String())
	require.Panics(t, func() { spinlock.New(spinlock.NewInProcessState(), spinlock.Mode(7)) })

	l := newLock(spinlock.Token)
	g, err := l.Lock(spinlock.NewToken())
	require.NoError(t, err)
	require.NoError(t, g.Release())
	require.Zero(t, l.Generation(), "Token locks have no generation")
}

// A holder that locks again through another handle of the same slot
// recurses too: that handle's own flags (Lock.ours) do not know of the
// first hold, and the waiting acquisition finds the caller's identity in
// the lock word instead. A holder of the same way of the flags (TID mod 8)
// that does not hold the lock waits as any other.
func TestRecursionThroughAnotherHandle(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	a, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	b, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	me := spinlock.NewHolder()
	var outer, inner spinlock.Guard
	require.NoError(t, outer.Lock(a, me))
	ctx, cancel := context.WithTimeout(context.Background(), reclaimBound) // a bound on a hang
	defer cancel()
	require.NoError(t, inner.LockContext(ctx, b, me), "the same holder through another handle")
	require.True(t, inner.Recursive())
	require.Equal(t, slotState{PID: me.PID, TID: me.TID, Recursion: 1}, stateOf(a.Slot()))

	sameWay := spinlock.NewHolder()
	for sameWay.TID%8 != me.TID%8 || sameWay.TID == me.TID {
		sameWay = spinlock.NewHolder()
	}
	var other spinlock.Guard
	require.ErrorIs(t, other.TryLock(a, sameWay), spinlock.ErrWouldBlock)
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	require.ErrorIs(t, other.LockContext(short, a, sameWay), context.DeadlineExceeded, "a holder of the same way waits")

	require.NoError(t, inner.Release())
	require.NoError(t, outer.Release())
	require.NoError(t, other.Lock(a, sameWay), "free once the holder let go")
	require.False(t, other.Recursive())
	require.NoError(t, other.Release())
	require.Equal(t, slotState{Token: 1 + 1}, stateOf(a.Slot()))
}

// A free pid/tid slot with a recursion count was damaged (no release,
// reclaim or takeover leaves one): the grant drops the count and marks the
// slot inconsistent, and the holder's one release frees the lock, where
// the count would have kept it held (FuzzSlot found this).
func TestDamagedRecursionCount(t *testing.T) {
	t.Parallel()
	l := spinlock.New(spinlock.NewInProcessState(), spinlock.PIDTID)
	l.Slot().RecursionCount.Store(0x30303030)
	for _, try := range []bool{false, true} {
		var g *spinlock.Guard
		var err error
		if try {
			g, err = l.TryLock(spinlock.NewHolder())
		} else {
			g, err = l.Lock(spinlock.NewHolder())
		}
		require.NoError(t, err)
		require.True(t, g.Inconsistent())
		require.Equal(t, layout.SlotInconsistent, l.Slot().RecursionCount.Load())
		require.NoError(t, g.Release())
		_, held := l.Owner()
		require.False(t, held)
		l.Slot().RecursionCount.Store(7)
	}
}
