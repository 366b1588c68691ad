package layout_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shmlock/shmlock/layout"
)

const seedDir = "testdata/fuzz/FuzzValidate"

type fuzzSeed struct {
	name     string // file name under seedDir
	data     []byte
	fileSize int64
}

// fuzzSeeds are the named seeds committed under testdata/fuzz/FuzzValidate:
// valid headers and a few typical corruptions. TestFuzzSeedCorpus keeps the
// files in step with this list; -update rewrites them.
func fuzzSeeds(tb testing.TB) []fuzzSeed {
	tb.Helper()
	h := smallHeader(tb)
	small := encode(h)
	total := int64(h.TotalSize)
	sealed := func(f func([]byte) []byte) []byte {
		b := f(bytes.Clone(small))
		reseal(b)
		return b
	}
	defaults, err := layout.Plan(layout.Options{}.WithDefaults())
	if err != nil {
		tb.Fatalf("Plan(defaults): got error %v, want nil", err)
	}
	defaults.Flags = layout.FlagGroupAccess
	garbage := make([]byte, layout.HeaderSize)
	for i := range garbage {
		garbage[i] = byte(i*131 + 7)
	}
	return []fuzzSeed{
		{"valid-small", small, total},
		{"valid-defaults", encode(defaults), int64(defaults.TotalSize)},
		{"truncated", small[:layout.OffTables+3*layout.TableDescSize], total},
		{"garbage", garbage, total},
		{"empty", nil, 0},
		{"size-mismatch", small, total + layout.PageSize},
		{"bad-checksum", flip(layout.OffBootID)(bytes.Clone(small)), total},
		{"version-next", sealed(putU32(layout.OffVersion, layout.Version+1)), total},
		{"version-previous", sealed(putU32(layout.OffVersion, layout.Version-1)), total},
		{"offset-wraps", sealed(putDesc64(layout.KindLockMgr, layout.DescOffset, ^uint64(layout.CacheLine-1))), total},
		{"tables-overlap", sealed(addDesc64(layout.KindSlotDirectory, layout.DescOffset, -layout.CacheLine)), total},
		{"reserved-byte", sealed(func(b []byte) []byte { b[layout.OffReserved] = 1; return b }), total},
	}
}

// FuzzValidate checks that Validate never panics, that every error it
// returns is a *FormatError, and that every header it accepts is one that
// Encode would write. Each input is tried twice: as it is, and with its
// checksum recomputed, so that mutations get past the CRC to the checks
// behind it.
func FuzzValidate(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s.data, s.fileSize)
	}
	f.Fuzz(func(t *testing.T, data []byte, fileSize int64) {
		checkValidate(t, data, fileSize)
		if len(data) >= layout.HeaderSize {
			sealed := bytes.Clone(data)
			reseal(sealed)
			checkValidate(t, sealed, fileSize)
		}
	})
}

func checkValidate(t *testing.T, data []byte, fileSize int64) {
	t.Helper()
	before := bytes.Clone(data)
	h, err := layout.Validate(data, fileSize)
	if !bytes.Equal(data, before) {
		t.Fatalf("Validate: got the input modified, want it untouched")
	}
	if len(data) > layout.HeaderSize {
		// Only the first HeaderSize bytes count.
		h2, err2 := layout.Validate(data[:layout.HeaderSize], fileSize)
		if fmt.Sprint(err2) != fmt.Sprint(err) || fmt.Sprint(h2) != fmt.Sprint(h) {
			t.Fatalf("Validate(data[:HeaderSize]): got (%v, %v), want (%v, %v) as for the whole input", h2, err2, h, err)
		}
	}
	if err != nil {
		checkFormatError(t, err, nil)
		return
	}

	if len(data) < layout.HeaderSize {
		t.Fatalf("Validate(%d bytes): got nil error, want %v", len(data), layout.ErrTruncated)
	}
	re := make([]byte, layout.HeaderSize)
	layout.Encode(h, re)
	if !bytes.Equal(re[:layout.OffMutable], data[:layout.OffMutable]) {
		t.Fatalf("Encode(Validate(data)):\ngot  %x\nwant %x", re[:layout.OffMutable], data[:layout.OffMutable])
	}
	if h.Version != layout.Version {
		t.Errorf("Version: got %d, want %d", h.Version, layout.Version)
	}
	if fileSize < 0 || h.TotalSize != uint64(fileSize) {
		t.Errorf("TotalSize: got %d, want the file size %d", h.TotalSize, fileSize)
	}
	if h.TotalSize%layout.PageSize != 0 || h.TotalSize > layout.MaxTotalSize {
		t.Errorf("TotalSize: got %d, want a multiple of %d up to %d", h.TotalSize, layout.PageSize, uint64(layout.MaxTotalSize))
	}
	prevEnd := uint64(layout.HeaderSize)
	for i, tab := range h.Tables {
		k := layout.Kind(i + 1)
		if tab.Kind != k || tab.EntrySize != k.EntrySize() {
			t.Errorf("Tables[%d]: got kind %v entry size %d, want %v entry size %d", i, tab.Kind, tab.EntrySize, k, k.EntrySize())
		}
		if tab.Offset%layout.CacheLine != 0 {
			t.Errorf("%v offset: got %#x, want cache-line aligned", k, tab.Offset)
		}
		if tab.Offset < prevEnd {
			t.Errorf("%v offset: got %#x, want >= %#x (end of the previous table or header)", k, tab.Offset, prevEnd)
		}
		if tab.Offset > h.TotalSize || tab.Size() > h.TotalSize-tab.Offset {
			t.Errorf("%v: got [%#x, +%d), want inside the %d-byte segment", k, tab.Offset, tab.Size(), h.TotalSize)
		}
		prevEnd = tab.End()
	}
}

// TestFuzzSeedCorpus keeps the committed seed corpus in step with
// fuzzSeeds; run with -update to rewrite it.
func TestFuzzSeedCorpus(t *testing.T) {
	t.Parallel()
	for _, s := range fuzzSeeds(t) {
		path := filepath.Join(seedDir, s.name)
		want := fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\nint64(%d)\n", s.data, s.fileSize)
		if *update {
			if err := os.MkdirAll(seedDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("seed %s: %v (run with -update to write it)", s.name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("seed %s: got a stale file, want it rewritten (run with -update)", s.name)
		}
	}
	// Each seed also gets the outcome it was written for.
	for _, s := range fuzzSeeds(t) {
		_, err := layout.Validate(s.data, s.fileSize)
		if valid := strings.HasPrefix(s.name, "valid-"); valid != (err == nil) {
			t.Errorf("seed %s: got error %v, want valid = %v", s.name, err, valid)
		}
	}
}
