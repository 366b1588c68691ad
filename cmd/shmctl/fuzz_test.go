package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/txn"
	"github.com/shmlock/shmlock/upgrade"
)

// The ways FuzzOpen opens its file (opener modulo numOpeners).
const (
	openWritable = iota
	openOrCreate
	openReadOnly
	numOpeners
)

// editSize is the size of one edit of FuzzOpen's input: a 3-byte offset
// into the file (little-endian, modulo its size) and the byte to put there.
const editSize = 4

// FuzzOpen: a segment file damaged anywhere (bytes of the header and of
// every table changed, the file cut short or grown) is opened, writable,
// by OpenOrCreate or read-only, either with a typed error and the file
// left as it was, or with a segment on which what shmctl reads (info,
// slots, rwlocks, txns, data, locks, check) and what a user changes (a
// claim, a spinlock, an upgrade mutex, a lock-manager hold, a
// transaction space, each taken and given back) works or fails with a
// typed error, a read-only segment's file left as it was, and nothing
// panics or hangs. The file is made once, valid, with every kind of table
// and something in each; each input is that file with its edits, its
// length changed by delta bytes; with reseal, the header's checksum is
// made to match its damaged bytes (a header that says the wrong size, or
// places its tables wrongly, but is whole).
func FuzzOpen(f *testing.F) {
	base := validSegmentFile(f)
	f.Add([]byte{}, int32(0), byte(openWritable), false)
	f.Add([]byte{}, int32(0), byte(openReadOnly), false)
	f.Add([]byte{}, int32(-1), byte(openOrCreate), false)
	f.Add([]byte{}, int32(64), byte(openWritable), false)
	// A damaged table past the header (its first table entry, whichever
	// it is), and a damaged header word.
	f.Add([]byte{0x00, 0x04, 0x00, 0xff, 0x08, 0x04, 0x00, 0x7f}, int32(0), byte(openWritable), false)
	f.Add([]byte{0x10, 0x00, 0x00, 0x01}, int32(0), byte(openReadOnly), false)
	// A header, resealed, that says the file is one page longer, or a
	// table entry fewer (the low byte of the first table's count).
	f.Add(totalSizeEdit(base, 4096), int32(4096), byte(openWritable), true)
	f.Add(firstCountEdit(base, -1), int32(0), byte(openWritable), true)
	f.Fuzz(func(t *testing.T, edits []byte, delta int32, opener byte, reseal bool) {
		file := damaged(base, edits, delta)
		if reseal && len(file) >= layout.HeaderSize {
			binary.LittleEndian.PutUint32(file[layout.OffChecksum:], layout.Checksum(file))
		}
		path := testproc.SegmentPath(t)
		require.NoError(t, os.WriteFile(path, file, 0o600))
		stop := testproc.Watchdog(time.Minute, "FuzzOpen")
		defer stop()
		seg, err := openAs(path, opener%numOpeners)
		if err != nil {
			requireTypedError(t, "open", err)
			after, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			if !bytes.Equal(file, after) {
				t.Fatalf("an open that failed (%v) changed the file", err)
			}
			return
		}
		defer seg.Close()
		readAsShmctl(t, seg, path)
		changeAsUser(t, seg)
		if seg.ReadOnly() {
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			if !bytes.Equal(file, after) {
				t.Fatal("a read-only segment's file changed")
			}
		}
	})
}

// validSegmentFile returns the bytes of a segment with every kind of
// table, each with something in it: claims, a held lock-manager resource,
// a data region, a transaction space's control area.
func validSegmentFile(tb testing.TB) []byte {
	path := testproc.SegmentPath(tb)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{
		Slots: 4, Upgrades: 2, UpgradeReaders: 2, ClaimRefs: 6, TxnRecords: 2,
		TxnArenaBytes: 1024, LockMgrEntries: 4, DataBytes: 256, DataRegions: 2,
	}})
	require.NoError(tb, err)
	defer seg.Close()
	l, err := spinlock.Named(seg, "spin", spinlock.PIDTID)
	require.NoError(tb, err)
	g, err := l.TryLock(spinlock.NewHolder())
	require.NoError(tb, err)
	require.NoError(tb, g.Release())
	mu, err := upgrade.Named(seg, "rw")
	require.NoError(tb, err)
	require.NoError(tb, mu.TryLock())
	require.NoError(tb, mu.Unlock())
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(tb, err)
	_, err = m.Acquire(context.Background(), "held", "owner", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(tb, err)
	_, err = seg.Data("rows", 100)
	require.NoError(tb, err)
	sp, err := txn.Open(seg)
	require.NoError(tb, err)
	require.NoError(tb, sp.Close())
	b, err := os.ReadFile(path)
	require.NoError(tb, err)
	return b
}

// damaged is base with edits applied (see editSize) and its length
// changed by delta bytes (not below 0, at most 1 MiB longer).
func damaged(base, edits []byte, delta int32) []byte {
	file := append([]byte(nil), base...)
	for ; len(edits) >= editSize; edits = edits[editSize:] {
		off := binary.LittleEndian.Uint32(append(edits[:3:3], 0)) % uint32(len(file))
		file[off] = edits[3]
	}
	n := max(0, min(len(file)+int(delta), len(file)+1<<20))
	if n <= len(file) {
		return file[:n]
	}
	return append(file, make([]byte, n-len(file))...)
}

// totalSizeEdit is the edits that add grow bytes to the total size the
// header of base records.
func totalSizeEdit(base []byte, grow uint64) []byte {
	return wordEdits(layout.OffTotalSize, binary.LittleEndian.Uint64(base[layout.OffTotalSize:])+grow)
}

// firstCountEdit is the edits that change the entry count of the
// header's first table by by.
func firstCountEdit(base []byte, by int) []byte {
	const countOffset = 8 // of the count in a table descriptor (layout's header.go)
	off := layout.OffTables + countOffset
	return wordEdits(off, uint64(int64(binary.LittleEndian.Uint64(base[off:]))+int64(by)))
}

// wordEdits is the edits that write w (little-endian, 8 bytes) at off.
func wordEdits(off int, w uint64) []byte {
	var edits []byte
	for i := range 8 {
		at := uint32(off + i)
		edits = append(edits, byte(at), byte(at>>8), byte(at>>16), byte(w>>(8*i)))
	}
	return edits
}

// openAs opens path as opener says. A file whose ready word was damaged
// is waited for briefly: the wait is not what is fuzzed.
func openAs(path string, opener byte) (*shm.Segment, error) {
	opts := shm.Options{ReadyTimeout: time.Millisecond}
	switch opener {
	case openOrCreate:
		return shm.OpenOrCreate(path, opts)
	case openReadOnly:
		opts.ReadOnly = true
	}
	return shm.Open(path, opts)
}

// readAsShmctl makes the reports of shmctl's commands on seg.
func readAsShmctl(t *testing.T, seg *shm.Segment, path string) {
	_, err := readInfo(seg, "info")
	requireTypedError(t, "readInfo", err)
	_, err = readSlots(seg, true)
	requireTypedError(t, "readSlots", err)
	_, err = readRWLocks(seg, true)
	requireTypedError(t, "readRWLocks", err)
	_, err = readTxns(seg, true)
	requireTypedError(t, "readTxns", err)
	_, err = readData(seg)
	requireTypedError(t, "readData", err)
	_, err = checkSegment(seg)
	requireTypedError(t, "checkSegment", err)
	tab, err := readTable(path, false, &etcdOptions{})
	requireTypedError(t, "readTable", err)
	if err == nil {
		_ = readLocks(tab, true, time.Now())
	}
	for _, k := range []layout.Kind{layout.KindOwnerSlots, layout.KindUpgrades} {
		_, err := seg.Claims(k)
		requireTypedError(t, "Claims", err)
		_, err = seg.Lookup(k, "spin")
		requireTypedError(t, "Lookup", err)
	}
	_, err = seg.CheckDirectories()
	requireTypedError(t, "CheckDirectories", err)
}

// changeAsUser takes and gives back what a user of seg would: on a
// read-only segment each fails with a typed error.
func changeAsUser(t *testing.T, seg *shm.Segment) {
	if i, err := seg.Claim(layout.KindOwnerSlots, "fuzz"); err == nil {
		require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
	} else {
		requireTypedError(t, "Claim", err)
	}
	if l, err := spinlock.Named(seg, "spin", spinlock.PIDTID); err == nil {
		g, err := l.TryLock(spinlock.NewHolder())
		requireTypedError(t, "spinlock TryLock", err)
		if err == nil {
			requireTypedError(t, "spinlock Release", g.Release())
		}
	} else {
		requireTypedError(t, "spinlock.Named", err)
	}
	if mu, err := upgrade.Named(seg, "rw"); err == nil {
		err := mu.TryLock()
		requireTypedError(t, "upgrade TryLock", err)
		if err == nil {
			requireTypedError(t, "upgrade Unlock", mu.Unlock())
		}
		if err := mu.TryLockShared(); err == nil {
			requireTypedError(t, "upgrade UnlockShared", mu.UnlockShared())
		} else {
			requireTypedError(t, "upgrade TryLockShared", err)
		}
	} else {
		requireTypedError(t, "upgrade.Named", err)
	}
	if m, err := lockmgr.Open(seg, lockmgr.Options{}); err == nil {
		_, err := m.Acquire(context.Background(), "fuzz", "owner", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		requireTypedError(t, "lockmgr Acquire", err)
		if err == nil {
			requireTypedError(t, "lockmgr Release", m.Release("fuzz", "owner"))
		}
		_, err = m.Reclaim(false)
		requireTypedError(t, "lockmgr Reclaim", err)
	} else {
		requireTypedError(t, "lockmgr.Open", err)
	}
	if sp, err := txn.Open(seg); err == nil {
		requireTypedError(t, "txn Close", sp.Close())
	} else {
		requireTypedError(t, "txn.Open", err)
	}
}

// typedErrors are the sentinels of the packages a segment's user calls;
// an error of FuzzOpen's calls must wrap one (or carry a lock-manager
// code).
var typedErrors = []error{
	shm.ErrClosed, shm.ErrExists, shm.ErrBadPath, shm.ErrSymlink, shm.ErrNotRegular,
	shm.ErrForeignOwner, shm.ErrPermissiveMode, shm.ErrForeignPIDNamespace, shm.ErrNotReady,
	shm.ErrReadOnly, shm.ErrIndex, shm.ErrNotClaimable, shm.ErrTableFull, shm.ErrNotFound,
	shm.ErrNotClaimed, shm.ErrUseMismatch, shm.ErrRegionSize, shm.ErrDataFull, shm.ErrRegionOffset,
	shm.ErrFault, shm.ErrNoSpace, shm.ErrNoMemory,
	layout.ErrTruncated, layout.ErrBadMagic, layout.ErrVersion, layout.ErrSizeMismatch,
	layout.ErrMalformed, layout.ErrTableRange, layout.ErrTableOverlap, layout.ErrLimit,
	layout.ErrChecksum, layout.ErrBadName, layout.ErrUnknownTable,
	spinlock.ErrNotOwner, spinlock.ErrWouldBlock, spinlock.ErrNotHeld, spinlock.ErrBadIdentity,
	spinlock.ErrRecursion, spinlock.ErrLockClosed, spinlock.ErrBadMode, spinlock.ErrNoSlot,
	spinlock.ErrModeMismatch,
	upgrade.ErrNotHeld, upgrade.ErrNotOwner, upgrade.ErrWouldBlock, upgrade.ErrHeld,
	upgrade.ErrOverflow, upgrade.ErrTooManyReaders, upgrade.ErrClosed,
	txn.ErrClosing, txn.ErrClosed, txn.ErrNoRecord, txn.ErrPinsHeld, txn.ErrNoSpace,
	txn.ErrNoPinRow, txn.ErrSpaceClosed, txn.ErrCorrupt, txn.ErrInvalid,
}

// requireTypedError fails t unless err is nil, wraps one of typedErrors or
// carries a lock-manager code.
func requireTypedError(t *testing.T, call string, err error) {
	t.Helper()
	if err == nil || lockmgr.Code(err) != "" {
		return
	}
	for _, want := range typedErrors {
		if errors.Is(err, want) {
			return
		}
	}
	t.Fatalf("%s: an error of no package's sentinel: %v", call, err)
}
