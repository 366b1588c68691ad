package shm_test

import (
	"cmp"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// directoryKinds are the regions FuzzDirectory damages, in the order its
// input fills them: the two claim directories and the claim references,
// then the tables whose locks decide whether a claim may be freed, and the
// directory of the data regions.
var directoryKinds = []layout.Kind{
	layout.KindSlotDirectory, layout.KindUpgradeDirectory, layout.KindClaimRefs,
	layout.KindOwnerSlots, layout.KindUpgrades, layout.KindUpgradeReaders,
	layout.KindRegionDirectory,
}

// identityKinds are the tables of FuzzDirectory's segment whose words
// name processes, each with the offsets of those words in an entry: the
// words a recovery after a reboot marks stale.
var identityKinds = map[layout.Kind][]uintptr{
	layout.KindSlotDirectory:    {unsafe.Offsetof(layout.DirEntry{}.Claimer)},
	layout.KindUpgradeDirectory: {unsafe.Offsetof(layout.DirEntry{}.Claimer)},
	layout.KindClaimRefs:        {unsafe.Offsetof(layout.ClaimRef{}.Owner)},
	layout.KindOwnerSlots:       {unsafe.Offsetof(layout.OwnerSlot{}.PID)},
	layout.KindUpgrades:         {unsafe.Offsetof(layout.UpgradeEntry{}.Writer), unsafe.Offsetof(layout.UpgradeEntry{}.Upgrader)},
	layout.KindUpgradeReaders:   {unsafe.Offsetof(layout.ReaderRecord{}.Owner)},
}

// The holders of the registry lock (the directory's) that FuzzDirectory's
// control bytes choose from (ctl[0] modulo numRegistryModes).
const (
	registryFree       = iota // 0: nobody
	registryDead              // a dead process (this pid, reused by this process)
	registryStaleDead         // the same, marked stale (bit 63), as a reboot leaves it
	registryStaleSelf         // this process, marked stale: before a reboot, a process that had its identity
	registryLiveSelf          // this process, though none of its changes is under way
	registryLiveParent        // a live process: the fuzzer's coordinator
	registryGarbage           // ctl[2:10], little-endian
	numRegistryModes
)

// otherBoot, set in ctl[1], records the owners of the segment under
// another boot than this one: the Open that follows recovers the segment
// (shm/reboot.go) before anything else runs on it.
const otherBoot = 1

// FuzzDirectory: whatever words the claim directories, the claim
// references, the claimable tables and the region directory hold (a
// damaged or hostile segment), whoever holds the registry lock (the
// directory's), and whether the owners were recorded under this boot or
// another, a segment reopened on them recovers from the reboot if it must
// and its directory's calls return, with a typed error or not, and never
// panic or hang: CheckDirectories, AbandonedClaims, Claims, Lookup, claims
// named (the fuzzer's name too) and unnamed, DropDeadClaims, and Data,
// which claims a data region. The claims that succeed, held together, are
// each one that Claims lists and Lookup finds under its name, no two share
// an entry, and each Release gives one back; a data region claimed is
// found again under its name and overlaps no other. After a recovery the
// registry lock is free and every identity word is 0 or marked stale. A
// live holder of the registry lock (this process's identity included:
// another of its handles may be mid-change) is waited for until the
// segment is closed under the calls, which then fail and have changed
// nothing.
func FuzzDirectory(f *testing.F) {
	path := testproc.SegmentPath(f)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{
		Slots: 4, Upgrades: 2, UpgradeReaders: 2, ClaimRefs: 6,
		TxnRecords: -1, TxnArenaBytes: -1, LockMgrEntries: -1,
		DataBytes: 1024, DataRegions: 3,
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
	// claims of both tables and a data region, under each holder of the
	// registry lock, in this boot and after a reboot.
	f.Add(snapshot(), []byte{}, "")
	_, err = seg.Claim(layout.KindOwnerSlots, "queue")
	require.NoError(f, err)
	_, err = seg.ClaimAs(layout.KindOwnerSlots, "jobs", 2)
	require.NoError(f, err)
	_, err = seg.Claim(layout.KindOwnerSlots, "")
	require.NoError(f, err)
	_, err = seg.Claim(layout.KindUpgrades, "table")
	require.NoError(f, err)
	_, err = seg.Data("rows", 100)
	require.NoError(f, err)
	for mode := range byte(numRegistryModes) {
		f.Add(snapshot(), []byte{mode}, "fuzz")
		f.Add(snapshot(), []byte{mode, otherBoot}, "queue")
	}

	file, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(f, err)
	f.Cleanup(func() { _ = file.Close() })
	boot, err := proc.BootID()
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, data, ctl []byte, name string) {
		for _, r := range regions {
			clear(r)
			data = data[copy(r, data):]
		}
		holder := registryHolder(t, ctl)
		owners := boot
		if len(ctl) > 1 && ctl[1]&otherBoot != 0 {
			owners[0] ^= 0xff
		}
		header := binary.LittleEndian.AppendUint64(nil, holder)
		header = append(header, owners[:]...)
		_, err := file.WriteAt(header, layout.OffRegistry)
		require.NoError(t, err)

		h, err := shm.Open(path, shm.Options{})
		require.NoError(t, err, "the header is whole: only the tables are damaged")
		if owners != boot {
			requireRecovered(t, h, file, regions)
		}
		if registryBlocked(holder) && owners == boot {
			// Every change waits for the live holder until Close, and
			// then has changed nothing.
			before := snapshot()
			stop := testproc.CloseAfter(h.Close, time.Millisecond)
			exerciseDirectory(t, h, name)
			stop()
			require.Equal(t, before, snapshot(), "a change that gave up at Close changed the tables")
			return
		}
		defer h.Close()
		exerciseDirectory(t, h, name)
	})
}

// registryHolder is the registry word ctl chooses (see the registry
// modes).
func registryHolder(t *testing.T, ctl []byte) uint64 {
	if len(ctl) == 0 {
		return 0
	}
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack() // our pid, reused by us
	switch ctl[0] % numRegistryModes {
	case registryDead:
		return dead
	case registryStaleDead:
		return proc.MarkStale(dead)
	case registryStaleSelf:
		return proc.MarkStale(self.Pack())
	case registryLiveSelf:
		return self.Pack()
	case registryLiveParent:
		parent, err := proc.Lookup(uint32(os.Getppid()))
		require.NoError(t, err)
		return parent.Pack()
	case registryGarbage:
		var w [8]byte
		if len(ctl) > 2 {
			copy(w[:], ctl[2:])
		}
		return binary.LittleEndian.Uint64(w[:])
	}
	return 0
}

// registryBlocked reports whether holder, in the registry word, makes a
// change wait (for as long as the segment stays open): a live process's
// identity, this one's included.
func registryBlocked(holder uint64) bool {
	return holder != 0 && (holder == proc.Self().Pack() || proc.AlivePacked(holder))
}

// requireRecovered checks the segment after a writable Open recovered it
// from a reboot: the registry lock is free, and every identity word of
// regions (those of identityKinds) is 0 or marked stale.
func requireRecovered(t *testing.T, seg *shm.Segment, file *os.File, regions [][]byte) {
	word := make([]byte, 8)
	_, err := file.ReadAt(word, layout.OffRegistry)
	require.NoError(t, err)
	require.Zero(t, binary.LittleEndian.Uint64(word), "the registry lock after a recovery")
	for j, k := range directoryKinds {
		hdr := seg.Header()
		size := int(hdr.Table(k).EntrySize)
		for _, off := range identityKinds[k] {
			for e := 0; e+size <= len(regions[j]); e += size {
				w := binary.LittleEndian.Uint64(regions[j][e+int(off):])
				if _, stale := proc.Unpack(w); w != 0 && !stale {
					t.Fatalf("%v entry %d: identity %#x at +%d not marked stale by the recovery", k, e/size, w, off)
				}
			}
		}
	}
}

// exerciseDirectory makes FuzzDirectory's calls on seg, and checks what
// they promise whatever the directory holds; name is the fuzzer's.
func exerciseDirectory(t *testing.T, seg *shm.Segment, name string) {
	_, err := seg.CheckDirectories()
	testproc.RequireTyped(t, "CheckDirectories", err, directoryErrors...)
	_, err = seg.AbandonedClaims()
	testproc.RequireTyped(t, "AbandonedClaims", err, directoryErrors...)
	_, err = seg.DropDeadClaims(true)
	testproc.RequireTyped(t, "DropDeadClaims", err, directoryErrors...)
	_, err = seg.DropDeadClaims(false)
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
		}{{"queue", 0}, {"jobs", 1}, {name, 0}, {"", 0}} {
			_, err := seg.Lookup(k, cmp.Or(c.name, "none"))
			testproc.RequireTyped(t, "Lookup", err, directoryErrors...)
			i, err := seg.ClaimAs(k, c.name, c.use)
			testproc.RequireTyped(t, "ClaimAs", err, directoryErrors...)
			if err == nil {
				held = append(held, claim{k, c.name, i})
			}
		}
	}
	exerciseData(t, seg, name)
	if seg.Closed() {
		return // nothing can be listed any more; the releases below go on
	}
	// Held together (a later claim may drop dead references or recycle
	// entries), the claims are each listed, found under their names, and
	// never one entry for two.
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
			if d.k == c.k && d.i == c.i && (d.name != c.name || c.name == "") {
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
}

// exerciseData claims data regions (the fuzzer's name among them) on seg
// and checks each one made: found again under its name at the same place,
// inside the data area, and overlapping no other region.
func exerciseData(t *testing.T, seg *shm.Segment, name string) {
	_, err := seg.Regions()
	testproc.RequireTyped(t, "Regions", err, directoryErrors...)
	_, _, err = seg.DataArea()
	testproc.RequireTyped(t, "DataArea", err, directoryErrors...)
	for _, c := range []struct {
		name string
		size int
	}{{"rows", 100}, {"rows", 0}, {name, 64}, {"big", 2048}} {
		r, err := seg.Data(c.name, c.size)
		testproc.RequireTyped(t, "Data", err, directoryErrors...)
		if err != nil || seg.Closed() {
			continue
		}
		again, err := seg.Data(c.name, 0)
		require.NoError(t, err, "data region %q, just claimed", c.name)
		require.Equal(t, r.Offset(), again.Offset(), "data region %q found elsewhere", c.name)
		all, err := seg.Regions()
		require.NoError(t, err)
		size, _, err := seg.DataArea()
		require.NoError(t, err)
		if r.Offset()+r.Len() > size {
			t.Fatalf("data region %q [%d, +%d) past the data area's %d bytes", c.name, r.Offset(), r.Len(), size)
		}
		for _, o := range all {
			if o.Index() != r.Index() && o.Offset() < r.Offset()+r.Len() && r.Offset() < o.Offset()+o.Len() {
				t.Fatalf("data region %q [%d, +%d) overlaps %q [%d, +%d)", c.name, r.Offset(), r.Len(), o.Name(), o.Offset(), o.Len())
			}
		}
	}
}

// directoryErrors are the errors a call of the claim directory may end
// with on a damaged segment: each a sentinel of package shm or layout.
var directoryErrors = []error{
	shm.ErrClosed, shm.ErrIndex, shm.ErrNotClaimable, shm.ErrTableFull, shm.ErrNotFound,
	shm.ErrNotClaimed, shm.ErrUseMismatch, shm.ErrFault, shm.ErrRegionSize, shm.ErrDataFull,
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
