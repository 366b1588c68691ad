package spinlock_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// A slot claimed by a process that dies, used as a lock in either mode,
// whether its claim said the mode (ClaimAs) or not (use 0). Once the
// claimant is dead its reference goes (DropDeadClaims, or the next claim
// that finds the table full), and the entry is freed when the words prove
// that nobody can hold the lock: a pid/tid holder that is dead, or a lock
// released. A token-mode holder is named by no word, so its slot is kept
// while it is held: the token may be in a live process's hands. Before
// the directory took a dead pid/tid holder's words for free, the entry of
// one that died holding the lock was kept for ever, whether its claim said
// pid/tid or nothing.
func TestDeadClaimantsSlotIsRecycled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		use   uint32
		mode  spinlock.Mode
		then  string // what the helper does with the lock before it is killed: hold or release
		freed bool
	}{
		{0, spinlock.PIDTID, "hold", true},
		{spinlock.PIDTID.ClaimUse(), spinlock.PIDTID, "hold", true},
		// Released, a pid/tid slot keeps its generation in Token, which
		// with use 0 reads as a token held: Open records the mode.
		{0, spinlock.PIDTID, "release", true},
		{spinlock.PIDTID.ClaimUse(), spinlock.PIDTID, "release", true},
		{0, spinlock.Token, "hold", false},
		{spinlock.Token.ClaimUse(), spinlock.Token, "hold", false},
		{0, spinlock.Token, "release", true},
		{spinlock.Token.ClaimUse(), spinlock.Token, "release", true},
	} {
		for _, by := range []string{"DropDeadClaims", "a claim"} {
			t.Run(fmt.Sprintf("use %d %v %s by %s", tc.use, tc.mode, tc.then, by), func(t *testing.T) {
				t.Parallel()
				path := testproc.SegmentPath(t)
				seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 2, LockMgrEntries: scratchEntries}})
				require.NoError(t, err)
				defer seg.Close()
				other, err := seg.Claim(layout.KindOwnerSlots, "other")
				require.NoError(t, err)
				child := testproc.Start(t, "claim-lock", path, "dead", strconv.Itoa(int(tc.use)), tc.mode.String(), tc.then)
				i, err := strconv.Atoi(child.WaitLine(t, "ready "))
				require.NoError(t, err)
				child.Kill(t)
				child.WaitKilled(t)

				switch by {
				case "DropDeadClaims":
					_, err = seg.DropDeadClaims(false)
					require.NoError(t, err)
					_, err = seg.Lookup(layout.KindOwnerSlots, "dead")
					if tc.freed {
						require.ErrorIs(t, err, shm.ErrNotFound, "the dead claimant's entry is freed")
						requireZeroSlot(t, seg, i)
					} else {
						require.NoError(t, err, "a token holder's entry is kept")
					}
				case "a claim":
					j, err := seg.Claim(layout.KindOwnerSlots, "new")
					if tc.freed {
						require.NoError(t, err, "the dead claimant's entry is recycled")
						require.Equal(t, i, j)
						requireZeroSlot(t, seg, i)
					} else {
						require.ErrorIs(t, err, shm.ErrTableFull, "a token holder's entry is kept")
					}
				}
				require.NoError(t, seg.Release(layout.KindOwnerSlots, other))
			})
		}
	}
}

// A slot whose pid/tid holder was killed, taken over by Reclaim (as
// shmctl reclaim does) and released, and so marked inconsistent, whose
// dead claimant's reference is then dropped. With room in the table its
// claim is kept, so that the next process to name it is told that the
// data may be half-updated; with none, a claim of another name takes it
// rather than fail: the news is given up for room only. Before, a table
// full of such slots refused every new name (ErrTableFull) until someone
// named one of the old ones again.
func TestReclaimedSlotIsRecycledForRoomOnly(t *testing.T) {
	t.Parallel()
	for _, room := range []bool{false, true} {
		t.Run(fmt.Sprintf("room %v", room), func(t *testing.T) {
			t.Parallel()
			slots := 2
			if room {
				slots = 3
			}
			path := testproc.SegmentPath(t)
			seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: slots, LockMgrEntries: scratchEntries}})
			require.NoError(t, err)
			defer seg.Close()
			other, err := seg.Claim(layout.KindOwnerSlots, "other")
			require.NoError(t, err)
			use := strconv.Itoa(int(spinlock.PIDTID.ClaimUse()))
			child := testproc.Start(t, "claim-lock", path, "crashed", use, spinlock.PIDTID.String(), "hold")
			i, err := strconv.Atoi(child.WaitLine(t, "ready "))
			require.NoError(t, err)
			child.Kill(t)
			child.WaitKilled(t)
			l, err := spinlock.Open(seg, i, spinlock.PIDTID)
			require.NoError(t, err)
			g, err := l.Reclaim(spinlock.NewHolder())
			require.NoError(t, err)
			require.NoError(t, g.Release())
			require.NoError(t, l.Close())
			_, err = seg.DropDeadClaims(false)
			require.NoError(t, err)
			_, err = seg.Lookup(layout.KindOwnerSlots, "crashed")
			require.NoError(t, err, "the marked slot's claim is kept when its last reference goes")

			j, err := seg.Claim(layout.KindOwnerSlots, "new")
			require.NoError(t, err)
			defer func() { require.NoError(t, seg.Release(layout.KindOwnerSlots, j)) }()
			if !room {
				require.Equal(t, i, j, "with no other room, the marked slot is taken")
				requireZeroSlot(t, seg, i)
				_, err = seg.Lookup(layout.KindOwnerSlots, "crashed")
				require.ErrorIs(t, err, shm.ErrNotFound)
			} else {
				require.NotEqual(t, i, j, "a free entry is taken first")
				l, err := spinlock.Named(seg, "crashed", spinlock.PIDTID)
				require.NoError(t, err)
				require.Equal(t, i, l.Index())
				g, err := l.Lock(spinlock.NewHolder())
				require.NoError(t, err)
				require.True(t, g.Inconsistent(), "the next claimant of the name is told")
				require.NoError(t, g.Release())
				require.NoError(t, l.Close())
			}
			require.NoError(t, seg.Release(layout.KindOwnerSlots, other))
		})
	}
}

func requireZeroSlot(t *testing.T, seg *shm.Segment, i int) {
	t.Helper()
	s, err := seg.Slot(i)
	require.NoError(t, err)
	require.Equal(t, slotState{}, stateOf(s), "a freed slot is zeroed")
}

// claimLockHelper claims owner slot NAME with USE, opens it by index in
// MODE, locks it, and holds it or releases it; it prints the index and
// waits to be killed: PATH NAME USE MODE hold|release.
func claimLockHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return fail("%v", err)
	}
	use, err := strconv.ParseUint(args[2], 10, 32)
	if err != nil {
		return fail("%v", err)
	}
	i, err := seg.ClaimAs(layout.KindOwnerSlots, args[1], uint32(use))
	if err != nil {
		return fail("claim: %v", err)
	}
	mode := parseMode(args[3])
	l, err := spinlock.Open(seg, i, mode)
	if err != nil {
		return fail("open: %v", err)
	}
	id := spinlock.NewHolder()
	if mode == spinlock.Token {
		id = spinlock.NewToken()
	}
	g, err := l.Lock(id)
	if err != nil {
		return fail("lock: %v", err)
	}
	if args[4] == "release" {
		if err := g.Release(); err != nil {
			return fail("release: %v", err)
		}
	}
	fmt.Println("ready", i)
	time.Sleep(3 * testTimeout)
	return fail("not killed")
}

// A slot claimed without a mode takes the mode of its first Open: the
// claim of a pid/tid lock used and released is then freed by its last
// release, as a claim that said its mode is; and an Open for the other
// mode is refused. Its claim was kept for ever (a released pid/tid slot
// keeps its generation in Token, which with use 0 reads as a token held),
// and the other mode's Open let two modes share the slot.
func TestOpenGivesAClaimItsMode(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	for _, mode := range []spinlock.Mode{spinlock.PIDTID, spinlock.Token} {
		i, err := seg.Claim(layout.KindOwnerSlots, "unsaid")
		require.NoError(t, err)
		l, err := spinlock.Open(seg, i, mode)
		require.NoError(t, err)
		use, err := seg.ClaimUse(layout.KindOwnerSlots, i)
		require.NoError(t, err)
		require.Equal(t, mode.ClaimUse(), use, "the claim records the mode of its first Open")
		other := spinlock.Token
		if mode == spinlock.Token {
			other = spinlock.PIDTID
		}
		_, err = spinlock.Open(seg, i, other)
		require.ErrorIs(t, err, spinlock.ErrModeMismatch)
		id := spinlock.NewHolder()
		if mode == spinlock.Token {
			id = spinlock.NewToken()
		}
		g, err := l.Lock(id)
		require.NoError(t, err)
		require.NoError(t, g.Release())
		require.NoError(t, l.Close())
		require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
		_, err = seg.Lookup(layout.KindOwnerSlots, "unsaid")
		require.ErrorIs(t, err, shm.ErrNotFound, "%v: the last release frees a free lock's claim", mode)
		requireZeroSlot(t, seg, i)
	}

	// An unclaimed slot records nothing: it has no claim to record it in.
	l, err := spinlock.Open(seg, 5, spinlock.PIDTID)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Empty(t, claims)
}

// registryStopHelper takes the claim directory's lock of the segment at
// PATH (its word in the header, free when the test starts it), as a claim
// does for a few instructions, and stops itself there, as a SIGSTOP or a
// debugger may stop a process mid-claim, for the test to kill it: PATH.
func registryStopHelper(args []string) int {
	f, err := os.OpenFile(args[0], os.O_RDWR, 0)
	if err != nil {
		return fail("%v", err)
	}
	defer f.Close()
	word := binary.LittleEndian.AppendUint64(nil, proc.Self().Pack())
	if _, err := f.WriteAt(word, layout.OffRegistry); err != nil {
		return fail("%v", err)
	}
	fmt.Println("holding")
	if err := testproc.StopSelf(); err != nil {
		return fail("%v", err)
	}
	return fail("continued")
}

// The first Open of a claim without a mode records the mode under the
// claim directory's lock. While a process stopped mid-claim holds that
// lock, OpenContext gives up when its ctx is done, naming the process, and
// opens and records nothing, so that the slot's mode is still the first
// one recorded; Open waits until the holder is dead, then records its
// mode, and the other mode is refused after it. Before OpenContext, every
// Open waited so, and shmctl unlock --force and reclaim with it.
func TestOpenContextDirectoryLockHolderStopped(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	i, err := seg.Claim(layout.KindOwnerSlots, "unsaid")
	require.NoError(t, err)
	c := testproc.Start(t, "registry-stop", path)
	c.WaitLine(t, "holding")
	c.WaitStopped(t)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for _, mode := range []spinlock.Mode{spinlock.PIDTID, spinlock.Token} {
		l, err := spinlock.OpenContext(ctx, seg, i, mode)
		require.ErrorIs(t, err, context.DeadlineExceeded, "%v", mode)
		require.Nil(t, l)
		assert.Contains(t, err.Error(), fmt.Sprintf("held by live process %d", c.PID()))
		use, err := seg.ClaimUse(layout.KindOwnerSlots, i)
		require.NoError(t, err)
		require.Zero(t, use, "a failed OpenContext recorded %v", mode)
	}

	done := make(chan error, 1)
	go func() {
		l, err := spinlock.Open(seg, i, spinlock.Token)
		if err == nil {
			err = l.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Open returned (%v) while a live process held the directory's lock", err)
	default:
	}
	c.Kill(t)
	c.WaitKilled(t)
	require.NoError(t, testproc.Receive(t, done, "Open once the holder is dead"))
	use, err := seg.ClaimUse(layout.KindOwnerSlots, i)
	require.NoError(t, err)
	require.Equal(t, spinlock.Token.ClaimUse(), use)
	_, err = spinlock.OpenContext(context.Background(), seg, i, spinlock.PIDTID)
	require.ErrorIs(t, err, spinlock.ErrModeMismatch)
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
}
