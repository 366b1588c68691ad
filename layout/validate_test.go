package layout_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/shmlock/shmlock/layout"
)

var le = binary.LittleEndian

// Corruptions of the small header, one per case. Each case changes one thing
// in a valid header; the checksum is then recomputed unless the case says
// otherwise, so the check under test is the one that fires.
var malformed = []struct {
	name string
	// corrupt changes the valid header b (and may return a shorter slice);
	// it may be nil.
	corrupt func(b []byte) []byte
	// fileSize returns the file size to pass to Validate, given the valid
	// header's TotalSize; nil means TotalSize.
	fileSize func(total int64) int64
	raw      bool // leave the stored checksum as it is
	want     error
}{
	// Sizes of the input.
	{name: "empty", corrupt: func([]byte) []byte { return nil }, want: layout.ErrTruncated},
	{name: "short", corrupt: func(b []byte) []byte { return b[:4] }, want: layout.ErrTruncated},
	{name: "magic only", corrupt: func(b []byte) []byte { return b[:len(layout.Magic)] }, want: layout.ErrTruncated},
	{name: "good magic, one byte short", corrupt: func(b []byte) []byte { return b[:layout.HeaderSize-1] }, want: layout.ErrTruncated},
	{name: "good magic, cut before the tables", corrupt: func(b []byte) []byte { return b[:layout.OffTables] }, want: layout.ErrTruncated},
	{name: "file smaller than the header", fileSize: func(int64) int64 { return layout.HeaderSize - 1 }, want: layout.ErrTruncated},
	{name: "file size zero", fileSize: func(int64) int64 { return 0 }, want: layout.ErrTruncated},
	{name: "file size negative", fileSize: func(int64) int64 { return math.MinInt64 }, want: layout.ErrTruncated},

	// Identity of the format.
	{name: "bad magic", corrupt: func(b []byte) []byte { b[0] = 'X'; return b }, want: layout.ErrBadMagic},
	{name: "magic without its NUL", corrupt: func(b []byte) []byte { b[7] = ' '; return b }, want: layout.ErrBadMagic},
	{name: "short garbage", corrupt: func([]byte) []byte { return []byte("garbage!") }, want: layout.ErrBadMagic},
	{name: "version 0", corrupt: putU32(layout.OffVersion, 0), want: layout.ErrVersion},
	{name: "version 1", corrupt: putU32(layout.OffVersion, 1), want: layout.ErrVersion},
	{name: "version 2 (no data regions)", corrupt: putU32(layout.OffVersion, 2), want: layout.ErrVersion},
	{name: "version 3 (no lock stats)", corrupt: putU32(layout.OffVersion, 3), want: layout.ErrVersion},
	{name: "version 4 (readers blind to the one-CAS unique lock)", corrupt: putU32(layout.OffVersion, 4), want: layout.ErrVersion},
	{name: "next version", corrupt: putU32(layout.OffVersion, layout.Version+1), want: layout.ErrVersion},
	{name: "version big-endian 1", corrupt: putU32(layout.OffVersion, 1<<24), want: layout.ErrVersion},
	{name: "header_size 256", corrupt: putU32(layout.OffHeaderSize, 256), want: layout.ErrMalformed},
	{name: "header_size 0", corrupt: putU32(layout.OffHeaderSize, 0), want: layout.ErrMalformed},

	// Total size.
	{name: "total_size larger than the file", fileSize: func(n int64) int64 { return n - layout.CacheLine }, want: layout.ErrSizeMismatch},
	{name: "total_size smaller than the file", fileSize: func(n int64) int64 { return n + layout.PageSize }, want: layout.ErrSizeMismatch},
	{name: "total_size not a page multiple", corrupt: putU64(layout.OffTotalSize, layout.PageSize+layout.CacheLine),
		fileSize: func(int64) int64 { return layout.PageSize + layout.CacheLine }, want: layout.ErrMalformed},
	{name: "total_size zero", corrupt: putU64(layout.OffTotalSize, 0), want: layout.ErrMalformed},
	{name: "total_size over MaxTotalSize", corrupt: putU64(layout.OffTotalSize, layout.MaxTotalSize+layout.PageSize),
		fileSize: func(int64) int64 { return layout.MaxTotalSize + layout.PageSize }, want: layout.ErrLimit},
	{name: "total_size max uint64", corrupt: putU64(layout.OffTotalSize, math.MaxUint64), fileSize: func(int64) int64 { return math.MaxInt64 }, want: layout.ErrLimit},

	// Fixed fields.
	{name: "table_count 6", corrupt: putU32(layout.OffTableCount, 6), want: layout.ErrMalformed},
	{name: "table_count one too many", corrupt: putU32(layout.OffTableCount, uint32(layout.NumTables+1)), want: layout.ErrMalformed},
	{name: "unknown flag bit", corrupt: putU32(layout.OffFlags, 1<<1), want: layout.ErrMalformed},
	{name: "unknown high flag bit with a known one", corrupt: putU32(layout.OffFlags, layout.FlagGroupAccess|1<<31), want: layout.ErrMalformed},
	{name: "reserved header byte", corrupt: func(b []byte) []byte { b[layout.OffReserved] = 1; return b }, want: layout.ErrMalformed},
	{name: "last reserved header byte", corrupt: func(b []byte) []byte { b[layout.OffTables-1] = 0x80; return b }, want: layout.ErrMalformed},

	// Table descriptors.
	{name: "kinds swapped", corrupt: func(b []byte) []byte {
		le.PutUint32(desc(b, layout.KindOwnerSlots)[layout.DescKind:], uint32(layout.KindSlotDirectory))
		le.PutUint32(desc(b, layout.KindSlotDirectory)[layout.DescKind:], uint32(layout.KindOwnerSlots))
		return b
	}, want: layout.ErrUnknownTable},
	{name: "kind 0", corrupt: putDesc32(layout.KindUpgrades, layout.DescKind, 0), want: layout.ErrUnknownTable},
	{name: "kind beyond NumTables", corrupt: putDesc32(layout.KindLockMgr, layout.DescKind, uint32(layout.NumTables+1)), want: layout.ErrUnknownTable},
	{name: "last byte of the descriptor area (an empty descriptor)", corrupt: func(b []byte) []byte { b[layout.OffMutable-1] = 1; return b }, want: layout.ErrUnknownTable},
	{name: "the lock_stats table's reserved word", corrupt: putDesc64(layout.KindLockStats, layout.DescReserved, 1<<56), want: layout.ErrMalformed},
	{name: "a stats entry too few", corrupt: putDesc64(layout.KindLockStats, layout.DescCount, 8), want: layout.ErrMalformed},
	{name: "a stats entry too many", corrupt: putDesc64(layout.KindLockStats, layout.DescCount, 10), want: layout.ErrMalformed},
	{name: "no stats table", corrupt: putDesc64(layout.KindLockStats, layout.DescCount, 0), want: layout.ErrMalformed},
	{name: "wrong entry size", corrupt: putDesc32(layout.KindOwnerSlots, layout.DescEntrySize, 64), want: layout.ErrMalformed},
	{name: "entry size zero", corrupt: putDesc32(layout.KindTxnArena, layout.DescEntrySize, 0), want: layout.ErrMalformed},
	{name: "slot count over the limit", corrupt: putDesc64(layout.KindOwnerSlots, layout.DescCount, layout.MaxSlots+1), want: layout.ErrLimit},
	{name: "arena count over the limit", corrupt: putDesc64(layout.KindTxnArena, layout.DescCount, layout.MaxTxnArenaBytes/layout.ArenaUnit+1), want: layout.ErrLimit},
	{name: "count max uint64", corrupt: putDesc64(layout.KindLockMgr, layout.DescCount, math.MaxUint64), want: layout.ErrLimit},
	{name: "misaligned offset", corrupt: addDesc64(layout.KindLockMgr, layout.DescOffset, 8), want: layout.ErrTableRange},
	{name: "offset off by one", corrupt: addDesc64(layout.KindSlotDirectory, layout.DescOffset, 1), want: layout.ErrTableRange},
	{name: "table past the end of the file", corrupt: putDesc64(layout.KindLockStats, layout.DescOffset, layout.PageSize-lastTableSize+layout.CacheLine), want: layout.ErrTableRange},
	{name: "region directory count over the limit", corrupt: putDesc64(layout.KindRegionDirectory, layout.DescCount, layout.MaxDataRegions+1), want: layout.ErrLimit},
	{name: "data count over the limit", corrupt: putDesc64(layout.KindData, layout.DescCount, layout.MaxDataBytes/layout.DataUnit+1), want: layout.ErrLimit},
	{name: "region directory entry size", corrupt: putDesc32(layout.KindRegionDirectory, layout.DescEntrySize, 32), want: layout.ErrMalformed},
	{name: "data before the region directory", corrupt: addDesc64(layout.KindData, layout.DescOffset, -layout.CacheLine), want: layout.ErrTableOverlap},
	{name: "empty table starting past the end", corrupt: func(b []byte) []byte {
		d := desc(b, layout.KindLockMgr)
		le.PutUint64(d[layout.DescCount:], 0)
		le.PutUint64(d[layout.DescOffset:], layout.PageSize+layout.CacheLine)
		return b
	}, want: layout.ErrTableRange},
	{name: "offset plus size wraps uint64", corrupt: func(b []byte) []byte {
		// 2^64-64 + 2*256 wraps to 448: a check of End() alone would pass.
		le.PutUint64(desc(b, layout.KindLockMgr)[layout.DescOffset:], math.MaxUint64&^(layout.CacheLine-1))
		return b
	}, want: layout.ErrTableRange},
	{name: "slot directory shorter than the slots", corrupt: putDesc64(layout.KindSlotDirectory, layout.DescCount, 1), want: layout.ErrMalformed},
	{name: "no slot directory", corrupt: putDesc64(layout.KindSlotDirectory, layout.DescCount, 0), want: layout.ErrMalformed},
	{name: "no upgrade directory", corrupt: putDesc64(layout.KindUpgradeDirectory, layout.DescCount, 0), want: layout.ErrMalformed},
	{name: "reader records not a multiple of the upgrades", corrupt: putDesc64(layout.KindUpgradeReaders, layout.DescCount, 3), want: layout.ErrMalformed},
	{name: "reader records without upgrades", corrupt: putDesc64(layout.KindUpgrades, layout.DescCount, 0), want: layout.ErrMalformed},
	{name: "table inside the header", corrupt: putDesc64(layout.KindOwnerSlots, layout.DescOffset, 0), want: layout.ErrTableOverlap},
	{name: "table over the mutable line", corrupt: putDesc64(layout.KindOwnerSlots, layout.DescOffset, layout.OffMutable), want: layout.ErrTableOverlap},
	{name: "two tables overlap", corrupt: addDesc64(layout.KindSlotDirectory, layout.DescOffset, -layout.CacheLine), want: layout.ErrTableOverlap},
	{name: "tables out of order", corrupt: func(b []byte) []byte {
		// Give the upgrades the slot directory's place and the other way
		// round: each fits in the file, but the order is wrong.
		up, dir := desc(b, layout.KindUpgrades), desc(b, layout.KindSlotDirectory)
		upOff, dirOff := le.Uint64(up[layout.DescOffset:]), le.Uint64(dir[layout.DescOffset:])
		le.PutUint64(up[layout.DescOffset:], dirOff)
		le.PutUint64(dir[layout.DescOffset:], upOff)
		return b
	}, want: layout.ErrTableOverlap},
	{name: "reserved descriptor word", corrupt: putDesc64(layout.KindTxnRecords, layout.DescReserved, 1), want: layout.ErrMalformed},

	// Checksum.
	{name: "boot id byte flipped", corrupt: flip(layout.OffBootID + 5), raw: true, want: layout.ErrChecksum},
	{name: "creator byte flipped", corrupt: flip(layout.OffCreator), raw: true, want: layout.ErrChecksum},
	{name: "created byte flipped", corrupt: flip(layout.OffCreated + 7), raw: true, want: layout.ErrChecksum},
	{name: "pid namespace byte flipped", corrupt: flip(layout.OffPIDNS + 3), raw: true, want: layout.ErrChecksum},
	{name: "checksum byte flipped", corrupt: flip(layout.OffChecksum + 2), raw: true, want: layout.ErrChecksum},
	{name: "checksum zero", corrupt: putU32(layout.OffChecksum, 0), raw: true, want: layout.ErrChecksum},
	{name: "valid flag without a new checksum", corrupt: putU32(layout.OffFlags, layout.FlagGroupAccess), raw: true, want: layout.ErrChecksum},
}

func TestValidateMalformed(t *testing.T) {
	t.Parallel()
	for _, tc := range malformed {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := smallHeader(t)
			b := encode(h)
			if tc.corrupt != nil {
				b = tc.corrupt(b)
			}
			if !tc.raw && len(b) >= layout.HeaderSize {
				reseal(b)
			}
			fileSize := int64(h.TotalSize)
			if tc.fileSize != nil {
				fileSize = tc.fileSize(fileSize)
			}
			before := bytes.Clone(b)
			_, err := layout.Validate(b, fileSize)
			if err == nil {
				t.Fatalf("Validate: got nil error, want %v", tc.want)
			}
			checkFormatError(t, err, tc.want)
			if !bytes.Equal(b, before) {
				t.Errorf("Validate: got the input modified, want it untouched")
			}
		})
	}
}

// TestValidateAccepts covers valid headers other than the ones Plan makes.
// lastTableOffset is where smallOpts puts its last table, lock_stats, and
// lastTableSize its size (9 locks); data is just before it.
const (
	lastTableOffset = 0xC40
	lastTableSize   = 9 * layout.LockStatsSize
)

func TestValidateAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		corrupt func(b []byte) []byte
	}{
		{"as planned", nil},
		{"group access flag", putU32(layout.OffFlags, layout.FlagGroupAccess)},
		{"longer input", func(b []byte) []byte { return append(b, make([]byte, layout.PageSize)...) }},
		{"mutable line in use", func(b []byte) []byte {
			le.PutUint32(b[layout.OffReady:], layout.ReadyMark)
			le.PutUint64(b[layout.OffRegistry:], math.MaxUint64)
			le.PutUint64(b[layout.OffRegistryGen:], 99)
			clear(b[layout.OffOwnersBoot : layout.OffOwnersBoot+16])
			return b
		}},
		{"gap between tables", addDesc64(layout.KindLockStats, layout.DescOffset, layout.CacheLine)},
		{"empty table at the next one's offset", func(b []byte) []byte {
			d := desc(b, layout.KindData)
			le.PutUint64(d[layout.DescCount:], 0)
			le.PutUint64(d[layout.DescOffset:], lastTableOffset)
			return b
		}},
		{"table ending at the end of the file", putDesc64(layout.KindLockStats, layout.DescOffset, layout.PageSize-lastTableSize)},
		{"region directory without a data area", putDesc64(layout.KindData, layout.DescCount, 0)},
		{"created before 1970", putU64(layout.OffCreated, 1<<63)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := smallHeader(t)
			b := encode(h)
			if tc.corrupt != nil {
				b = tc.corrupt(b)
				reseal(b)
			}
			got, err := layout.Validate(b, int64(h.TotalSize))
			if err != nil {
				t.Fatalf("Validate: got error %v, want nil", err)
			}
			// Whatever Validate accepts, Encode writes back byte for byte.
			if re := encode(got); !bytes.Equal(re[:layout.OffMutable], b[:layout.OffMutable]) {
				t.Errorf("Encode(Validate(b)):\ngot  %x\nwant %x", re[:layout.OffMutable], b[:layout.OffMutable])
			}
		})
	}
}

func TestFormatError(t *testing.T) {
	t.Parallel()
	_, err := layout.Validate(nil, 0)
	checkFormatError(t, err, layout.ErrTruncated)
	const want = "layout: truncated: header: 0 bytes, need 1024"
	if got := err.Error(); got != want {
		t.Errorf("Error(): got %q, want %q", got, want)
	}
}

func putU32(off int, v uint32) func([]byte) []byte {
	return func(b []byte) []byte { le.PutUint32(b[off:], v); return b }
}

func putU64(off int, v uint64) func([]byte) []byte {
	return func(b []byte) []byte { le.PutUint64(b[off:], v); return b }
}

func putDesc32(k layout.Kind, field int, v uint32) func([]byte) []byte {
	return func(b []byte) []byte { le.PutUint32(desc(b, k)[field:], v); return b }
}

func putDesc64(k layout.Kind, field int, v uint64) func([]byte) []byte {
	return func(b []byte) []byte { le.PutUint64(desc(b, k)[field:], v); return b }
}

func addDesc64(k layout.Kind, field int, delta int64) func([]byte) []byte {
	return func(b []byte) []byte {
		d := desc(b, k)[field:]
		le.PutUint64(d, le.Uint64(d)+uint64(delta))
		return b
	}
}

func flip(off int) func([]byte) []byte {
	return func(b []byte) []byte { b[off] ^= 0xff; return b }
}
