package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/txn"
	"github.com/shmlock/shmlock/upgrade"
)

// usedSegment is a segment after ordinary use of every table, with holds
// left by this (live) process: check must find nothing in it.
func usedSegment(t *testing.T) *shm.Segment {
	t.Helper()
	seg := newSegment(t, layout.Options{})
	l, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	_, err = l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	tl, err := spinlock.Named(seg, "tokened", spinlock.Token)
	require.NoError(t, err)
	_, err = tl.Lock(spinlock.NewToken())
	require.NoError(t, err)
	m, err := upgrade.Named(seg, "table")
	require.NoError(t, err)
	require.NoError(t, m.LockShared())
	require.NoError(t, m.LockUpgrade())
	lm, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	for _, o := range []string{"a", "b", "c"} { // three collaborative holders: an overflow entry
		_, err = lm.Acquire(context.Background(), "res", o, lockmgr.Collaborative, lockmgr.AcquireOptions{})
		require.NoError(t, err)
	}
	sp, err := txn.Open(seg)
	require.NoError(t, err)
	tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 256})
	require.NoError(t, err)
	_, err = tx.Alloc([]byte("object"))
	require.NoError(t, err)
	_, err = sp.Begin(txn.BeginOptions{ArenaBytes: 256})
	require.NoError(t, err)
	return seg
}

func TestCheckUsedSegmentIsClean(t *testing.T) {
	t.Parallel()
	seg := usedSegment(t)
	r := shmctl(t, false, "check", "--json", seg.Path())
	require.Equal(t, exitOK, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	var doc checkJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.True(t, doc.OK)
	assert.Empty(t, doc.Findings)
}

// Each kind of damage, written into the file of a used segment, is found,
// and nothing is changed by check.
func TestCheckFindsDamage(t *testing.T) {
	t.Parallel()
	le := binary.LittleEndian
	noPID := uint64(12345) << proc.StartShift // a start time with pid 0
	for _, tc := range []struct {
		name, want string
		damage     func(t *testing.T, seg *shm.Segment)
	}{
		{"directory state", "neither free (0) nor claimed (1)", func(t *testing.T, seg *shm.Segment) {
			dirEntry(t, seg, layout.KindSlotDirectory, 0).State.Store(7)
		}},
		{"claim with no claimer", "claimed by no process", func(t *testing.T, seg *shm.Segment) {
			dirEntry(t, seg, layout.KindUpgradeDirectory, 0).Claimer.Store(0)
		}},
		{"name claimed twice", `name "queue" claimed at 0 too`, func(t *testing.T, seg *shm.Segment) {
			d := dirEntry(t, seg, layout.KindSlotDirectory, 1)
			copy(d.Name[:], "queue\x00\x00\x00\x00\x00\x00\x00")
			d.NameLen.Store(5)
		}},
		{"claim reference to no claim", "which is not claimed", func(t *testing.T, seg *shm.Segment) {
			refs, _ := seg.Region(layout.KindClaimRefs)
			r, err := memview.At[layout.ClaimRef](refs, uint64(len(refs))-layout.ClaimRefSize) // the last record, free
			require.NoError(t, err)
			r.Target.Store(layout.ClaimTarget(layout.KindOwnerSlots, 6))
			r.Count.Store(1)
			r.Owner.Store(proc.Self().Pack())
		}},
		{"slot owner with no pid", "has no pid", func(t *testing.T, seg *shm.Segment) {
			s, _ := seg.Slot(0)
			s.PID.Store(noPID)
		}},
		{"free slot with a holder id", "free, with a holder id", func(t *testing.T, seg *shm.Segment) {
			s, _ := seg.Slot(7)
			s.TID.Store(9)
		}},
		{"upgrade state bits", "state bits 0x20", func(t *testing.T, seg *shm.Segment) {
			e, _ := seg.Upgrade(0)
			e.State.Or(0x20)
		}},
		{"upgrade lock with no holder", "upgrade lock held with no upgrade holder", func(t *testing.T, seg *shm.Segment) {
			e, _ := seg.Upgrade(1)
			e.State.Store(1 << 30)
		}},
		{"reader count with no owner", "with no owner", func(t *testing.T, seg *shm.Segment) {
			r, _ := seg.UpgradeReader(2, 3)
			r.Count.Store(2)
		}},
		{"lock-manager mode with no holder", "with no holder", func(t *testing.T, seg *shm.Segment) {
			m, _ := lockmgr.Open(seg, lockmgr.Options{})
			for _, o := range []string{"a", "b", "c"} {
				require.NoError(t, m.Release("res", o))
			}
			mem, _ := seg.Region(layout.KindLockMgr)
			for i := 1; i < len(mem)/layout.LockMgrEntrySize; i++ {
				ctl := mem[i*layout.LockMgrEntrySize+8:]
				if le.Uint32(ctl)&3 == 1 { // the resource entry
					le.PutUint32(ctl, le.Uint32(ctl)|1<<3) // exclusive mode, nobody holding
				}
			}
		}},
		{"lock-manager hash", "is not its name's", func(t *testing.T, seg *shm.Segment) {
			mem, _ := seg.Region(layout.KindLockMgr)
			for i := 1; i < len(mem)/layout.LockMgrEntrySize; i++ {
				e := mem[i*layout.LockMgrEntrySize:]
				if le.Uint32(e[8:])&3 == 1 {
					le.PutUint64(e[32:], 42) // Hash, after Lock, Ctl, Gate, Sleepers, Next, Version
				}
			}
		}},
		{"transaction state", "state 9, which no transaction passes through", func(t *testing.T, seg *shm.Segment) {
			recs, _ := seg.Region(layout.KindTxnRecords)
			recs[layout.TxnRecordSize*5] = 9
		}},
		{"overlapping arenas", "their arenas overlap", func(t *testing.T, seg *shm.Segment) {
			recs, _ := seg.Region(layout.KindTxnRecords)
			le.PutUint64(recs[layout.TxnRecordSize+16:], le.Uint64(recs[16:])) // record 1's arena := record 0's
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seg := usedSegment(t)
			tc.damage(t, seg)
			before, err := os.ReadFile(seg.Path())
			require.NoError(t, err)
			r := shmctl(t, false, "check", seg.Path())
			assert.Equal(t, exitError, r.code, "stdout: %s", r.stdout)
			assert.Contains(t, r.stdout, tc.want)
			after, err := os.ReadFile(seg.Path())
			require.NoError(t, err)
			assert.Equal(t, before, after, "check changed the file")
		})
	}
}

// reclaim and unlock refuse a damaged segment, changing nothing, unless
// told to go on.
func TestDamagedSegmentRefused(t *testing.T) {
	t.Parallel()
	seg := usedSegment(t)
	e, err := seg.Upgrade(0)
	require.NoError(t, err)
	e.State.Or(0x20)
	before, err := os.ReadFile(seg.Path())
	require.NoError(t, err)
	line := requireOneLineError(t, shmctl(t, false, "reclaim", seg.Path()), exitError)
	assert.Contains(t, line, "fails check")
	assert.True(t, strings.HasSuffix(line, "or --force"), "the flag that goes on: %s", line)
	// unlock was given --force already: what goes on is --ignore-check.
	line = requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "queue", "--force"), exitError)
	assert.Contains(t, line, "fails check")
	assert.True(t, strings.HasSuffix(line, "or --ignore-check"), "the flag that goes on: %s", line)
	after, err := os.ReadFile(seg.Path())
	require.NoError(t, err)
	assert.Equal(t, before, after)
	assert.Equal(t, exitOK, shmctl(t, false, "reclaim", "--force", seg.Path()).code)
	assert.Equal(t, exitOK, shmctl(t, false, "unlock", seg.Path(), "queue", "--force", "--ignore-check").code)
}

func dirEntry(t *testing.T, seg *shm.Segment, k layout.Kind, i int) *layout.DirEntry {
	t.Helper()
	mem, err := seg.Region(k)
	require.NoError(t, err)
	d, err := memview.At[layout.DirEntry](mem, uint64(i)*layout.DirEntrySize)
	require.NoError(t, err)
	return d
}

// A claim a claimant did not finish (it died before publishing it) leaves
// a free entry that is not zeroed: check tells it as a note, not damage,
// and reclaim does not refuse the segment for it.
func TestCheckNotesAbandonedClaims(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	dirEntry(t, seg, layout.KindSlotDirectory, 5).Refs.Store(1)
	dir, err := seg.Region(layout.KindRegionDirectory)
	require.NoError(t, err)
	dir[3*layout.RegionEntrySize+63] = 1
	notes := []string{
		"slot_directory[5]: a claim its claimant did not finish (it died); free, and the next claim reuses the entry",
		"region_directory[3]: a claim its claimant did not finish (it died); free, and the next claim reuses the entry",
	}

	r := shmctl(t, false, "check", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr %s", r.stderr)
	assert.Equal(t, "note: "+notes[0]+"\nnote: "+notes[1]+"\n", r.stdout)
	r = shmctl(t, false, "check", "--json", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr %s", r.stderr)
	var doc checkJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.True(t, doc.OK)
	assert.Empty(t, doc.Findings)
	assert.Equal(t, notes, doc.Notes)

	r = shmctl(t, false, "reclaim", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr %s", r.stderr)
}
