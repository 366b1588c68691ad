package shm_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// What becomes of a claim whose last reference goes, by the words of its
// lock: freed at once (a free lock, or one only dead processes hold: no
// holder is left to wait for, nor to be told), kept but recycled by a
// claim that finds no other room (a free lock marked inconsistent: the
// next claimant of its name is told, unless the room is needed), or kept
// for good while it may be held by a live process.
type fate int

const (
	freed fate = iota
	recycled
	kept
)

func (f fate) String() string { return [...]string{"freed", "recycled", "kept"}[f] }

// requireFate releases the only claim of entry i of table k (named "old",
// in a table of one entry) and checks that its entry meets fate want: the
// release frees it, or a claim of another name recycles it, or that claim
// finds the table full.
func requireFate(t *testing.T, seg *shm.Segment, k layout.Kind, i int, want fate) {
	t.Helper()
	require.NoError(t, seg.Release(k, i))
	_, err := seg.Lookup(k, "old")
	if want == freed {
		require.ErrorIs(t, err, shm.ErrNotFound, "freed with its last reference")
		return
	}
	require.NoError(t, err, "kept when its last reference goes")
	j, err := seg.Claim(k, "new")
	if want == kept {
		require.ErrorIs(t, err, shm.ErrTableFull, "never recycled")
		return
	}
	require.NoError(t, err, "recycled by a claim that finds no other room")
	require.Equal(t, i, j)
	_, err = seg.Lookup(k, "old")
	require.ErrorIs(t, err, shm.ErrNotFound)
	require.NoError(t, seg.Release(k, j))
}

// An upgrade mutex's words, as a holder (live or dead) may leave them:
// the directory frees its claim when every holder is dead, counting a
// process that holds the Writer word while it waits and a reader record
// that counts holds, keeps it while any is alive or a lock bit is no
// holder's, and recycles one that is free but marked inconsistent for
// room only. Before, every held mutex was kept, and a marked one too.
func TestUpgradeClaimFateByHolders(t *testing.T) {
	t.Parallel()
	live, dead := proc.Self().Pack(), testproc.ExitedIdentity(t)
	const (
		write        = layout.UpgradeStateWrite
		upgradeBit   = layout.UpgradeStateUpgrade
		pending      = layout.UpgradeStatePending
		inconsistent = layout.UpgradeStateInconsistent
		unique       = layout.UpgradeWriterUnique
		hungry       = uint64(1) << 62
	)
	type rec struct {
		owner uint64
		count uint32
	}
	for _, tc := range []struct {
		name     string
		state    uint32
		writer   uint64
		upgrader uint64
		readers  []rec
		want     fate
	}{
		{name: "free", want: freed},
		{name: "free, a live record with no hold", readers: []rec{{live, 0}}, want: freed},
		{name: "handoff", writer: hungry | 7<<proc.PIDBits, want: freed},
		{name: "marked", state: inconsistent, want: recycled},
		{name: "marked, handoff", state: inconsistent, writer: hungry | 7<<proc.PIDBits, want: recycled},
		{name: "dead unique, fast form", writer: dead | unique, want: freed},
		{name: "dead unique, marked", state: write | inconsistent, writer: dead, want: freed},
		{name: "dead unique", state: write, writer: dead, want: freed},
		{name: "dead waiter for the writers' mutex", writer: dead, want: freed},
		{name: "dead writer, marked hungry", writer: dead | hungry, want: freed},
		{name: "dead upgrade", state: upgradeBit, upgrader: dead, want: freed},
		{name: "dead upgraded", state: write | upgradeBit, upgrader: dead, want: freed},
		{name: "dead pending", state: upgradeBit | pending, upgrader: dead, readers: []rec{{dead, 1}}, want: freed},
		{name: "dead readers", readers: []rec{{dead, 2}, {live, 0}, {dead, 1}}, want: freed},
		{name: "live unique", writer: live | unique, want: kept},
		{name: "live waiter for the writers' mutex", writer: live, upgrader: dead, state: upgradeBit, want: kept},
		{name: "live upgrade", state: upgradeBit, upgrader: live, want: kept},
		{name: "live reader beside a dead one", readers: []rec{{dead, 1}, {live, 1}}, want: kept},
		{name: "live reader beside a dead writer", writer: dead, readers: []rec{{live, 1}}, want: kept},
		{name: "live reader beside a dead pending upgrade", state: upgradeBit | pending, upgrader: dead, readers: []rec{{live, 3}}, want: kept},
		{name: "a count with no owner", readers: []rec{{0, 1}}, want: kept},
		{name: "unique bit of no writer", state: write, upgrader: dead, want: kept},
		{name: "upgrade bit of no upgrader", state: upgradeBit, writer: dead, want: kept},
		{name: "pending bit of no upgrader", state: pending, readers: []rec{{dead, 1}}, want: kept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 1, Upgrades: 1, UpgradeReaders: 4}})
			i, err := seg.Claim(layout.KindUpgrades, "old")
			require.NoError(t, err)
			e, err := seg.Upgrade(i)
			require.NoError(t, err)
			e.State.Store(tc.state)
			e.Writer.Store(tc.writer)
			e.Upgrader.Store(tc.upgrader)
			for j, r := range tc.readers {
				rr, err := seg.UpgradeReader(i, j)
				require.NoError(t, err)
				rr.Owner.Store(r.owner)
				rr.Count.Store(r.count)
			}
			requireFate(t, seg, layout.KindUpgrades, i, tc.want)
			if tc.want != kept {
				require.Zero(t, uint64(e.State.Load())|e.Writer.Load()|e.Upgrader.Load(), "the mutex is zeroed")
				for j := range tc.readers {
					rr, err := seg.UpgradeReader(i, j)
					require.NoError(t, err)
					require.Zero(t, rr.Owner.Load()|uint64(rr.Count.Load()), "its reader records with it")
				}
			}
		})
	}
}

// An owner slot's words, as a reclaim or a force leaves them: free but
// marked inconsistent, its claim is kept for the next claimant of its
// name, and recycled by a claim that finds no other room. Before, a table
// full of such slots refused every new name.
func TestSlotClaimFateMarked(t *testing.T) {
	t.Parallel()
	dead := testproc.ExitedIdentity(t)
	for _, tc := range []struct {
		name      string
		use       uint32
		pid       uint64
		token     uint64
		recursion uint32
		want      fate
	}{
		{"pid/tid released", layout.SlotUsePIDTID, 0, 5, 0, freed},
		{"pid/tid reclaimed and released", layout.SlotUsePIDTID, 0, 6, layout.SlotInconsistent, recycled},
		{"pid/tid reclaimed, its taker dead", layout.SlotUsePIDTID, dead, 6, layout.SlotInconsistent, freed},
		{"pid/tid reclaimed, re-entries and no holder", layout.SlotUsePIDTID, 0, 6, layout.SlotInconsistent | 1, kept},
		{"token forced", layout.SlotUseToken, 0, 0, layout.SlotInconsistent, recycled},
		{"token forced, held again", layout.SlotUseToken, 0, 9, layout.SlotInconsistent, kept},
		{"unsaid, marked, generation kept", 0, 0, 6, layout.SlotInconsistent, kept},
		{"unsaid, marked, no token", 0, 0, 0, layout.SlotInconsistent, recycled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 1}})
			i, err := seg.ClaimAs(layout.KindOwnerSlots, "old", tc.use)
			require.NoError(t, err)
			s, err := seg.Slot(i)
			require.NoError(t, err)
			s.PID.Store(tc.pid)
			s.Token.Store(tc.token)
			s.RecursionCount.Store(tc.recursion)
			requireFate(t, seg, layout.KindOwnerSlots, i, tc.want)
			if tc.want != kept {
				require.Zero(t, s.PID.Load()|s.Token.Load()|uint64(s.RecursionCount.Load()), "the slot is zeroed")
			}
		})
	}
}
