package upgrade_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// claimOptions size the segments of the claim tests: upgrades mutexes,
// the first claimed by the test for good, so that a claim that finds no
// free entry must recycle (or refuse) the others.
func claimOptions(upgrades int) shm.Options {
	o := testOptions
	o.Upgrades = upgrades
	return o
}

// A mutex named by a process that is killed while it holds it, in each
// form of hold. Once the claimant is dead its reference goes
// (DropDeadClaims, or the next claim that finds the table full), and the
// entry is freed when every holder is dead: nobody is left to wait for
// the lock or to be told that its data may be half-updated. A live
// process's shared hold beside the dead one's keeps it. Before the
// directory asked who held a mutex, such an entry was kept for ever.
func TestDeadClaimantsMutexIsRecycled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode       string // the helper's hold (claimHoldHelper)
		liveReader bool   // the test holds a shared lock beside it
		freed      bool
	}{
		{"shared", false, true},
		{"unique", false, true},     // Lock's fast path: writerUnique
		{"unique-try", false, true}, // TryLock: stateWrite
		{"upgrade", false, true},
		{"upgraded", false, true}, // the upgrade holder's unique lock
		{"shared", true, false},
	} {
		for _, by := range []string{"DropDeadClaims", "a claim"} {
			t.Run(fmt.Sprintf("%s live reader %v by %s", tc.mode, tc.liveReader, by), func(t *testing.T) {
				t.Parallel()
				path := testproc.SegmentPath(t)
				seg, err := shm.Create(path, claimOptions(2))
				require.NoError(t, err)
				defer seg.Close()
				other, err := seg.Claim(layout.KindUpgrades, "other")
				require.NoError(t, err)
				child := testproc.Start(t, "claim-hold", path, "dead", tc.mode)
				i, err := strconv.Atoi(child.WaitLine(t, "held "))
				require.NoError(t, err)
				var reader *upgrade.Mutex
				if tc.liveReader {
					// By index: a live hold with no reference to the claim.
					reader, err = upgrade.Open(seg, i)
					require.NoError(t, err)
					require.NoError(t, reader.LockShared())
				}
				child.Kill(t)
				child.WaitKilled(t)

				switch by {
				case "DropDeadClaims":
					_, err = seg.DropDeadClaims(false)
					require.NoError(t, err)
					_, err = seg.Lookup(layout.KindUpgrades, "dead")
					if tc.freed {
						require.ErrorIs(t, err, shm.ErrNotFound, "the dead claimant's entry is freed")
						requireZeroMutex(t, seg, i)
					} else {
						require.NoError(t, err, "a live reader's entry is kept")
					}
				case "a claim":
					j, err := seg.Claim(layout.KindUpgrades, "new")
					if tc.freed {
						require.NoError(t, err, "the dead claimant's entry is recycled")
						require.Equal(t, i, j)
						requireZeroMutex(t, seg, i)
						require.NoError(t, seg.Release(layout.KindUpgrades, j))
					} else {
						require.ErrorIs(t, err, shm.ErrTableFull, "a live reader's entry is kept")
					}
				}
				if reader != nil {
					require.NoError(t, reader.UnlockShared())
					require.NoError(t, reader.Close())
					// The dead reader alone is left: the entry goes now.
					j, err := seg.Claim(layout.KindUpgrades, "new")
					require.NoError(t, err, "the dead reader's entry is recycled once the live one leaves")
					require.Equal(t, i, j)
					require.NoError(t, seg.Release(layout.KindUpgrades, j))
				}
				require.NoError(t, seg.Release(layout.KindUpgrades, other))
			})
		}
	}
}

// A mutex whose unique holder was killed, taken over by Reclaim (as
// shmctl reclaim does) and so marked inconsistent, whose dead claimant's
// reference is then dropped. With room in the table its claim is kept, so
// that the next process to name it is told that the data may be
// half-updated; with none, a claim of another name takes it rather than
// fail: the news is given up for room only. Before, a table full of such
// entries refused every new name (ErrTableFull) until someone named one
// of the old ones again.
func TestMarkedMutexIsRecycledForRoomOnly(t *testing.T) {
	t.Parallel()
	for _, room := range []bool{false, true} {
		t.Run(fmt.Sprintf("room %v", room), func(t *testing.T) {
			t.Parallel()
			path := testproc.SegmentPath(t)
			upgrades := 2
			if room {
				upgrades = 3
			}
			seg, err := shm.Create(path, claimOptions(upgrades))
			require.NoError(t, err)
			defer seg.Close()
			other, err := seg.Claim(layout.KindUpgrades, "other")
			require.NoError(t, err)
			child := testproc.Start(t, "claim-hold", path, "crashed", "unique")
			i, err := strconv.Atoi(child.WaitLine(t, "held "))
			require.NoError(t, err)
			child.Kill(t)
			child.WaitKilled(t)
			rep, err := upgrade.Reclaim(seg, i, false)
			require.NoError(t, err)
			require.NotZero(t, rep.Writer, "the dead writer is released")
			_, err = seg.DropDeadClaims(false)
			require.NoError(t, err)
			_, err = seg.Lookup(layout.KindUpgrades, "crashed")
			require.NoError(t, err, "the marked mutex's claim is kept when its last reference goes")

			j, err := seg.Claim(layout.KindUpgrades, "new")
			require.NoError(t, err)
			defer func() { require.NoError(t, seg.Release(layout.KindUpgrades, j)) }()
			if !room {
				require.Equal(t, i, j, "with no other room, the marked entry is taken")
				requireZeroMutex(t, seg, i)
				_, err = seg.Lookup(layout.KindUpgrades, "crashed")
				require.ErrorIs(t, err, shm.ErrNotFound)
			} else {
				require.NotEqual(t, i, j, "a free entry is taken first")
				m, err := upgrade.Named(seg, "crashed")
				require.NoError(t, err)
				require.Equal(t, i, m.Index())
				require.NoError(t, m.Lock())
				require.True(t, m.Reclaimed(), "the next claimant of the name is told")
				require.True(t, m.Inconsistent())
				require.NoError(t, m.Unlock())
				require.NoError(t, m.Close())
			}
			require.NoError(t, seg.Release(layout.KindUpgrades, other))
		})
	}
}

func requireZeroMutex(t *testing.T, seg *shm.Segment, i int) {
	t.Helper()
	st, err := upgrade.Inspect(seg, i)
	require.NoError(t, err)
	require.Equal(t, upgrade.Status{Index: i, ReaderRecords: st.ReaderRecords, Readers: []upgrade.ReaderStatus{}}, st, "a freed mutex is zeroed")
}

// claimHoldHelper names upgrade mutex NAME, takes a hold in MODE (shared,
// unique, unique-try, upgrade, upgraded), prints "held INDEX" and waits to
// be killed: PATH NAME MODE.
func claimHoldHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	m, err := upgrade.Named(seg, args[1])
	if err != nil {
		fmt.Println("named:", err)
		return 1
	}
	switch mode := args[2]; mode {
	case "shared":
		err = m.LockShared()
	case "unique":
		err = m.Lock()
	case "unique-try":
		err = m.TryLock()
	case "upgrade":
		err = m.LockUpgrade()
	case "upgraded":
		if err = m.LockUpgrade(); err == nil {
			err = m.UpgradeToUnique()
		}
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("held", m.Index())
	time.Sleep(3 * testTimeout)
	return 1
}
