package spinlock_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/spinlock"
)

// reclaimBound is how long a waiter may take to notice a dead holder. The
// lock checks every 50 ms; the bound only turns a hang into a failure.
const reclaimBound = testproc.Timeout

// lockResult is what a goroutine waiter saw.
type lockResult struct {
	id        spinlock.Identity
	reclaimed bool
	gen       uint64
	err       error
}

// lockInBackground locks l for id in a new goroutine; its guard arrives on
// the channel, holding the lock.
func lockInBackground(t *testing.T, l *spinlock.Lock, id spinlock.Identity) <-chan *spinlock.Guard {
	ch := make(chan *spinlock.Guard, 1)
	go func() {
		g := new(spinlock.Guard)
		if err := g.Lock(l, id); err != nil {
			t.Errorf("Lock: %v", err) // the receiver fails on its timeout
			return
		}
		ch <- g
	}()
	return ch
}

// A process holding a lock (recursively) is killed while a waiter sleeps in
// Lock: the waiter takes the lock over, is told so, and the generation moves
// on by one.
func TestSleepingWaiterReclaimsFromKilledHolder(t *testing.T) {
	t.Parallel()
	for _, waiter := range []string{"goroutine", "process"} {
		t.Run(waiter, func(t *testing.T) {
			t.Parallel()
			seg, path := newSegment(t)
			l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
			require.NoError(t, err)
			holder := testproc.Start(t, "hold", path, "3")
			holder.WaitLine(t, "held")
			owner, held := l.Owner()
			require.True(t, held)
			require.Equal(t, holder.Identity(t), owner.PID)
			require.EqualValues(t, 2, l.Slot().RecursionCount.Load())
			gen0 := l.Generation()

			me := spinlock.NewHolder()
			var got <-chan *spinlock.Guard
			var other *testproc.Child
			if waiter == "goroutine" {
				got = lockInBackground(t, l, me)
			} else {
				other = testproc.Start(t, "wait-lock", path)
			}
			waitFor(t, func() bool { return l.Slot().Pad.Load() >= 1 }, "the waiter to sleep")

			require.NoError(t, holder.Cmd.Process.Kill())
			holder.WaitKilled(t)

			if waiter == "goroutine" {
				select {
				case g := <-got:
					require.True(t, g.Reclaimed(), "Reclaimed")
					require.True(t, g.Inconsistent(), "Inconsistent")
					require.Equal(t, gen0+1, l.Generation(), "generation after the reclaim")
					require.Equal(t, slotState{PID: me.PID, TID: me.TID, Token: gen0 + 1, Recursion: layout.SlotInconsistent}, stateOf(l.Slot()))
					require.NoError(t, g.Release())
				case <-time.After(reclaimBound):
					t.Fatalf("waiter did not get the lock of a dead holder within %v", reclaimBound)
				}
			} else {
				other.WaitOK(t)
				require.Equal(t, fmt.Sprintf("reclaimed=true gen=%d", gen0+1), other.WaitLine(t, "acquired "))
			}
			require.Equal(t, slotState{Token: gen0 + 2, Recursion: layout.SlotInconsistent}, stateOf(l.Slot()),
				"free after one reclaim and one release, still inconsistent: nobody said the data was repaired")
		})
	}
}

// Several waiters, in this process and in others, sleep on a lock whose
// holder is killed: exactly one of them reclaims it, and all get it in turn.
func TestDeadHolderIsReclaimedOnce(t *testing.T) {
	t.Parallel()
	const goroutines, processes = 3, 2
	seg, path := newSegment(t)
	l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
	require.NoError(t, err)
	holder := testproc.Start(t, "hold", path, "1")
	holder.WaitLine(t, "held")
	gen0 := l.Generation()

	results := make(chan lockResult, goroutines)
	for range goroutines {
		go func() {
			me := spinlock.NewHolder()
			var g spinlock.Guard
			err := g.TryLockFor(l, me, testTimeout)
			r := lockResult{id: me, reclaimed: g.Reclaimed(), gen: l.Generation(), err: err}
			if err == nil {
				time.Sleep(time.Millisecond)
				r.err = g.Release()
			}
			results <- r
		}()
	}
	waiters := make([]*testproc.Child, processes)
	for i := range waiters {
		waiters[i] = testproc.Start(t, "wait-lock", path)
	}
	waitFor(t, func() bool { return l.Slot().Pad.Load() == goroutines+processes }, "all waiters to sleep")
	require.NoError(t, holder.Cmd.Process.Kill())
	holder.WaitKilled(t)

	reclaims := 0
	for range goroutines {
		r := <-results
		require.NoError(t, r.err)
		if r.reclaimed {
			reclaims++
		}
	}
	for _, c := range waiters {
		c.WaitOK(t)
		var reclaimed bool
		var gen uint64
		_, err := fmt.Sscanf(c.WaitLine(t, "acquired "), "reclaimed=%t gen=%d", &reclaimed, &gen)
		require.NoError(t, err)
		if reclaimed {
			reclaims++
		}
	}
	if reclaims != 1 {
		t.Fatalf("reclaims: got %d, want exactly 1", reclaims)
	}
	want := gen0 + 1 + goroutines + processes // one reclaim, then one release each
	require.Equal(t, slotState{Token: want, Recursion: layout.SlotInconsistent}, stateOf(l.Slot()))
}

func holdHelper(args []string) int {
	depth, _ := strconv.Atoi(args[1])
	seg, l, _, err := openLock(args[0], spinlock.PIDTID)
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	me := spinlock.NewHolder()
	for range depth {
		if _, err := l.TryLock(me); err != nil {
			return fail("lock: %v", err)
		}
	}
	fmt.Println("held")
	time.Sleep(3 * testTimeout) // until the parent kills us
	return fail("not killed")
}

// waitLockHelper locks slot 0, prints what it was told, marks the data
// consistent if its second argument is "mark", and releases: PATH [MARK].
func waitLockHelper(args []string) int {
	seg, l, _, err := openLock(args[0], spinlock.PIDTID)
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	var g spinlock.Guard
	if err := g.TryLockFor(l, spinlock.NewHolder(), testTimeout); err != nil {
		return fail("lock: %v", err)
	}
	fmt.Printf("acquired reclaimed=%t gen=%d\n", g.Reclaimed(), l.Generation())
	fmt.Printf("told reclaimed=%t inconsistent=%t\n", g.Reclaimed(), g.Inconsistent())
	if len(args) > 1 && args[1] == "mark" {
		if err := g.MarkConsistent(); err != nil {
			return fail("mark: %v", err)
		}
	}
	time.Sleep(time.Millisecond)
	if err := g.Release(); err != nil {
		return fail("release: %v", err)
	}
	return 0
}

// deadOwners are packed identities of processes that are not running: this
// process's pid with another start time (the pid reused), and this process
// marked as recorded before a reboot.
func deadOwners() map[string]uint64 {
	self := proc.Self()
	return map[string]uint64{
		"pid reused": proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack(),
		"stale":      proc.MarkStale(self.Pack()),
	}
}

// lockSetups are the two ways to make a PIDTID lock: over a slot in process
// memory (liveness from the process table) and over a slot of a segment
// (liveness also checks the segment's boot).
var lockSetups = map[string]func(t *testing.T) *spinlock.Lock{
	"in-process": func(*testing.T) *spinlock.Lock {
		return spinlock.New(spinlock.NewInProcessState(), spinlock.PIDTID)
	},
	"segment": func(t *testing.T) *spinlock.Lock {
		seg, _ := newSegment(t)
		l, err := spinlock.Open(seg, 0, spinlock.PIDTID)
		require.NoError(t, err)
		return l
	},
}

// A slot owned by an identity whose process does not run is taken over, by
// a waiting Lock and by Reclaim; the recursion count of the dead holder goes.
func TestDeadIdentityIsReclaimed(t *testing.T) {
	t.Parallel()
	for setupName, setup := range lockSetups {
		for ownerName, owner := range deadOwners() {
			for _, how := range []string{"Lock", "Reclaim"} {
				t.Run(setupName+"/"+ownerName+"/"+how, func(t *testing.T) {
					t.Parallel()
					l := setup(t)
					s := l.Slot()
					s.PID.Store(owner)
					s.TID.Store(0xdead)
					s.Token.Store(41)
					s.RecursionCount.Store(7)
					me := spinlock.NewHolder()

					var g *spinlock.Guard
					if how == "Lock" {
						select {
						case g = <-lockInBackground(t, l, me):
						case <-time.After(reclaimBound):
							t.Fatalf("Lock did not reclaim within %v", reclaimBound)
						}
					} else {
						var err error
						g, err = l.Reclaim(me)
						require.NoError(t, err)
					}
					require.True(t, g.Reclaimed(), "Reclaimed")
					require.False(t, g.Recursive())
					require.Equal(t, slotState{PID: me.PID, TID: me.TID, Token: 42, Recursion: layout.SlotInconsistent}, stateOf(s))
					require.NoError(t, g.Release(), "one release undoes the reclaim")
					require.Equal(t, slotState{Token: 43, Recursion: layout.SlotInconsistent}, stateOf(s))
				})
			}
		}
	}
}

// A live owner is never taken over: not another holder of this process, not
// another process.
func TestLiveOwnerIsNotReclaimed(t *testing.T) {
	t.Parallel()
	parent, err := proc.Lookup(uint32(os.Getppid()))
	require.NoError(t, err)
	require.True(t, proc.Alive(parent))
	owners := map[string]spinlock.Identity{
		"this process":   spinlock.NewHolder(),
		"parent process": {PID: parent.Pack(), TID: 0x1234},
	}
	for setupName, setup := range lockSetups {
		for ownerName, owner := range owners {
			t.Run(setupName+"/"+ownerName, func(t *testing.T) {
				t.Parallel()
				l := setup(t)
				s := l.Slot()
				if owner.PID == proc.Self().Pack() {
					_, err := l.Lock(owner)
					require.NoError(t, err)
				} else {
					s.PID.Store(owner.PID)
					s.TID.Store(owner.TID)
				}
				before := stateOf(s)
				me := spinlock.NewHolder()

				_, err := l.Reclaim(me)
				require.ErrorIs(t, err, spinlock.ErrWouldBlock)
				var g spinlock.Guard
				// Long enough for several liveness checks (every 50 ms).
				require.ErrorIs(t, g.TryLockFor(l, me, 300*time.Millisecond), spinlock.ErrTimeout)
				require.False(t, g.Held())
				require.Equal(t, before, stateOf(s), "slot unchanged")
			})
		}
	}
}

// A free lock is not "reclaimed".
func TestReclaimFreeLock(t *testing.T) {
	t.Parallel()
	l := spinlock.New(spinlock.NewInProcessState(), spinlock.PIDTID)
	_, err := l.Reclaim(spinlock.NewHolder())
	require.ErrorIs(t, err, spinlock.ErrWouldBlock)
	tl := spinlock.New(spinlock.NewInProcessState(), spinlock.Token)
	tok := spinlock.NewToken()
	_, err = tl.Lock(tok)
	require.NoError(t, err)
	_, err = tl.Reclaim(spinlock.NewToken())
	require.ErrorIs(t, err, spinlock.ErrWouldBlock, "a token has no process to die")
	require.Equal(t, slotState{Token: tok.Token}, stateOf(tl.Slot()))
}
