package layout

import (
	"fmt"
	"time"
)

// Kind names one table of a segment.
type Kind uint32

// The tables of a segment, in the order they are laid out.
const (
	KindOwnerSlots       Kind = 1 + iota // owner slots, one per spinlock
	KindSlotDirectory                    // claim state and name of each owner slot
	KindUpgrades                         // upgrade-mutex state words
	KindUpgradeDirectory                 // claim state and name of each upgrade mutex
	KindTxnRecords                       // transaction records (package txn)
	KindTxnArena                         // arena space for transactions (package txn)
	KindLockMgr                          // named-resource table (package lockmgr)
	KindUpgradeReaders                   // per-process reader records of each upgrade mutex
	KindClaimRefs                        // per-process references to claimed slots and mutexes
	KindRegionDirectory                  // name, offset and size of each data region
	KindData                             // the data area the regions are cut from, in DataUnit units
	KindLockStats                        // contention counters, one entry per lock (LockStats)
	NumTables            = int(KindLockStats)
)

var kindNames = [NumTables]string{"owner_slots", "slot_directory", "upgrades",
	"upgrade_directory", "txn_records", "txn_arena", "lockmgr", "upgrade_readers", "claim_refs",
	"region_directory", "data", "lock_stats"}

func (k Kind) String() string {
	if k >= 1 && int(k) <= NumTables {
		return kindNames[k-1]
	}
	return fmt.Sprintf("kind(%d)", uint32(k))
}

// Entry sizes, fixed by this format version.
var entrySizes = [NumTables]uint32{
	OwnerSlotSize, DirEntrySize, UpgradeEntrySize, DirEntrySize,
	TxnRecordSize, ArenaUnit, LockMgrEntrySize, ReaderRecordSize, ClaimRefSize,
	RegionEntrySize, DataUnit, LockStatsSize,
}

// EntrySize is the size in bytes of one entry of a table of kind k.
func (k Kind) EntrySize() uint32 { return entrySizes[k-1] }

// Limits on what a segment may hold. They keep every size computation far
// from overflow and every table addressable with a uint32 index.
const (
	MaxSlots          = 1 << 20
	MaxUpgrades       = 1 << 20
	MaxTxnRecords     = 1 << 20
	MaxTxnArenaBytes  = 1 << 36
	MaxLockMgrEntries = 1 << 20
	MaxUpgradeReaders = 1 << 12                                                    // reader records per upgrade mutex
	MaxReaderRecords  = 1 << 24                                                    // reader records in all
	MaxClaimRefs      = 1 << 22                                                    // claim references in all
	MaxDataRegions    = 1 << 16                                                    // entries of the region directory
	MaxDataBytes      = 1 << 36                                                    // bytes of the data area
	MaxLockStats      = MaxSlots + MaxUpgrades + MaxLockMgrEntries + MaxTxnRecords // one per lock
	MaxTotalSize      = 1 << 40
)

var maxCounts = [NumTables]uint64{
	MaxSlots, MaxSlots, MaxUpgrades, MaxUpgrades,
	MaxTxnRecords, MaxTxnArenaBytes / ArenaUnit, MaxLockMgrEntries, MaxReaderRecords, MaxClaimRefs,
	MaxDataRegions, MaxDataBytes / DataUnit, MaxLockStats,
}

// ReadersPerUpgrade is the number of reader records of each upgrade mutex
// (Options.UpgradeReaders); 0 when the segment has no upgrade mutexes.
func (h *Header) ReadersPerUpgrade() int {
	n := h.Table(KindUpgrades).Count
	if n == 0 {
		return 0
	}
	return int(h.Table(KindUpgradeReaders).Count / n)
}

// Table describes where one table lies in the segment.
type Table struct {
	Kind      Kind
	EntrySize uint32
	Count     uint64 // number of entries
	Offset    uint64 // from the start of the segment, a multiple of CacheLine
}

// Size is the table's length in bytes.
func (t Table) Size() uint64 { return t.Count * uint64(t.EntrySize) }

// End is the offset just past the table.
func (t Table) End() uint64 { return t.Offset + t.Size() }

// EntryOffset is the offset of entry i; i must be below Count.
func (t Table) EntryOffset(i uint64) uint64 { return t.Offset + i*uint64(t.EntrySize) }

// Options size the tables of a new segment.
type Options struct {
	// For shm.Create and WithDefaults, zero means the default and a negative
	// value means none; Plan takes the numbers as they are.
	Slots          int   // owner slots (spinlocks)
	Upgrades       int   // upgrade mutexes
	TxnRecords     int   // transaction records
	TxnArenaBytes  int64 // arena bytes, rounded up to ArenaUnit
	LockMgrEntries int   // named resources
	// UpgradeReaders is the number of reader records of each upgrade
	// mutex: how many processes (handles, in package upgrade) may hold or
	// wait for its shared lock at once. The table has Upgrades times as
	// many records.
	UpgradeReaders int
	// ClaimRefs is the number of claim references: one per process and
	// claimed entry it names (package shm records who holds each reference,
	// so that a dead process's references can be dropped). Zero means
	// twice the owner slots and upgrade mutexes together, and at least 16.
	ClaimRefs int
	// DataBytes is the size of the data area, the memory of the named data
	// regions (shm.Segment.Data), rounded up to DataUnit. Regions are cut
	// from it when first claimed and never given back, so it bounds the
	// regions' sizes added up (each rounded up to RegionAlign).
	DataBytes int64
	// DataRegions is the number of entries of the region directory: how
	// many regions the segment can hold. Zero means DefaultDataRegions if
	// the segment has a data area, else none.
	DataRegions int
}

// Defaults for Options fields left at zero by shm.Create and shmctl create.
const (
	DefaultSlots          = 64
	DefaultUpgrades       = 16
	DefaultTxnRecords     = 16
	DefaultTxnArenaBytes  = 256 << 10
	DefaultLockMgrEntries = 64
	DefaultUpgradeReaders = 32
	DefaultDataBytes      = 64 << 10
	DefaultDataRegions    = 32
	minDefaultClaimRefs   = 16
)

// Plan lays out a segment for opts: every table cache-line aligned, one
// after the other, the total rounded up to PageSize. Negative or excessive
// sizes return an ErrLimit error. The caller fills in the identity fields
// (Created, BootID, PIDNamespace, Creator, Flags) before Encode.
func Plan(opts Options) (Header, error) {
	if opts.UpgradeReaders < 0 || opts.UpgradeReaders > MaxUpgradeReaders {
		return Header{}, formatErr(ErrLimit, "upgrade_readers", "%d per mutex outside [0, %d]", opts.UpgradeReaders, MaxUpgradeReaders)
	}
	readers := int64(opts.UpgradeReaders)
	if opts.Upgrades > 0 && opts.Upgrades <= MaxUpgrades {
		readers *= int64(opts.Upgrades) // both bounded: no overflow
	} else {
		readers = 0 // no mutexes (or too many, rejected below): no records
	}
	counts := [NumTables]int64{
		int64(opts.Slots), int64(opts.Slots), int64(opts.Upgrades), int64(opts.Upgrades),
		int64(opts.TxnRecords), ceilDiv(opts.TxnArenaBytes, ArenaUnit), int64(opts.LockMgrEntries),
		readers, int64(opts.ClaimRefs),
		int64(opts.DataRegions), ceilDiv(opts.DataBytes, DataUnit), 0,
	}
	for _, k := range statsKinds {
		if n := counts[k-1]; n > 0 && uint64(n) <= maxCounts[k-1] {
			counts[KindLockStats-1] += n // each bounded: no overflow
		}
	}
	h := Header{Version: Version}
	off := uint64(HeaderSize)
	for i, n := range counts {
		k := Kind(i + 1)
		if n < 0 || uint64(n) > maxCounts[i] {
			// The two sized in bytes say so in bytes, not in the table's
			// units (64-byte data units were reported as a count).
			switch k {
			case KindData:
				return Header{}, formatErr(ErrLimit, k.String(), "%d bytes outside [0, %d]", opts.DataBytes, uint64(MaxDataBytes))
			case KindTxnArena:
				return Header{}, formatErr(ErrLimit, k.String(), "%d bytes outside [0, %d]", opts.TxnArenaBytes, uint64(MaxTxnArenaBytes))
			}
			return Header{}, formatErr(ErrLimit, k.String(), "count %d outside [0, %d]", n, maxCounts[i])
		}
		t := Table{Kind: k, EntrySize: k.EntrySize(), Count: uint64(n), Offset: off}
		h.Tables[i] = t
		off = alignUp(t.End(), CacheLine)
	}
	h.TotalSize = alignUp(off, PageSize)
	if h.TotalSize > MaxTotalSize {
		return Header{}, formatErr(ErrLimit, "total_size", "%d bytes over %d", h.TotalSize, uint64(MaxTotalSize))
	}
	h.Created = time.Unix(0, 0)
	return h, nil
}

// WithDefaults returns opts with every zero field set to its default and
// every negative field set to zero (no such table).
func (opts Options) WithDefaults() Options {
	if opts.Slots == 0 {
		opts.Slots = DefaultSlots
	}
	if opts.Upgrades == 0 {
		opts.Upgrades = DefaultUpgrades
	}
	if opts.TxnRecords == 0 {
		opts.TxnRecords = DefaultTxnRecords
	}
	if opts.TxnArenaBytes == 0 {
		opts.TxnArenaBytes = DefaultTxnArenaBytes
	}
	if opts.LockMgrEntries == 0 {
		opts.LockMgrEntries = DefaultLockMgrEntries
	}
	if opts.UpgradeReaders == 0 {
		opts.UpgradeReaders = DefaultUpgradeReaders
	}
	if opts.ClaimRefs == 0 {
		opts.ClaimRefs = max(2*(max(opts.Slots, 0)+max(opts.Upgrades, 0)), minDefaultClaimRefs)
	}
	if opts.DataBytes == 0 {
		opts.DataBytes = DefaultDataBytes
	}
	if opts.DataRegions == 0 && opts.DataBytes > 0 {
		opts.DataRegions = DefaultDataRegions // a directory without an area would be of no use
	}
	opts.Slots = max(opts.Slots, 0)
	opts.Upgrades = max(opts.Upgrades, 0)
	opts.TxnRecords = max(opts.TxnRecords, 0)
	opts.TxnArenaBytes = max(opts.TxnArenaBytes, 0)
	opts.LockMgrEntries = max(opts.LockMgrEntries, 0)
	opts.UpgradeReaders = max(opts.UpgradeReaders, 0)
	opts.ClaimRefs = max(opts.ClaimRefs, 0)
	opts.DataBytes = max(opts.DataBytes, 0)
	opts.DataRegions = max(opts.DataRegions, 0)
	return opts
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) &^ (a - 1) }

// ceilDiv is n/d rounded up for n >= 0 and n itself for n < 0 (so a negative
// size stays negative and is rejected). It does not compute n+d-1, which
// would overflow for n near math.MaxInt64.
func ceilDiv(n, d int64) int64 {
	if n <= 0 {
		return n
	}
	q := n / d
	if n%d != 0 {
		q++
	}
	return q
}
