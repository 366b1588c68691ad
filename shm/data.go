package shm

import (
	"fmt"
	"sync/atomic"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/layout"
)

// Region is a named region of a segment's data area: memory that every
// process mapping the segment sees, for the data its locks protect. A
// region is made by the first Data call that names it and kept as long as
// the segment exists: it is never freed, moved or resized, so a *Region
// needs no lock of its own, and any number of handles may use it at once.
//
// Its memory is shared with other processes: reach a word that others
// change at the same time through Uint64 or Uint32 (atomics), or guard
// plain reads and writes of Bytes with a lock (package spinlock, upgrade or
// lockmgr). A Region is valid until its segment is closed; memory reached
// through it after that belongs to nobody else (see Segment.Close).
type Region struct {
	seg   *Segment // keeps the mapping alive while the region is used
	desc  layout.RegionDesc
	mem   []byte // the region's bytes in the mapping, capped at its size
	fresh bool
}

// Data returns the data region named name, claiming it with size bytes if
// no region has that name yet. Every process that names the region gets
// the same memory; of several that claim a new name at once, one makes
// the region and the others find it, all with the same offset. A new
// region reads as zeros: Fresh tells its maker, which may then initialise
// it (others must not rely on what it writes before a lock they share
// says so).
//
// size 0 only finds: it returns the region of any size, or ErrNotFound.
// A region claimed with another size is an ErrRegionSize error, as is a
// negative size; ErrDataFull if the data area has not size bytes left
// (regions are placed on layout.RegionAlign boundaries, one after the
// other), ErrTableFull if the region directory is full, a
// layout.ErrBadName error for a bad name, ErrReadOnly to claim on a
// read-only segment (finding works), ErrClosed after Close. Nothing
// changes on error.
func (s *Segment) Data(name string, size int) (*Region, error) {
	if err := layout.CheckName(name); err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, fmt.Errorf("%w: %d bytes asked for data region %q", ErrRegionSize, size, name)
	}
	if s.closed.Load() {
		return nil, ErrClosed
	}
	// Regions never change once claimed, so one found without the lock is
	// final: the common case, a process attaching to a region that exists,
	// takes no lock.
	if r, ok, err := s.findRegion(s.readRegions(), name, size); ok || err != nil {
		return r, err
	}
	if size == 0 {
		return nil, fmt.Errorf("%w: data region %q", ErrNotFound, name)
	}
	if err := s.writable(); err != nil {
		return nil, err
	}
	if err := s.lockRegistry(); err != nil {
		return nil, err
	}
	defer s.unlockRegistry()
	tab := s.readRegions()
	if r, ok, err := s.findRegion(tab, name, size); ok || err != nil {
		return r, err // claimed by another process while this one waited
	}
	return s.claimRegion(tab, name, uint64(size))
}

// findRegion returns the region named name in tab as a *Region, checking
// size (0 matches any).
func (s *Segment) findRegion(tab layout.RegionTable, name string, size int) (*Region, bool, error) {
	d, ok := tab.Find(name)
	if !ok {
		return nil, false, nil
	}
	if size != 0 && uint64(size) != d.Size {
		return nil, true, fmt.Errorf("%w: data region %q has %d bytes, not %d", ErrRegionSize, name, d.Size, size)
	}
	r, err := s.regionOf(d, false)
	return r, true, err
}

// claimRegion makes region name of size bytes, under the registry lock, in
// the first free entry of the directory tab (see layout's data regions):
// the entry is written whole and published by its State, stored last, so a
// claimant that dies before that leaves a free entry.
func (s *Segment) claimRegion(tab layout.RegionTable, name string, size uint64) (*Region, error) {
	if !tab.Sound {
		// A damaged claimed entry's region is unknown: a new one placed by
		// the others could overlap it.
		return nil, fmt.Errorf("shm: data region %q: the region directory is damaged (see CheckDirectories): %w", name, firstProblem(tab))
	}
	area := s.header.Table(layout.KindData).Size()
	if left := area - min(tab.End, area); size > left {
		return nil, fmt.Errorf("%w: data region %q needs %d bytes, %d of %d are left", ErrDataFull, name, size, left, area)
	}
	if tab.Free < 0 {
		return nil, fmt.Errorf("%w: %v has %d entries, all claimed", ErrTableFull, layout.KindRegionDirectory, s.Len(layout.KindRegionDirectory))
	}
	// ErrClosed if Close has begun (it waits for this change to end):
	// nothing is changed yet.
	e, err := entry[layout.RegionEntry](s, layout.KindRegionDirectory, tab.Free)
	if err != nil {
		return nil, err
	}
	// The entry is free, so State is 0; a dead claimant may have left the
	// other words set.
	e.NameLen.Store(0)
	e.Offset.Store(0)
	e.Size.Store(0)
	for i, w := range layout.NameWords(name) {
		e.Name[i].Store(w)
	}
	e.NameLen.Store(uint32(len(name)))
	e.Offset.Store(tab.End)
	e.Size.Store(size)
	testHookBeforePublish()
	e.State.Store(layout.RegionClaimed)
	s.regGen.Add(1)
	return s.regionOf(layout.RegionDesc{Index: tab.Free, Name: name, Offset: tab.End, Size: size}, true)
}

func firstProblem(tab layout.RegionTable) error {
	if len(tab.Problems) > 0 {
		return tab.Problems[0]
	}
	return layout.ErrMalformed
}

// readRegions decodes the region directory without a lock: each entry's
// State is loaded first, so an entry read as claimed is read whole.
func (s *Segment) readRegions() layout.RegionTable {
	n := s.Len(layout.KindRegionDirectory)
	buf := make([]byte, 0, n*layout.RegionEntrySize)
	for i := range n {
		e, err := entryOf[layout.RegionEntry](s, layout.KindRegionDirectory, i)
		if err != nil {
			break // cannot happen: i is below the table's count
		}
		buf = e.AppendEntry(buf)
	}
	return layout.DecodeRegions(buf, s.header.Table(layout.KindData).Size())
}

// regionOf makes the *Region of d, which DecodeRegions placed inside the
// data table.
func (s *Segment) regionOf(d layout.RegionDesc, fresh bool) (*Region, error) {
	t := s.header.Table(layout.KindData)
	start := t.Offset + d.Offset
	end := start + d.Size
	if d.Offset > t.Size() || d.Size > t.Size()-d.Offset || end > uint64(len(s.mem)) {
		return nil, fmt.Errorf("shm: data region %q [%#x, +%d) outside the data table: %w", d.Name, d.Offset, d.Size, layout.ErrTableRange)
	}
	return &Region{seg: s, desc: d, mem: s.mem[start:end:end], fresh: fresh}, nil
}

// Regions lists the data regions, in the order they were claimed (by
// directory entry). A damaged entry (see CheckDirectories) is left out. It
// takes no lock and works on a read-only segment.
func (s *Segment) Regions() ([]*Region, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	tab := s.readRegions()
	out := make([]*Region, 0, len(tab.Regions))
	for _, d := range tab.Regions {
		r, err := s.regionOf(d, false)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// DataArea reports the size of the data area in bytes and how many of
// them regions take (each region's size rounded up to
// layout.RegionAlign): a new region may have at most size-used bytes.
func (s *Segment) DataArea() (size, used int, err error) {
	if s.closed.Load() {
		return 0, 0, ErrClosed
	}
	area := s.header.Table(layout.KindData).Size()
	return int(area), int(min(s.readRegions().End, area)), nil
}

// Name is the region's name.
func (r *Region) Name() string { return r.desc.Name }

// Len is the region's size in bytes, as it was claimed.
func (r *Region) Len() int { return int(r.desc.Size) }

// Offset is where the region starts in the data area (a multiple of
// layout.RegionAlign), for tools.
func (r *Region) Offset() int { return int(r.desc.Offset) }

// Index is the region's entry in the region directory, for tools.
func (r *Region) Index() int { return r.desc.Index }

// Fresh reports whether the Data call that returned r made the region: of
// all the calls that name it, in all processes, exactly one does, and the
// region then holds only zeros. Regions lists regions as not fresh.
func (r *Region) Fresh() bool { return r.fresh }

// Bytes is the region's memory, Len bytes of the shared mapping. Plain
// reads and writes of it need a lock that every process using the region
// takes; words changed without one go through Uint64 and Uint32. On a
// read-only segment it must only be read.
func (r *Region) Bytes() []byte { return r.mem }

// Uint64 returns the 64-bit word at byte off of the region, for atomic
// access: off must be a multiple of 8 with the word inside the region,
// else an ErrRegionOffset error. ErrClosed after the segment's Close.
func (r *Region) Uint64(off int) (*atomic.Uint64, error) {
	if err := r.checkWord(off, 8); err != nil {
		return nil, err
	}
	return memview.Uint64(r.mem, uint64(off))
}

// Uint32 returns the 32-bit word at byte off of the region, for atomic
// access (futex words are 32 bits): off must be a multiple of 4 with the
// word inside the region, else an ErrRegionOffset error. ErrClosed after
// the segment's Close.
func (r *Region) Uint32(off int) (*atomic.Uint32, error) {
	if err := r.checkWord(off, 4); err != nil {
		return nil, err
	}
	return memview.Uint32(r.mem, uint64(off))
}

// checkWord checks a size-byte word at off. The region starts on a
// layout.RegionAlign boundary of a page-aligned mapping, so off's
// alignment in the region is its alignment in memory.
func (r *Region) checkWord(off, size int) error {
	if r.seg.closed.Load() {
		return ErrClosed
	}
	if off < 0 || off%size != 0 || off > len(r.mem)-size {
		return fmt.Errorf("%w: %d-byte word at %d of data region %q (%d bytes)", ErrRegionOffset, size, off, r.desc.Name, len(r.mem))
	}
	return nil
}
