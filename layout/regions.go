package layout

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"
)

// Data regions: the data area (table KindData) holds the data the locks
// protect, cut into named regions that the region directory (table
// KindRegionDirectory) records, one entry each. Package shm claims and
// finds them (Segment.Data).
//
// A region is claimed once and kept for the life of the segment: it is
// never freed, moved or resized, so a process that found it uses its
// memory without asking anyone again, and nothing about it can change
// under that process. Regions are laid out in the order they are claimed,
// each at the first RegionAlign boundary past every region before it.
//
// The directory changes only under the segment's registry lock (the header
// word at OffRegistry, as for the claim directories), and an entry changes
// only once: from RegionFree, every word zero, to RegionClaimed. The
// claimant writes the name, offset and size first and stores State last,
// so a reader that loads State == RegionClaimed first sees the whole entry
// and needs no lock. A claimant that dies before that store leaves a free
// entry with some words set; the next claimant zeroes it and takes it.
const (
	RegionFree    uint32 = 0 // unclaimed: the other words are zero (or a dead claimant's, not yet zeroed)
	RegionClaimed uint32 = 1 // name, offset and size are written and final
)

// RegionAlign is the alignment of every region's offset in the data area:
// regions never share a cache line, so one region's words do not slow
// down another's users by false sharing, and any word of a region is
// aligned for atomic access at the same offsets as in the region itself.
const RegionAlign = CacheLine

// RegionEntry is one entry of the region directory. The name is stored in
// whole words, like the lock manager's, so that readers without the lock
// load it atomically.
type RegionEntry struct {
	State   atomic.Uint32                 // RegionFree or RegionClaimed; stored last on claim
	NameLen atomic.Uint32                 // bytes of Name, 1 to MaxNameLen once claimed
	Offset  atomic.Uint64                 // from the start of the data table, a multiple of RegionAlign
	Size    atomic.Uint64                 // bytes, as claimed (the area used is rounded up to RegionAlign)
	Name    [MaxNameLen / 8]atomic.Uint64 // UTF-8, zero-padded, in little-endian words
}

// Byte offsets inside an encoded RegionEntry.
const (
	regionState   = 0
	regionNameLen = 4
	regionOffset  = 8
	regionSize    = 16
	regionName    = 24
)

// NameWords returns name (at most MaxNameLen bytes) zero-padded in the
// little-endian words of RegionEntry.Name.
func NameWords(name string) [MaxNameLen / 8]uint64 {
	var b [MaxNameLen]byte
	copy(b[:], name)
	var w [MaxNameLen / 8]uint64
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return w
}

// AppendEntry appends the RegionEntrySize bytes of e, as the format lays
// them out, loading each word atomically and State first: if the snapshot
// shows the entry claimed, the rest of it is the claimant's.
func (e *RegionEntry) AppendEntry(b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, e.State.Load())
	b = le.AppendUint32(b, e.NameLen.Load())
	b = le.AppendUint64(b, e.Offset.Load())
	b = le.AppendUint64(b, e.Size.Load())
	for i := range e.Name {
		b = le.AppendUint64(b, e.Name[i].Load())
	}
	return b
}

// PutRegion encodes entry i of the region directory dir as claimed, with
// name, offset and size, for writers of segment images (tests, tools).
// It checks nothing but that the entry lies in dir and that the name fits.
func PutRegion(dir []byte, i int, name string, offset, size uint64) error {
	if i < 0 || i >= len(dir)/RegionEntrySize {
		return formatErr(ErrTableRange, KindRegionDirectory.String(), "entry %d of %d", i, len(dir)/RegionEntrySize)
	}
	if len(name) > MaxNameLen {
		return formatErr(ErrBadName, "name", "%d bytes, at most %d", len(name), MaxNameLen)
	}
	le := binary.LittleEndian
	b := dir[i*RegionEntrySize : (i+1)*RegionEntrySize]
	clear(b)
	le.PutUint32(b[regionState:], RegionClaimed)
	le.PutUint32(b[regionNameLen:], uint32(len(name)))
	le.PutUint64(b[regionOffset:], offset)
	le.PutUint64(b[regionSize:], size)
	copy(b[regionName:], name)
	return nil
}

// RegionDesc is a claimed region as its directory entry records it.
type RegionDesc struct {
	Index  int // the directory entry
	Name   string
	Offset uint64 // from the start of the data table
	Size   uint64
}

// End is the offset just past the region's area: its size rounded up to
// RegionAlign, where the next region may start.
func (r RegionDesc) End() uint64 { return alignUp(r.Offset+r.Size, RegionAlign) }

// RegionTable is a decoded region directory.
type RegionTable struct {
	Regions  []RegionDesc // the sound claimed entries, by index
	Problems []error      // a *FormatError for each damaged entry, by index
	// Abandoned are the free entries that are not zeroed, by index: what a
	// claimant that died before publishing its claim leaves. No damage: a
	// free entry's words mean nothing, and a claim zeroes the entry it
	// takes first.
	Abandoned []int
	Free      int // the first entry in state RegionFree; -1 if none
	// End is where the next region starts: past every region of Regions,
	// on a RegionAlign boundary.
	End uint64
	// Sound is false if a claimed entry, or one in no known state, is
	// damaged: its region is unknown, so no new region may be placed
	// beside it.
	Sound bool
}

// Find returns the region claimed under name.
func (t RegionTable) Find(name string) (RegionDesc, bool) {
	for _, r := range t.Regions {
		if r.Name == name {
			return r, true
		}
	}
	return RegionDesc{}, false
}

// DecodeRegions decodes the region directory dir (the bytes of table
// KindRegionDirectory, or a snapshot of them) of a segment whose data
// table holds dataBytes bytes, and checks every entry: a known state; a
// free entry all zero; a claimed one with a valid name (CheckName) that no
// other entry claims, nothing after the name, a size of at least one byte,
// an offset on a RegionAlign boundary, and the region inside the data
// area, overlapping no other. It never panics and never reads outside
// dir; every problem is a *FormatError whose Field names the entry.
func DecodeRegions(dir []byte, dataBytes uint64) RegionTable {
	t := RegionTable{Free: -1, Sound: true}
	type found struct {
		index int // the entry; -1 for the whole table
		err   error
	}
	var problems []found
	add := func(i int, err error) { problems = append(problems, found{i, err}) }
	problem := func(i int, sentinel error, format string, args ...any) {
		field := KindRegionDirectory.String()
		if i >= 0 {
			field = fmt.Sprintf("%s[%d]", field, i)
		}
		add(i, formatErr(sentinel, field, format, args...))
	}
	if dataBytes > MaxDataBytes {
		add(-1, formatErr(ErrLimit, KindData.String(), "%d bytes over %d", dataBytes, uint64(MaxDataBytes)))
		t.Sound, dataBytes = false, MaxDataBytes
	}
	if len(dir)%RegionEntrySize != 0 {
		problem(-1, ErrTruncated, "%d bytes, not a whole number of %d-byte entries", len(dir), RegionEntrySize)
	}
	le := binary.LittleEndian
	names := map[string]int{}
	var claimed []RegionDesc
	for i := range len(dir) / RegionEntrySize {
		b := dir[i*RegionEntrySize : (i+1)*RegionEntrySize]
		switch st := le.Uint32(b[regionState:]); st {
		case RegionFree:
			if t.Free < 0 {
				t.Free = i
			}
			if !allZero(b) {
				t.Abandoned = append(t.Abandoned, i)
			}
			continue
		case RegionClaimed:
		default:
			problem(i, ErrMalformed, "state %d, neither free (%d) nor claimed (%d)", st, RegionFree, RegionClaimed)
			t.Sound = false
			continue
		}
		r, err := decodeClaimed(b, i, dataBytes)
		if err == nil {
			if j, dup := names[r.Name]; dup {
				err = formatErr(ErrMalformed, fmt.Sprintf("%v[%d]", KindRegionDirectory, i), "name %q is claimed by entry %d too", r.Name, j)
			}
		}
		if err != nil {
			add(i, err)
			t.Sound = false
			continue
		}
		names[r.Name] = i
		claimed = append(claimed, r)
	}

	// Overlaps: in offset order, a region that starts before the end of
	// the regions before it overlaps one of them; the later one (by offset,
	// then by index) is the one reported.
	byOffset := slices.Clone(claimed)
	slices.SortStableFunc(byOffset, func(a, b RegionDesc) int { return cmp.Compare(a.Offset, b.Offset) })
	dropped := map[int]bool{}
	var reach uint64
	owner := -1
	for _, r := range byOffset {
		if owner >= 0 && r.Offset < reach {
			problem(r.Index, ErrTableOverlap, "[%#x, +%d) overlaps entry %d, which reaches %#x", r.Offset, r.Size, owner, reach)
			dropped[r.Index] = true
			t.Sound = false
			continue
		}
		if e := r.Offset + r.Size; e > reach {
			reach, owner = e, r.Index
		}
	}
	for _, r := range claimed {
		if !dropped[r.Index] {
			t.Regions = append(t.Regions, r)
			t.End = max(t.End, r.End())
		}
	}
	// Problems in entry order, as a reader of the table would list them.
	slices.SortStableFunc(problems, func(a, b found) int { return cmp.Compare(a.index, b.index) })
	for _, p := range problems {
		t.Problems = append(t.Problems, p.err)
	}
	return t
}

// decodeClaimed checks the claimed entry b (entry i) on its own.
func decodeClaimed(b []byte, i int, dataBytes uint64) (RegionDesc, error) {
	le := binary.LittleEndian
	field := fmt.Sprintf("%v[%d]", KindRegionDirectory, i)
	n := le.Uint32(b[regionNameLen:])
	if n == 0 || n > MaxNameLen {
		return RegionDesc{}, formatErr(ErrBadName, field, "name length %d, want 1 to %d", n, MaxNameLen)
	}
	name := string(b[regionName : regionName+n])
	if err := CheckName(name); err != nil {
		detail := err.Error()
		if fe, ok := err.(*FormatError); ok {
			detail = fe.Detail
		}
		return RegionDesc{}, formatErr(ErrBadName, field, "%s", detail)
	}
	if !allZero(b[regionName+n:]) {
		return RegionDesc{}, formatErr(ErrMalformed, field, "bytes after the name %q are not zero", name)
	}
	r := RegionDesc{Index: i, Name: name, Offset: le.Uint64(b[regionOffset:]), Size: le.Uint64(b[regionSize:])}
	switch {
	case r.Size == 0:
		return RegionDesc{}, formatErr(ErrMalformed, field, "region %q has size 0", name)
	case r.Offset%RegionAlign != 0:
		return RegionDesc{}, formatErr(ErrTableRange, field, "region %q at %#x, not on a %d-byte boundary", name, r.Offset, RegionAlign)
	case r.Offset > dataBytes || r.Size > dataBytes-r.Offset:
		// Compared without adding, so a huge offset or size cannot wrap.
		return RegionDesc{}, formatErr(ErrTableRange, field, "region %q [%#x, +%d) outside the %d-byte data area", name, r.Offset, r.Size, dataBytes)
	}
	return r, nil
}
