package layout

import (
	"encoding/binary"
	"hash/crc32"
	"time"
)

// Format identity and fixed sizes.
const (
	Magic = "SHMLOCK\x00" // the first 8 bytes of every segment
	// Version is bumped on any incompatible change of the format. 2: the
	// txn arena's control area holds package txn's own locks (version 1
	// claimed owner slots for them, out of the user's table). 3: the data
	// area and its region directory, two more tables (and the descriptors
	// moved up to make room for them). 4: the lock_stats table, and a
	// 1024-byte header with room for more descriptors (the mutable line
	// moved from 0x1C0 to 0x3C0). 5: the upgrade mutex's one-CAS unique
	// hold (Writer bit 61, which readers must check; no table moved).
	Version    = 5
	HeaderSize = 1024       // bytes before the first table
	CacheLine  = 64         // every table starts on a multiple of this
	PageSize   = 4096       // the total size is rounded up to this
	ReadyMark  = 0x52454459 // "YDER": the ready word once the header is complete
)

// Header offsets. The immutable part [0, OffMutable) is written once by the
// creator and covered by the checksum; the mutable line at OffMutable holds
// words that processes change while the segment is in use.
const (
	OffMagic       = 0x000 // [8]byte Magic
	OffVersion     = 0x008 // u32
	OffHeaderSize  = 0x00C // u32 HeaderSize
	OffTotalSize   = 0x010 // u64 file size in bytes
	OffCreated     = 0x018 // i64 creation time, Unix nanoseconds
	OffBootID      = 0x020 // [16]byte boot id of the creator's kernel
	OffPIDNS       = 0x030 // u64 inode of the creator's PID namespace
	OffCreator     = 0x038 // u64 packed identity of the creator (internal/proc)
	OffTableCount  = 0x040 // u32 number of table descriptors, always NumTables
	OffFlags       = 0x044 // u32 creation flags (FlagGroupAccess)
	offReserved    = 0x048 // [offReserved, OffTables) reserved, zero
	OffTables      = 0x060 // NumTables descriptors of TableDescSize bytes
	OffMutable     = 0x3C0 // start of the mutable cache line
	OffReady       = 0x3C0 // u32 ReadyMark once the creator finished; 0 before
	OffChecksum    = 0x3C4 // u32 CRC-32C of header bytes [0, OffMutable)
	OffRegistry    = 0x3C8 // u64 packed identity holding the directory lock; 0 if free
	OffOwnersBoot  = 0x3D0 // [16]byte boot id under which the recorded owners live
	OffRegistryGen = 0x3E0 // u64 bumped by every directory change (claim, release, reclaim)
)

// Table descriptor: {kind u32, entry_size u32, count u64, offset u64, reserved u64}.
const (
	TableDescSize  = 32
	descKind       = 0
	descEntrySize  = 4
	descCount      = 8
	descOffset     = 16
	descReserved   = 24
	tableDescLimit = (OffMutable - OffTables) / TableDescSize // descriptors that fit; the rest of the area must be zero
)

// Every table has a descriptor in the header.
var _ [tableDescLimit - NumTables]struct{}

// Header creation flags.
const (
	FlagGroupAccess uint32 = 1 << iota // the file was created 0660 for its group
	knownFlags             = FlagGroupAccess
)

// Header is the decoded, validated header of a segment.
type Header struct {
	Version      uint32
	TotalSize    uint64
	Created      time.Time
	BootID       [16]byte
	PIDNamespace uint64
	Creator      uint64 // packed process identity (see internal/proc)
	Flags        uint32
	Tables       [NumTables]Table // indexed by Kind-1
}

// Table returns the descriptor of one table.
func (h *Header) Table(k Kind) Table { return h.Tables[k-1] }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C of the immutable header bytes.
func Checksum(header []byte) uint32 { return crc32.Checksum(header[:OffMutable], castagnoli) }

// Encode writes h into buf[:HeaderSize], checksum included. It leaves the
// mutable line alone except for the owners' boot id, which starts as the
// creator's: the caller publishes the ready word last. buf must hold at least
// HeaderSize bytes.
func Encode(h Header, buf []byte) {
	le := binary.LittleEndian
	b := buf[:HeaderSize]
	clear(b[:OffMutable])
	copy(b[OffMagic:], Magic)
	le.PutUint32(b[OffVersion:], Version)
	le.PutUint32(b[OffHeaderSize:], HeaderSize)
	le.PutUint64(b[OffTotalSize:], h.TotalSize)
	le.PutUint64(b[OffCreated:], uint64(h.Created.UnixNano()))
	copy(b[OffBootID:], h.BootID[:])
	le.PutUint64(b[OffPIDNS:], h.PIDNamespace)
	le.PutUint64(b[OffCreator:], h.Creator)
	le.PutUint32(b[OffTableCount:], uint32(NumTables))
	le.PutUint32(b[OffFlags:], h.Flags)
	for i, t := range h.Tables {
		d := b[OffTables+i*TableDescSize:]
		le.PutUint32(d[descKind:], uint32(t.Kind))
		le.PutUint32(d[descEntrySize:], t.EntrySize)
		le.PutUint64(d[descCount:], t.Count)
		le.PutUint64(d[descOffset:], t.Offset)
	}
	le.PutUint32(b[OffChecksum:], Checksum(b))
	copy(b[OffOwnersBoot:], h.BootID[:])
}

// IsReady reports whether the header's ready word is set.
func IsReady(header []byte) bool {
	return len(header) >= OffReady+4 && binary.LittleEndian.Uint32(header[OffReady:]) == ReadyMark
}
