package layout_test

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/shmlock/shmlock/layout"
)

// regionDir returns a directory of n entries with the given regions
// claimed in entries 0, 1, ...
func regionDir(tb testing.TB, n int, regions ...layout.RegionDesc) []byte {
	tb.Helper()
	dir := make([]byte, n*layout.RegionEntrySize)
	for i, r := range regions {
		if err := layout.PutRegion(dir, i, r.Name, r.Offset, r.Size); err != nil {
			tb.Fatalf("PutRegion(%d, %+v): got error %v, want nil", i, r, err)
		}
	}
	return dir
}

// entryAt returns the bytes of entry i of dir.
func entryAt(dir []byte, i int) []byte {
	return dir[i*layout.RegionEntrySize : (i+1)*layout.RegionEntrySize]
}

func TestDecodeRegionsSound(t *testing.T) {
	t.Parallel()
	const area = 1024
	tests := []struct {
		name      string
		dir       []byte
		want      []layout.RegionDesc
		free      int
		end       uint64
		abandoned bool // a free entry with words set: in Abandoned, no problem
	}{
		{"empty table", nil, nil, -1, 0, false},
		{"nothing claimed", regionDir(t, 3), nil, 0, 0, false},
		{"two claimed, one free", regionDir(t, 3,
			layout.RegionDesc{Name: "queue", Offset: 0, Size: 100},
			layout.RegionDesc{Name: "stats", Offset: 128, Size: 64}),
			[]layout.RegionDesc{{Index: 0, Name: "queue", Offset: 0, Size: 100}, {Index: 1, Name: "stats", Offset: 128, Size: 64}}, 2, 192, false},
		{"full table", regionDir(t, 1, layout.RegionDesc{Name: "all", Offset: 0, Size: area}),
			[]layout.RegionDesc{{Index: 0, Name: "all", Offset: 0, Size: area}}, -1, area, false},
		{"out of claim order, no overlap", regionDir(t, 2,
			layout.RegionDesc{Name: "late", Offset: 512, Size: 1},
			layout.RegionDesc{Name: "early", Offset: 0, Size: 512}),
			[]layout.RegionDesc{{Index: 0, Name: "late", Offset: 512, Size: 1}, {Index: 1, Name: "early", Offset: 0, Size: 512}}, -1, 576, false},
		{"longest name", regionDir(t, 1, layout.RegionDesc{Name: strings.Repeat("n", layout.MaxNameLen), Offset: 64, Size: 8}),
			[]layout.RegionDesc{{Index: 0, Name: strings.Repeat("n", layout.MaxNameLen), Offset: 64, Size: 8}}, -1, 128, false},
		{"a dead claimant's free entry", func() []byte {
			dir := regionDir(t, 2, layout.RegionDesc{Name: "a", Offset: 0, Size: 1})
			copy(entryAt(dir, 1)[24:], "half") // the name written, State not
			return dir
		}(), []layout.RegionDesc{{Index: 0, Name: "a", Offset: 0, Size: 1}}, 1, 64, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := layout.DecodeRegions(tc.dir, area)
			if !got.Sound {
				t.Errorf("Sound: got false, want true (problems %v)", got.Problems)
			}
			if len(got.Regions) != len(tc.want) {
				t.Fatalf("Regions: got %+v, want %+v", got.Regions, tc.want)
			}
			for i := range tc.want {
				if got.Regions[i] != tc.want[i] {
					t.Errorf("Regions[%d]: got %+v, want %+v", i, got.Regions[i], tc.want[i])
				}
			}
			if got.Free != tc.free {
				t.Errorf("Free: got %d, want %d", got.Free, tc.free)
			}
			if got.End != tc.end {
				t.Errorf("End: got %d, want %d", got.End, tc.end)
			}
			if len(got.Problems) > 0 {
				t.Errorf("Problems: got %v, want none", got.Problems)
			}
			if (len(got.Abandoned) > 0) != tc.abandoned {
				t.Errorf("Abandoned: got %v, want some = %v", got.Abandoned, tc.abandoned)
			}
		})
	}
}

// Each case damages one entry of a sound directory of three claimed
// regions and one free entry; the problem names that entry.
func TestDecodeRegionsDamage(t *testing.T) {
	t.Parallel()
	const area = 1024
	sound := func() []byte {
		return regionDir(t, 4,
			layout.RegionDesc{Name: "a", Offset: 0, Size: 64},
			layout.RegionDesc{Name: "b", Offset: 64, Size: 100},
			layout.RegionDesc{Name: "c", Offset: 192, Size: 8})
	}
	u32 := func(i, off int, v uint32) func([]byte) {
		return func(d []byte) { binary.LittleEndian.PutUint32(entryAt(d, i)[off:], v) }
	}
	u64 := func(i, off int, v uint64) func([]byte) {
		return func(d []byte) { binary.LittleEndian.PutUint64(entryAt(d, i)[off:], v) }
	}
	tests := []struct {
		name    string
		damage  func([]byte)
		entry   int
		want    error
		regions int  // sound regions left
		sound   bool // the table may still grow
	}{
		{"unknown state", u32(1, 0, 2), 1, layout.ErrMalformed, 2, false},
		{"state all ones", u32(3, 0, ^uint32(0)), 3, layout.ErrMalformed, 3, false},
		{"name length 0", u32(0, 4, 0), 0, layout.ErrBadName, 2, false},
		{"name length 41", u32(0, 4, layout.MaxNameLen+1), 0, layout.ErrBadName, 2, false},
		{"control character in the name", func(d []byte) { entryAt(d, 2)[24] = '\n' }, 2, layout.ErrBadName, 2, false},
		{"invalid UTF-8 name", func(d []byte) { entryAt(d, 2)[24] = 0xff }, 2, layout.ErrBadName, 2, false},
		{"byte after the name", func(d []byte) { entryAt(d, 1)[24+5] = 'x' }, 1, layout.ErrMalformed, 2, false},
		{"size 0", u64(2, 16, 0), 2, layout.ErrMalformed, 2, false},
		{"misaligned offset", u64(2, 8, 200), 2, layout.ErrTableRange, 2, false},
		{"past the area", u64(2, 8, area), 2, layout.ErrTableRange, 2, false},
		{"size past the area", u64(2, 16, area-192+1), 2, layout.ErrTableRange, 2, false},
		{"size wraps", u64(2, 16, ^uint64(0)), 2, layout.ErrTableRange, 2, false},
		{"offset wraps", u64(2, 8, ^uint64(layout.RegionAlign-1)), 2, layout.ErrTableRange, 2, false},
		{"overlaps the next", u64(1, 16, 129), 2, layout.ErrTableOverlap, 2, false},
		{"same offset", u64(2, 8, 64), 2, layout.ErrTableOverlap, 2, false},
		{"name claimed twice", func(d []byte) { entryAt(d, 2)[24] = 'a' }, 2, layout.ErrMalformed, 2, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := sound()
			tc.damage(dir)
			before := bytes.Clone(dir)
			got := layout.DecodeRegions(dir, area)
			if !bytes.Equal(dir, before) {
				t.Fatalf("DecodeRegions: got the input modified, want it untouched")
			}
			if len(got.Problems) != 1 {
				t.Fatalf("Problems: got %v, want one", got.Problems)
			}
			checkFormatError(t, got.Problems[0], tc.want)
			if field, want := got.Problems[0].(*layout.FormatError).Field, "region_directory["; !strings.HasPrefix(field, want) ||
				!strings.HasSuffix(field, "["+string(rune('0'+tc.entry))+"]") {
				t.Errorf("Field: got %q, want region_directory[%d]", field, tc.entry)
			}
			if len(got.Regions) != tc.regions {
				t.Errorf("Regions: got %+v, want %d of them", got.Regions, tc.regions)
			}
			if got.Sound != tc.sound {
				t.Errorf("Sound: got %v, want %v", got.Sound, tc.sound)
			}
		})
	}
}

func TestDecodeRegionsTableProblems(t *testing.T) {
	t.Parallel()
	dir := regionDir(t, 2, layout.RegionDesc{Name: "a", Offset: 0, Size: 8})
	got := layout.DecodeRegions(dir[:layout.RegionEntrySize+10], 64)
	if len(got.Problems) != 1 || len(got.Regions) != 1 {
		t.Fatalf("a partial entry: got problems %v and regions %+v, want one of each", got.Problems, got.Regions)
	}
	checkFormatError(t, got.Problems[0], layout.ErrTruncated)

	got = layout.DecodeRegions(dir, layout.MaxDataBytes+1)
	if got.Sound || len(got.Problems) != 1 {
		t.Fatalf("an area over MaxDataBytes: got sound %v, problems %v; want unsound, one problem", got.Sound, got.Problems)
	}
	checkFormatError(t, got.Problems[0], layout.ErrLimit)
}

func TestPutRegion(t *testing.T) {
	t.Parallel()
	dir := make([]byte, 2*layout.RegionEntrySize)
	if err := layout.PutRegion(dir, 2, "x", 0, 1); err == nil {
		t.Errorf("PutRegion past the table: got nil, want an error")
	} else {
		checkFormatError(t, err, layout.ErrTableRange)
	}
	if err := layout.PutRegion(dir, -1, "x", 0, 1); err == nil {
		t.Errorf("PutRegion(-1): got nil, want an error")
	}
	if err := layout.PutRegion(dir, 0, strings.Repeat("x", layout.MaxNameLen+1), 0, 1); err == nil {
		t.Errorf("PutRegion with a long name: got nil, want an error")
	} else {
		checkFormatError(t, err, layout.ErrBadName)
	}
	if !allZero(dir) {
		t.Errorf("failed PutRegion calls: got the directory changed, want it untouched")
	}
	if err := layout.PutRegion(dir, 1, "jobs/queue", 0x40, 4096); err != nil {
		t.Fatal(err)
	}
	// The words as docs/FORMAT.md lays them out.
	e := entryAt(dir, 1)
	if got := le.Uint32(e[0:]); got != layout.RegionClaimed {
		t.Errorf("State: got %d, want %d", got, layout.RegionClaimed)
	}
	if got := le.Uint32(e[4:]); got != 10 {
		t.Errorf("NameLen: got %d, want 10", got)
	}
	if got := le.Uint64(e[8:]); got != 0x40 {
		t.Errorf("Offset: got %#x, want 0x40", got)
	}
	if got := le.Uint64(e[16:]); got != 4096 {
		t.Errorf("Size: got %d, want 4096", got)
	}
	if got := string(bytes.TrimRight(e[24:], "\x00")); got != "jobs/queue" {
		t.Errorf("Name: got %q, want %q", got, "jobs/queue")
	}
}

// A RegionEntry written through its atomics encodes to the bytes PutRegion
// writes: the struct, the encoder and the decoder agree.
func TestRegionEntryAppendEntry(t *testing.T) {
	t.Parallel()
	var e layout.RegionEntry
	name := "größe/7"
	for i, w := range layout.NameWords(name) {
		e.Name[i].Store(w)
	}
	e.NameLen.Store(uint32(len(name)))
	e.Offset.Store(128)
	e.Size.Store(9)
	e.State.Store(layout.RegionClaimed)
	got := e.AppendEntry(nil)
	want := regionDir(t, 1, layout.RegionDesc{Name: name, Offset: 128, Size: 9})
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendEntry:\ngot  %x\nwant %x", got, want)
	}
	tab := layout.DecodeRegions(got, 256)
	r, ok := tab.Find(name)
	if !ok || r.Offset != 128 || r.Size != 9 || r.End() != 192 {
		t.Errorf("Find(%q): got %+v, %v; want offset 128, size 9, end 192", name, r, ok)
	}
	if _, ok := tab.Find("other"); ok {
		t.Errorf("Find(other): got a region, want none")
	}
	if w := layout.NameWords(strings.Repeat("z", layout.MaxNameLen)); w[len(w)-1] != 0x7a7a7a7a7a7a7a7a {
		t.Errorf("NameWords of a full name: last word %#x, want the name's last eight bytes", w[len(w)-1])
	}
}

// A free entry with words set (a claimant died before publishing it) is
// listed in Abandoned, and is no problem: the table stays sound.
func TestDecodeRegionsAbandoned(t *testing.T) {
	t.Parallel()
	const area = 1024
	for name, damage := range map[string]func(d []byte){
		"a size":      func(d []byte) { binary.LittleEndian.PutUint64(entryAt(d, 3)[16:], 64) },
		"a name byte": func(d []byte) { entryAt(d, 3)[63] = 1 },
	} {
		dir := regionDir(t, 4, layout.RegionDesc{Name: "a", Offset: 0, Size: 1})
		damage(dir)
		got := layout.DecodeRegions(dir, area)
		if len(got.Problems) != 0 || !got.Sound || !slices.Equal(got.Abandoned, []int{3}) {
			t.Errorf("%s: got problems %v, sound %v, abandoned %v; want none, true, [3]", name, got.Problems, got.Sound, got.Abandoned)
		}
	}
}
