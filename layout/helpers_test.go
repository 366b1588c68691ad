package layout_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/shmlock/shmlock/layout"
)

// smallOpts sizes the header of the golden file and of most validation cases:
// every table present and small.
var smallOpts = layout.Options{Slots: 4, Upgrades: 2, TxnRecords: 1, TxnArenaBytes: 128, LockMgrEntries: 2, UpgradeReaders: 2, ClaimRefs: 16,
	DataBytes: 256, DataRegions: 2}

// smallHeader is the planned header of smallOpts with fixed identity fields,
// the content of testdata/header-v5-small.golden.
func smallHeader(tb testing.TB) layout.Header {
	tb.Helper()
	h, err := layout.Plan(smallOpts)
	if err != nil {
		tb.Fatalf("Plan(%+v): got error %v, want nil", smallOpts, err)
	}
	h.Created = time.Unix(1700000000, 123)
	for i := range h.BootID {
		h.BootID[i] = byte(i + 1)
	}
	h.PIDNamespace = 4026531836
	h.Creator = 0x0000_1234_5600_0042
	h.Flags = 0
	return h
}

// encode returns h encoded into a fresh HeaderSize buffer.
func encode(h layout.Header) []byte {
	b := make([]byte, layout.HeaderSize)
	layout.Encode(h, b)
	return b
}

// desc returns the descriptor of table k in the encoded header b.
func desc(b []byte, k layout.Kind) []byte {
	off := layout.OffTables + (int(k)-1)*layout.TableDescSize
	return b[off : off+layout.TableDescSize]
}

// reseal stores the checksum of b's immutable part, so that a corruption
// made on purpose is caught by its own check rather than by the checksum.
func reseal(b []byte) {
	binary.LittleEndian.PutUint32(b[layout.OffChecksum:], layout.Checksum(b))
}

// sentinels lists every error that a *FormatError may wrap.
var sentinels = []error{
	layout.ErrTruncated, layout.ErrBadMagic, layout.ErrVersion, layout.ErrSizeMismatch,
	layout.ErrMalformed, layout.ErrTableRange, layout.ErrTableOverlap, layout.ErrLimit,
	layout.ErrChecksum, layout.ErrBadName, layout.ErrUnknownTable,
}

// checkFormatError fails tb unless err is a *FormatError that names a field
// and wraps exactly one sentinel, want (if want is not nil).
func checkFormatError(tb testing.TB, err, want error) {
	tb.Helper()
	var fe *layout.FormatError
	if !errors.As(err, &fe) {
		tb.Fatalf("error %v (%T): got no *layout.FormatError in the chain, want one", err, err)
	}
	if fe.Field == "" {
		tb.Errorf("error %v: got empty Field, want the field at fault", err)
	}
	if fe.Detail == "" {
		tb.Errorf("error %v: got empty Detail, want a description", err)
	}
	if want != nil && !errors.Is(err, want) {
		tb.Errorf("error %v: got errors.Is(err, %v) false, want true", err, want)
	}
	n := 0
	for _, s := range sentinels {
		if errors.Is(err, s) {
			n++
		}
	}
	if n != 1 {
		tb.Errorf("error %v: matches %d sentinels, want 1", err, n)
	}
}

// checkSameHeader fails tb unless got and want describe the same segment.
func checkSameHeader(tb testing.TB, got, want layout.Header) {
	tb.Helper()
	if got.Version != want.Version {
		tb.Errorf("Version: got %d, want %d", got.Version, want.Version)
	}
	if got.TotalSize != want.TotalSize {
		tb.Errorf("TotalSize: got %d, want %d", got.TotalSize, want.TotalSize)
	}
	if !got.Created.Equal(want.Created) {
		tb.Errorf("Created: got %v, want %v", got.Created, want.Created)
	}
	if got.BootID != want.BootID {
		tb.Errorf("BootID: got %x, want %x", got.BootID, want.BootID)
	}
	if got.PIDNamespace != want.PIDNamespace {
		tb.Errorf("PIDNamespace: got %d, want %d", got.PIDNamespace, want.PIDNamespace)
	}
	if got.Creator != want.Creator {
		tb.Errorf("Creator: got %#x, want %#x", got.Creator, want.Creator)
	}
	if got.Flags != want.Flags {
		tb.Errorf("Flags: got %#x, want %#x", got.Flags, want.Flags)
	}
	if got.Tables != want.Tables {
		tb.Errorf("Tables:\ngot  %+v\nwant %+v", got.Tables, want.Tables)
	}
}
