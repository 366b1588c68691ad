package shm_test

import (
	"cmp"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// directoryKinds are the regions FuzzDirectory damages, in the order its
// input fills them: the two claim directories and the claim references,
// then the tables whose locks decide whether a claim may be freed.
var directoryKinds = []layout.Kind{
	layout.KindSlotDirectory, layout.KindUpgradeDirectory, layout.KindClaimRefs,
	layout.KindOwnerSlots, layout.KindUpgrades, layout.KindUpgradeReaders,
}

// FuzzDirectory: whatever words the claim directories, the claim
// references and the claimable tables hold (a damaged or hostile segment),
// and whether or not a dead process holds the registry lock (a byte past
// the regions, odd), the directory's calls return, with an error or not,
// and never panic or hang: CheckDirectories, AbandonedClaims, Claims, Lookup, claims named
// and unnamed, DropDeadClaims. The claims that succeed, held together,
// are each one that Claims lists and Lookup finds under its name, no two
// share an entry, and each Release gives one back.
func FuzzDirectory(f *testing.F) {
	path := testproc.SegmentPath(f)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{
		Slots: 4, Upgrades: 2, UpgradeReaders: 2, ClaimRefs: 6,
		TxnRecords: -1, TxnArenaBytes: -1, LockMgrEntries: -1,
	}})
	require.NoError(f, err)
	f.Cleanup(func() { _ = seg.Close() })
	regions := make([][]byte, len(directoryKinds))
	for j, k := range directoryKinds {
		regions[j], err = seg.Region(k)
		require.NoError(f, err)
	}
	snapshot := func() []byte {
		var b []byte
		for _, r := range regions {
			b = append(b, r...)
		}
		return b
	}

	// Seeds: an empty directory, and one with named, used and unnamed
	// claims of both tables.
	f.Add(snapshot())
	_, err = seg.Claim(layout.KindOwnerSlots, "queue")
	require.NoError(f, err)
	_, err = seg.ClaimAs(layout.KindOwnerSlots, "jobs", 2)
	require.NoError(f, err)
	_, err = seg.Claim(layout.KindOwnerSlots, "")
	require.NoError(f, err)
	_, err = seg.Claim(layout.KindUpgrades, "table")
	require.NoError(f, err)
	f.Add(snapshot())
	f.Add(append(snapshot(), 1)) // and a dead holder of the registry lock

	file, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(f, err)
	f.Cleanup(func() { _ = file.Close() })
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack() // our pid, reused by us
	registry := make([]byte, 8)
	binary.LittleEndian.PutUint64(registry, dead)

	f.Fuzz(func(t *testing.T, data []byte) {
		for _, r := range regions {
			clear(r)
			data = data[copy(r, data):]
		}
		if len(data) > 0 && data[0]&1 != 0 {
			// A byte past the regions, odd: a process died holding the
			// registry lock, and the next change takes it over (and
			// recounts the references).
			_, err := file.WriteAt(registry, layout.OffRegistry)
			require.NoError(t, err)
		}
		_, err := seg.CheckDirectories()
		testproc.RequireTyped(t, "CheckDirectories", err, directoryErrors...)
		_, err = seg.AbandonedClaims()
		testproc.RequireTyped(t, "AbandonedClaims", err, directoryErrors...)
		_, err = seg.DropDeadClaims(true)
		testproc.RequireTyped(t, "DropDeadClaims", err, directoryErrors...)
		type claim struct {
			k    layout.Kind
			name string
			i    int
		}
		var held []claim
		for _, k := range []layout.Kind{layout.KindOwnerSlots, layout.KindUpgrades} {
			_, err := seg.Claims(k)
			testproc.RequireTyped(t, "Claims", err, directoryErrors...)
			for _, c := range []struct {
				name string
				use  uint32
			}{{"queue", 0}, {"jobs", 1}, {"fuzz", 0}, {"", 0}} {
				_, err := seg.Lookup(k, cmp.Or(c.name, "none"))
				testproc.RequireTyped(t, "Lookup", err, directoryErrors...)
				i, err := seg.ClaimAs(k, c.name, c.use)
				testproc.RequireTyped(t, "ClaimAs", err, directoryErrors...)
				if err == nil {
					held = append(held, claim{k, c.name, i})
				}
			}
		}
		// Held together (a later claim may drop dead references or recycle
		// entries), the claims are each listed, found under their names,
		// and never one entry for two.
		for j, c := range held {
			if !listed(t, seg, c.k, c.i) {
				t.Fatalf("%v %q: claimed %d, which Claims does not list", c.k, c.name, c.i)
			}
			if c.name != "" {
				i, err := seg.Lookup(c.k, c.name)
				require.NoError(t, err, "%v %q: claimed %d", c.k, c.name, c.i)
				require.Equal(t, c.i, i, "%v %q: claimed one entry, looked up another", c.k, c.name)
			}
			for _, d := range held[:j] {
				if d.k == c.k && d.i == c.i {
					t.Fatalf("%v: %q and %q claimed one entry, %d", c.k, d.name, c.name, c.i)
				}
			}
		}
		for _, c := range held {
			if err := seg.Release(c.k, c.i); err != nil {
				t.Fatalf("%v %q: the release of claim %d: %v", c.k, c.name, c.i, err)
			}
		}
		if _, err := seg.DropDeadClaims(false); err != nil && !errors.Is(err, shm.ErrClosed) {
			t.Fatalf("DropDeadClaims: %v", err)
		}
	})
}

// directoryErrors are the errors a call of the claim directory may end
// with on a damaged segment: each a sentinel of package shm or layout.
var directoryErrors = []error{
	shm.ErrClosed, shm.ErrIndex, shm.ErrNotClaimable, shm.ErrTableFull, shm.ErrNotFound,
	shm.ErrNotClaimed, shm.ErrUseMismatch, shm.ErrFault,
	layout.ErrTruncated, layout.ErrMalformed, layout.ErrTableRange, layout.ErrLimit, layout.ErrBadName,
}

// listed reports whether Claims lists entry i of table k.
func listed(t *testing.T, seg *shm.Segment, k layout.Kind, i int) bool {
	claims, err := seg.Claims(k)
	require.NoError(t, err)
	for _, c := range claims {
		if c.Index == i {
			return true
		}
	}
	return false
}
