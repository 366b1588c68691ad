package layout_test

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/shmlock/shmlock/layout"
)

const regionSeedDir = "testdata/fuzz/FuzzDecodeRegions"

type regionSeed struct {
	name      string // file name under regionSeedDir
	dir       []byte
	dataBytes uint64
}

// regionSeeds are the named seeds committed under
// testdata/fuzz/FuzzDecodeRegions: sound directories and the damage a
// checker must report. TestFuzzRegionSeedCorpus keeps the files in step
// with this list; -update rewrites them.
func regionSeeds(tb testing.TB) []regionSeed {
	tb.Helper()
	three := regionDir(tb, 4,
		layout.RegionDesc{Name: "queue", Offset: 0, Size: 100},
		layout.RegionDesc{Name: "stats", Offset: 128, Size: 64},
		layout.RegionDesc{Name: "größe", Offset: 192, Size: 1})
	edit := func(f func([]byte)) []byte {
		d := bytes.Clone(three)
		f(d)
		return d
	}
	garbage := make([]byte, 3*layout.RegionEntrySize)
	for i := range garbage {
		garbage[i] = byte(i*37 + 11)
	}
	return []regionSeed{
		{"sound-empty", regionDir(tb, 2), 4096},
		{"sound-three", three, 4096},
		{"sound-full", regionDir(tb, 1, layout.RegionDesc{Name: "all", Size: 4096}), 4096},
		{"sound-torn-free-entry", edit(func(d []byte) { copy(entryAt(d, 3)[24:], "half") }), 4096},
		{"overlap", edit(func(d []byte) { le.PutUint64(entryAt(d, 1)[16:], 129) }), 4096},
		{"same-name", edit(func(d []byte) { copy(entryAt(d, 1)[24:], "queue") }), 4096},
		{"bad-state", edit(func(d []byte) { le.PutUint32(entryAt(d, 2)[0:], 7) }), 4096},
		{"outside-area", three, 192},
		{"offset-wraps", edit(func(d []byte) { le.PutUint64(entryAt(d, 2)[8:], ^uint64(63)) }), 4096},
		{"partial-entry", three[:layout.RegionEntrySize+17], 4096},
		{"garbage", garbage, 1 << 20},
		{"area-over-limit", three, ^uint64(0)},
	}
}

// FuzzDecodeRegions checks that DecodeRegions never panics or changes its
// input, that every problem is a *FormatError, and that every region it
// accepts is one a claimant could have placed: named, aligned, inside the
// area and apart from the others. What it accepts, written back into an
// empty directory, decodes to the same regions with no problem.
func FuzzDecodeRegions(f *testing.F) {
	for _, s := range regionSeeds(f) {
		f.Add(s.dir, s.dataBytes)
	}
	f.Fuzz(func(t *testing.T, dir []byte, dataBytes uint64) {
		before := bytes.Clone(dir)
		tab := layout.DecodeRegions(dir, dataBytes)
		if !bytes.Equal(dir, before) {
			t.Fatalf("DecodeRegions: got the input modified, want it untouched")
		}
		for _, p := range tab.Problems {
			checkFormatError(t, p, nil)
		}
		checkRegionTable(t, dir, min(dataBytes, layout.MaxDataBytes), tab)

		again := make([]byte, len(dir)/layout.RegionEntrySize*layout.RegionEntrySize)
		for _, r := range tab.Regions {
			if err := layout.PutRegion(again, r.Index, r.Name, r.Offset, r.Size); err != nil {
				t.Fatalf("PutRegion(%+v): got error %v, want nil", r, err)
			}
		}
		re := layout.DecodeRegions(again, min(dataBytes, layout.MaxDataBytes))
		if len(re.Problems) > 0 || !re.Sound {
			t.Fatalf("the accepted regions written back: got problems %v (sound %v), want none", re.Problems, re.Sound)
		}
		if !slices.Equal(re.Regions, tab.Regions) || re.End != tab.End {
			t.Fatalf("the accepted regions written back: got %+v end %d, want %+v end %d", re.Regions, re.End, tab.Regions, tab.End)
		}
	})
}

// checkRegionTable checks what DecodeRegions returned for dir.
func checkRegionTable(t *testing.T, dir []byte, area uint64, tab layout.RegionTable) {
	t.Helper()
	n := len(dir) / layout.RegionEntrySize
	state := func(i int) uint32 { return binary.LittleEndian.Uint32(dir[i*layout.RegionEntrySize:]) }
	wantFree := -1
	claimed := 0
	for i := range n {
		switch state(i) {
		case layout.RegionFree:
			if wantFree < 0 {
				wantFree = i
			}
		case layout.RegionClaimed:
			claimed++
		}
	}
	if tab.Free != wantFree {
		t.Errorf("Free: got %d, want %d (the first entry in state 0)", tab.Free, wantFree)
	}
	names := map[string]bool{}
	var end uint64
	for _, r := range tab.Regions {
		if r.Index < 0 || r.Index >= n || state(r.Index) != layout.RegionClaimed {
			t.Errorf("region %+v: got an entry that is not claimed, want a claimed one", r)
		}
		if err := layout.CheckName(r.Name); err != nil {
			t.Errorf("region %+v: got name error %v, want a valid name", r, err)
		}
		if names[r.Name] {
			t.Errorf("region %+v: got its name twice, want every name once", r)
		}
		names[r.Name] = true
		if r.Size == 0 || r.Offset%layout.RegionAlign != 0 || r.Offset > area || r.Size > area-r.Offset {
			t.Errorf("region %+v: got it misplaced, want size > 0, aligned, inside %d bytes", r, area)
		}
		end = max(end, r.End())
	}
	byOffset := slices.SortedFunc(slices.Values(tab.Regions), func(a, b layout.RegionDesc) int { return cmp.Compare(a.Offset, b.Offset) })
	for i := 1; i < len(byOffset); i++ {
		if a, b := byOffset[i-1], byOffset[i]; a.Offset+a.Size > b.Offset {
			t.Errorf("regions %+v and %+v: got an overlap, want none", a, b)
		}
	}
	if tab.End != end || tab.End%layout.RegionAlign != 0 {
		t.Errorf("End: got %d, want %d, the aligned end of the last region", tab.End, end)
	}
	if tab.Sound && claimed != len(tab.Regions) {
		t.Errorf("Sound with %d claimed entries but %d regions: want every claimed entry a region", claimed, len(tab.Regions))
	}
	if len(tab.Regions) > claimed {
		t.Errorf("Regions: got %d of %d claimed entries, want no more", len(tab.Regions), claimed)
	}
}

// TestFuzzRegionSeedCorpus keeps the committed seed corpus in step with
// regionSeeds; run with -update to rewrite it. Each seed also decodes as
// its name says.
func TestFuzzRegionSeedCorpus(t *testing.T) {
	t.Parallel()
	for _, s := range regionSeeds(t) {
		path := filepath.Join(regionSeedDir, s.name)
		want := fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\nuint64(%d)\n", s.dir, s.dataBytes)
		if *update {
			if err := os.MkdirAll(regionSeedDir, 0o755); err != nil {
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
		tab := layout.DecodeRegions(s.dir, s.dataBytes)
		if sound := len(s.name) > 6 && s.name[:6] == "sound-"; sound != (len(tab.Problems) == 0) {
			t.Errorf("seed %s: got problems %v, want none = %v", s.name, tab.Problems, sound)
		}
	}
}
