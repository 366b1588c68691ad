package layout

import (
	"encoding/binary"
	"time"
)

// Validate decodes the header at the start of a segment file of fileSize
// bytes and checks everything about it that can be checked without the
// tables' contents: magic, version, sizes, that reserved bytes are zero,
// each table's kind, entry size, count limit, alignment and bounds, that no
// two tables overlap, and the checksum. header may be just the first HeaderSize bytes of the file.
// Every failure is a *FormatError; Validate never panics and never reads
// outside header. The ready word is not checked (see IsReady).
func Validate(header []byte, fileSize int64) (Header, error) {
	le := binary.LittleEndian
	var h Header
	if len(header) < len(Magic) {
		return h, formatErr(ErrTruncated, "header", "%d bytes, need %d", len(header), HeaderSize)
	}
	if string(header[OffMagic:OffMagic+len(Magic)]) != Magic {
		return h, formatErr(ErrBadMagic, "magic", "%q", header[OffMagic:OffMagic+len(Magic)])
	}
	if len(header) < HeaderSize {
		return h, formatErr(ErrTruncated, "header", "%d bytes, need %d", len(header), HeaderSize)
	}
	if fileSize < HeaderSize {
		return h, formatErr(ErrTruncated, "file", "%d bytes, need at least %d", fileSize, HeaderSize)
	}
	if h.Version = le.Uint32(header[OffVersion:]); h.Version != Version {
		return h, versionErr(h.Version)
	}
	if hs := le.Uint32(header[OffHeaderSize:]); hs != HeaderSize {
		return h, formatErr(ErrMalformed, "header_size", "%d, want %d", hs, HeaderSize)
	}
	h.TotalSize = le.Uint64(header[OffTotalSize:])
	switch {
	case h.TotalSize > MaxTotalSize:
		return h, formatErr(ErrLimit, "total_size", "%d over %d", h.TotalSize, uint64(MaxTotalSize))
	case h.TotalSize < HeaderSize || h.TotalSize%PageSize != 0:
		return h, formatErr(ErrMalformed, "total_size", "%d is not a whole number of %d-byte pages", h.TotalSize, PageSize)
	case h.TotalSize != uint64(fileSize):
		return h, formatErr(ErrSizeMismatch, "total_size", "header says %d bytes, file has %d", h.TotalSize, fileSize)
	}
	if n := le.Uint32(header[OffTableCount:]); n != uint32(NumTables) {
		return h, formatErr(ErrMalformed, "table_count", "%d, want %d", n, NumTables)
	}
	if h.Flags = le.Uint32(header[OffFlags:]); h.Flags&^knownFlags != 0 {
		return h, formatErr(ErrMalformed, "flags", "unknown bits %#x", h.Flags&^knownFlags)
	}
	// Encode writes zeros here; accepting anything else would let two
	// different headers decode to the same Header.
	if !allZero(header[offReserved:OffTables]) {
		return h, formatErr(ErrMalformed, "reserved", "bytes [%#x, %#x) are not zero", offReserved, OffTables)
	}
	h.Created = time.Unix(0, int64(le.Uint64(header[OffCreated:])))
	copy(h.BootID[:], header[OffBootID:])
	h.PIDNamespace = le.Uint64(header[OffPIDNS:])
	h.Creator = le.Uint64(header[OffCreator:])
	if err := decodeTables(header, &h); err != nil {
		return h, err
	}
	if got, want := le.Uint32(header[OffChecksum:]), Checksum(header); got != want {
		return h, formatErr(ErrChecksum, "checksum", "stored %#08x, computed %#08x", got, want)
	}
	return h, nil
}

// decodeTables reads and checks the table descriptors. Tables must come in
// Kind order, so checking each against the end of the previous one finds
// every overlap.
func decodeTables(header []byte, h *Header) error {
	le := binary.LittleEndian
	prevEnd, prevKind := uint64(HeaderSize), "header"
	for i := range NumTables {
		d := header[OffTables+i*TableDescSize:]
		k := Kind(i + 1)
		t := Table{
			Kind:      Kind(le.Uint32(d[descKind:])),
			EntrySize: le.Uint32(d[descEntrySize:]),
			Count:     le.Uint64(d[descCount:]),
			Offset:    le.Uint64(d[descOffset:]),
		}
		field := k.String()
		switch {
		case t.Kind != k:
			return formatErr(ErrUnknownTable, field, "descriptor %d has kind %v, want %v", i, t.Kind, k)
		case t.EntrySize != k.EntrySize():
			return formatErr(ErrMalformed, field, "entry size %d, want %d", t.EntrySize, k.EntrySize())
		case t.Count > maxCounts[i]:
			return formatErr(ErrLimit, field, "count %d over %d", t.Count, maxCounts[i])
		case t.Offset%CacheLine != 0:
			return formatErr(ErrTableRange, field, "offset %#x is not cache-line aligned", t.Offset)
		case t.Offset > h.TotalSize || t.Size() > h.TotalSize-t.Offset:
			// Count and EntrySize are bounded above, so Size cannot overflow.
			return formatErr(ErrTableRange, field, "[%#x, +%d) outside the %d-byte segment", t.Offset, t.Size(), h.TotalSize)
		case t.Offset < prevEnd:
			return formatErr(ErrTableOverlap, field, "starts at %#x, before the end of %s at %#x", t.Offset, prevKind, prevEnd)
		}
		if le.Uint64(d[descReserved:]) != 0 {
			return formatErr(ErrMalformed, field, "reserved descriptor word is not zero")
		}
		h.Tables[i] = t
		prevEnd, prevKind = t.End(), field
	}
	// One stats entry per lock, in the order of StatsIndex.
	if got, want := h.Table(KindLockStats).Count, h.lockCount(); got != want {
		return formatErr(ErrMalformed, KindLockStats.String(), "%d entries for %d locks", got, want)
	}
	// A claim directory has an entry per entry of the table it claims: the
	// same index names both, and the packages (libshmlock too) index each
	// by the other's count.
	for _, d := range [...]struct{ table, dir Kind }{{KindOwnerSlots, KindSlotDirectory}, {KindUpgrades, KindUpgradeDirectory}} {
		if got, want := h.Table(d.dir).Count, h.Table(d.table).Count; got != want {
			return formatErr(ErrMalformed, d.dir.String(), "%d entries for %d %v", got, want, d.table)
		}
	}
	// Every upgrade mutex has the same number of reader records.
	up, rd := h.Table(KindUpgrades).Count, h.Table(KindUpgradeReaders).Count
	if up == 0 && rd != 0 || up != 0 && (rd%up != 0 || rd/up > MaxUpgradeReaders) {
		return formatErr(ErrMalformed, KindUpgradeReaders.String(), "%d records for %d upgrade mutexes", rd, up)
	}
	for i := NumTables; i < tableDescLimit; i++ {
		if !allZero(header[OffTables+i*TableDescSize : OffTables+(i+1)*TableDescSize]) {
			return formatErr(ErrUnknownTable, "tables", "descriptor %d is not empty", i)
		}
	}
	return nil
}

// versionErr explains a segment of another format version: an older one
// was made by an older shmlock and cannot be read by this one (its header
// has another size), so it must be made again.
func versionErr(v uint32) error {
	if v >= 1 && v < Version {
		return formatErr(ErrVersion, "version", "%d: the segment was made by an older shmlock (format %d); "+
			"this build reads format %d only: remove it (shmctl rm) once nobody uses it, and create it again", v, v, Version)
	}
	return formatErr(ErrVersion, "version", "%d, this build reads %d", v, Version)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
