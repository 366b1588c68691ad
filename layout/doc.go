// Package layout defines the binary format of a shmlock segment: the
// versioned header (the "DataBlock") and the tables that follow it.
//
// A segment is one file, mapped MAP_SHARED by every process that uses it.
// Every multi-byte field is little-endian (the byte order of every platform
// shmlock builds for; see the check in endian.go) and every table starts on a
// cache line:
//
//	0x000  header, HeaderSize bytes (see the offsets below)
//	       owner slots        Slots x 32 bytes   {pid, tid, token, recursion_count, pad}
//	       slot directory     Slots x 64 bytes   claim state and name of each slot
//	       upgrade mutexes    Upgrades x 64 bytes
//	       upgrade directory  Upgrades x 64 bytes
//	       txn records        TxnRecords x 128 bytes (reserved for package txn)
//	       txn arena          TxnArenaBytes, in 64-byte units (reserved for package txn)
//	       lock-manager table LockMgrEntries x 256 bytes (reserved for package lockmgr)
//	       upgrade readers    UpgradeReaders x Upgrades x 16 bytes
//	       claim references   ClaimRefs x 16 bytes
//	       region directory   DataRegions x 64 bytes   name, offset and size of each data region
//	       data area          DataBytes, in 64-byte units: the regions' memory
//	       lock stats         (Slots + Upgrades + LockMgrEntries + TxnRecords) x 64 bytes
//	                          contention counters, one LockStats per lock
//
// Plan computes where each table goes, Encode writes a header, and Validate
// checks a header read from an untrusted file: it never panics, never reads
// out of bounds and returns a *FormatError that errors.Is matches against one
// of the Err sentinels. DecodeRegions does the same for the region directory,
// whose entries change while the segment is in use.
//
//	h, err := layout.Plan(layout.Options{Slots: 64, Upgrades: 8})
//	buf := make([]byte, h.TotalSize)
//	layout.Encode(h, buf)
//	_, err = layout.Validate(buf[:layout.HeaderSize], int64(len(buf)))
package layout
