package layout_test

import (
	"sort"
	"testing"
	"unsafe"

	"github.com/shmlock/shmlock/layout"
)

// The entry types are laid over shared memory read by other processes (and
// other builds), so their sizes and field offsets are part of the format.

func TestOwnerSlotLayout(t *testing.T) {
	t.Parallel()
	var s layout.OwnerSlot
	checkSize(t, "OwnerSlot", unsafe.Sizeof(s), layout.OwnerSlotSize)
	if got, want := unsafe.Sizeof(s), uintptr(32); got != want {
		t.Errorf("unsafe.Sizeof(OwnerSlot): got %d, want %d", got, want)
	}
	checkOffsets(t, "OwnerSlot", []fieldOffset{
		{"PID", unsafe.Offsetof(s.PID), 0},
		{"TID", unsafe.Offsetof(s.TID), 8},
		{"Token", unsafe.Offsetof(s.Token), 16},
		{"RecursionCount", unsafe.Offsetof(s.RecursionCount), 24},
		{"Pad", unsafe.Offsetof(s.Pad), 28},
	})
	if layout.CacheLine%layout.OwnerSlotSize != 0 {
		t.Errorf("CacheLine %% OwnerSlotSize: got %d, want 0 (slots must not straddle lines)", layout.CacheLine%layout.OwnerSlotSize)
	}
}

func TestDirEntryLayout(t *testing.T) {
	t.Parallel()
	var e layout.DirEntry
	checkSize(t, "DirEntry", unsafe.Sizeof(e), layout.DirEntrySize)
	if got, want := layout.DirEntrySize, 64; got != want {
		t.Errorf("DirEntrySize: got %d, want %d", got, want)
	}
	if got, want := layout.MaxNameLen, 40; got != want {
		t.Errorf("MaxNameLen: got %d, want %d", got, want)
	}
	if got, want := len(e.Name), layout.MaxNameLen; got != want {
		t.Errorf("len(DirEntry.Name): got %d, want %d", got, want)
	}
	checkOffsets(t, "DirEntry", []fieldOffset{
		{"State", unsafe.Offsetof(e.State), 0},
		{"Refs", unsafe.Offsetof(e.Refs), 4},
		{"NameLen", unsafe.Offsetof(e.NameLen), 8},
		{"Use", unsafe.Offsetof(e.Use), 12},
		{"Claimer", unsafe.Offsetof(e.Claimer), 16},
		{"Name", unsafe.Offsetof(e.Name), 24},
	})
}

func TestUpgradeEntryLayout(t *testing.T) {
	t.Parallel()
	var u layout.UpgradeEntry
	checkSize(t, "UpgradeEntry", unsafe.Sizeof(u), layout.UpgradeEntrySize)
	if got, want := layout.UpgradeEntrySize, 64; got != want {
		t.Errorf("UpgradeEntrySize: got %d, want %d", got, want)
	}
	checkOffsets(t, "UpgradeEntry", []fieldOffset{
		{"State", unsafe.Offsetof(u.State), 0},
		{"SharedGate", unsafe.Offsetof(u.SharedGate), 4},
		{"UniqueGate", unsafe.Offsetof(u.UniqueGate), 8},
		{"Waiters", unsafe.Offsetof(u.Waiters), 12},
		{"Writer", unsafe.Offsetof(u.Writer), 16},
		{"WriterTID", unsafe.Offsetof(u.WriterTID), 24},
		{"Upgrader", unsafe.Offsetof(u.Upgrader), 32},
		{"UpgraderTID", unsafe.Offsetof(u.UpgraderTID), 40},
		{"Generation", unsafe.Offsetof(u.Generation), 48},
		{"WriterGate", unsafe.Offsetof(u.WriterGate), 56},
		{"WriterSleepers", unsafe.Offsetof(u.WriterSleepers), 60},
	})
}

func TestRegionEntryLayout(t *testing.T) {
	t.Parallel()
	var e layout.RegionEntry
	checkSize(t, "RegionEntry", unsafe.Sizeof(e), layout.RegionEntrySize)
	if got, want := layout.RegionEntrySize, 64; got != want {
		t.Errorf("RegionEntrySize: got %d, want %d", got, want)
	}
	if got, want := int(unsafe.Sizeof(e.Name)), layout.MaxNameLen; got != want {
		t.Errorf("unsafe.Sizeof(RegionEntry.Name): got %d, want MaxNameLen %d", got, want)
	}
	checkOffsets(t, "RegionEntry", []fieldOffset{
		{"State", unsafe.Offsetof(e.State), 0},
		{"NameLen", unsafe.Offsetof(e.NameLen), 4},
		{"Offset", unsafe.Offsetof(e.Offset), 8},
		{"Size", unsafe.Offsetof(e.Size), 16},
		{"Name", unsafe.Offsetof(e.Name), 24},
	})
	if got, want := layout.RegionAlign, layout.CacheLine; got != want {
		t.Errorf("RegionAlign: got %d, want CacheLine %d", got, want)
	}
	if layout.RegionAlign%layout.DataUnit != 0 {
		t.Errorf("RegionAlign %% DataUnit: got %d, want 0 (a region starts on a unit)", layout.RegionAlign%layout.DataUnit)
	}
}

func TestKindEntrySize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind layout.Kind
		name string
		size uint32
	}{
		{layout.KindOwnerSlots, "owner_slots", layout.OwnerSlotSize},
		{layout.KindSlotDirectory, "slot_directory", layout.DirEntrySize},
		{layout.KindUpgrades, "upgrades", layout.UpgradeEntrySize},
		{layout.KindUpgradeDirectory, "upgrade_directory", layout.DirEntrySize},
		{layout.KindTxnRecords, "txn_records", layout.TxnRecordSize},
		{layout.KindTxnArena, "txn_arena", layout.ArenaUnit},
		{layout.KindLockMgr, "lockmgr", layout.LockMgrEntrySize},
		{layout.KindUpgradeReaders, "upgrade_readers", layout.ReaderRecordSize},
		{layout.KindClaimRefs, "claim_refs", layout.ClaimRefSize},
		{layout.KindRegionDirectory, "region_directory", layout.RegionEntrySize},
		{layout.KindData, "data", layout.DataUnit},
		{layout.KindLockStats, "lock_stats", layout.LockStatsSize},
	}
	if got, want := len(tests), layout.NumTables; got != want {
		t.Fatalf("kinds under test: got %d, want NumTables = %d", got, want)
	}
	for i, tc := range tests {
		if got, want := tc.kind, layout.Kind(i+1); got != want {
			t.Errorf("kind %s: got value %d, want %d (kinds are 1..NumTables in layout order)", tc.name, got, want)
		}
		if got := tc.kind.EntrySize(); got != tc.size {
			t.Errorf("%s.EntrySize(): got %d, want %d", tc.name, got, tc.size)
		}
		if got := tc.kind.String(); got != tc.name {
			t.Errorf("Kind(%d).String(): got %q, want %q", uint32(tc.kind), got, tc.name)
		}
		if layout.CacheLine%tc.size != 0 && tc.size%layout.CacheLine != 0 {
			t.Errorf("%s entry size %d: got entries straddling cache lines, want a divisor or multiple of %d", tc.name, tc.size, layout.CacheLine)
		}
	}
	for _, k := range []layout.Kind{0, layout.Kind(layout.NumTables + 1), 1 << 31} {
		if got, want := k.String(), "kind("; len(got) < len(want) || got[:len(want)] != want {
			t.Errorf("Kind(%d).String(): got %q, want prefix %q", uint32(k), got, want)
		}
	}
}

func TestHeaderOffsets(t *testing.T) {
	t.Parallel()
	// Every field of the header, with its size. OffMutable marks the start of
	// the mutable line and is not a field of its own.
	fields := []struct {
		name      string
		off, size int
	}{
		{"magic", layout.OffMagic, len(layout.Magic)},
		{"version", layout.OffVersion, 4},
		{"header_size", layout.OffHeaderSize, 4},
		{"total_size", layout.OffTotalSize, 8},
		{"created", layout.OffCreated, 8},
		{"boot_id", layout.OffBootID, 16},
		{"pid_ns", layout.OffPIDNS, 8},
		{"creator", layout.OffCreator, 8},
		{"table_count", layout.OffTableCount, 4},
		{"flags", layout.OffFlags, 4},
		{"reserved", layout.OffReserved, layout.OffTables - layout.OffReserved},
		{"tables", layout.OffTables, layout.TableDescLimit * layout.TableDescSize},
		{"ready", layout.OffReady, 4},
		{"checksum", layout.OffChecksum, 4},
		{"registry", layout.OffRegistry, 8},
		{"owners_boot", layout.OffOwnersBoot, 16},
		{"registry_gen", layout.OffRegistryGen, 8},
	}
	sort.Slice(fields, func(i, j int) bool { return fields[i].off < fields[j].off })
	for i, f := range fields {
		if f.size <= 0 {
			t.Errorf("%s: got size %d, want > 0", f.name, f.size)
		}
		if f.off%min(f.size, 8) != 0 {
			t.Errorf("%s at %#x: got misaligned for a %d-byte field, want aligned", f.name, f.off, f.size)
		}
		if end := f.off + f.size; end > layout.HeaderSize {
			t.Errorf("%s: got end %#x, want <= HeaderSize %#x", f.name, end, layout.HeaderSize)
		}
		if i > 0 {
			prev := fields[i-1]
			if prev.off+prev.size > f.off {
				t.Errorf("%s [%#x, %#x) and %s at %#x: got overlap, want none", prev.name, prev.off, prev.off+prev.size, f.name, f.off)
			}
		}
		if f.off < layout.OffMutable && f.off+f.size > layout.OffMutable {
			t.Errorf("%s [%#x, %#x): got a field straddling OffMutable %#x, want none", f.name, f.off, f.off+f.size, layout.OffMutable)
		}
	}
	if end := layout.OffTables + layout.NumTables*layout.TableDescSize; end > layout.OffMutable {
		t.Errorf("end of the table descriptors: got %#x, want <= OffMutable %#x", end, layout.OffMutable)
	}
	if end := layout.OffTables + layout.TableDescLimit*layout.TableDescSize; end != layout.OffMutable {
		t.Errorf("end of the descriptor area: got %#x, want OffMutable %#x", end, layout.OffMutable)
	}
	if got, want := layout.OffRegistryGen+8, layout.HeaderSize; got > want {
		t.Errorf("OffRegistryGen+8: got %#x, want <= HeaderSize %#x", got, want)
	}
	if got, want := layout.OffMutable%layout.CacheLine, 0; got != want {
		t.Errorf("OffMutable %% CacheLine: got %d, want %d", got, want)
	}
	if got, want := layout.HeaderSize%layout.CacheLine, 0; got != want {
		t.Errorf("HeaderSize %% CacheLine: got %d, want %d", got, want)
	}
	if got, want := len(layout.Magic), 8; got != want {
		t.Errorf("len(Magic): got %d, want %d", got, want)
	}
}

func TestTableMethods(t *testing.T) {
	t.Parallel()
	tb := layout.Table{Kind: layout.KindLockMgr, EntrySize: layout.LockMgrEntrySize, Count: 3, Offset: 0x1000}
	if got, want := tb.Size(), uint64(3*layout.LockMgrEntrySize); got != want {
		t.Errorf("Size: got %d, want %d", got, want)
	}
	if got, want := tb.End(), uint64(0x1000+3*layout.LockMgrEntrySize); got != want {
		t.Errorf("End: got %#x, want %#x", got, want)
	}
	if got, want := tb.EntryOffset(2), uint64(0x1000+2*layout.LockMgrEntrySize); got != want {
		t.Errorf("EntryOffset(2): got %#x, want %#x", got, want)
	}
	h := smallHeader(t)
	for k := layout.Kind(1); int(k) <= layout.NumTables; k++ {
		if got := h.Table(k).Kind; got != k {
			t.Errorf("Header.Table(%v).Kind: got %v, want %v", k, got, k)
		}
	}
}

type fieldOffset struct {
	name      string
	got, want uintptr
}

func checkOffsets(tb testing.TB, typ string, fields []fieldOffset) {
	tb.Helper()
	for _, f := range fields {
		if f.got != f.want {
			tb.Errorf("unsafe.Offsetof(%s.%s): got %d, want %d", typ, f.name, f.got, f.want)
		}
	}
}

func checkSize(tb testing.TB, typ string, got uintptr, want int) {
	tb.Helper()
	if got != uintptr(want) {
		tb.Errorf("unsafe.Sizeof(%s): got %d, want %d", typ, got, want)
	}
}

func TestLockMgrEntryLayout(t *testing.T) {
	t.Parallel()
	var e layout.LockMgrEntry
	checkSize(t, "LockMgrEntry", unsafe.Sizeof(e), layout.LockMgrEntrySize)
	checkOffsets(t, "LockMgrEntry", []fieldOffset{
		{"Lock", unsafe.Offsetof(e.Lock), 0},
		{"Ctl", unsafe.Offsetof(e.Ctl), 8},
		{"Gate", unsafe.Offsetof(e.Gate), 12},
		{"Sleepers", unsafe.Offsetof(e.Sleepers), 16},
		{"Next", unsafe.Offsetof(e.Next), 20},
		{"Version", unsafe.Offsetof(e.Version), 24},
		{"Hash", unsafe.Offsetof(e.Hash), 32},
		{"LastExpired", unsafe.Offsetof(e.LastExpired), 40},
		{"Grants", unsafe.Offsetof(e.Grants), 48},
		{"Releases", unsafe.Offsetof(e.Releases), 56},
		{"HoldNanos", unsafe.Offsetof(e.HoldNanos), 64},
		{"Conflicts", unsafe.Offsetof(e.Conflicts), 72},
		{"Expired", unsafe.Offsetof(e.Expired), 80},
		{"Reclaimed", unsafe.Offsetof(e.Reclaimed), 84},
		{"Name", unsafe.Offsetof(e.Name), 88},
		{"Holders", unsafe.Offsetof(e.Holders), 128},
	})
	var h layout.LockMgrHolder
	checkSize(t, "LockMgrHolder", unsafe.Sizeof(h), 64)
	checkOffsets(t, "LockMgrHolder", []fieldOffset{
		{"Process", unsafe.Offsetof(h.Process), 0},
		{"Companion", unsafe.Offsetof(h.Companion), 8},
		{"Acquired", unsafe.Offsetof(h.Acquired), 16},
		{"Expires", unsafe.Offsetof(h.Expires), 24},
		{"Owner", unsafe.Offsetof(h.Owner), 32},
	})
}

func TestLockStatsLayout(t *testing.T) {
	t.Parallel()
	var s layout.LockStats
	checkSize(t, "LockStats", unsafe.Sizeof(s), layout.LockStatsSize)
	checkOffsets(t, "LockStats", []fieldOffset{
		{"Contended", unsafe.Offsetof(s.Contended), 0},
		{"Sleeps", unsafe.Offsetof(s.Sleeps), 8},
		{"Wakeups", unsafe.Offsetof(s.Wakeups), 16},
		{"WaitNanos", unsafe.Offsetof(s.WaitNanos), 24},
		{"Reclaims", unsafe.Offsetof(s.Reclaims), 32},
		{"Timeouts", unsafe.Offsetof(s.Timeouts), 36},
		{"WaitHist", unsafe.Offsetof(s.WaitHist), 40},
	})
}
