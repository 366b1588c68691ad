package spinlock_test

// unsafe is needed to reach the tests' shared counters as PLAIN words: a
// counter incremented with an ordinary load and store under the lock loses
// increments when the lock lets two holders in, which is what the tests
// must be able to see. Words that the tests themselves synchronise on are
// viewed as atomics instead.

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// The scratch words live in the segment's lock-manager table, which no
// package uses in these tests. Each sits on a cache line of its own.
const (
	offCounter  = 0   // plain: the counter incremented under the lock
	offMarker   = 64  // atomic: pid of the process inside the critical section, 0 if none
	offStop     = 128 // atomic: the parent sets it to 1 to stop the helpers
	offReady    = 192 // atomic: each helper adds 1 when it is ready to start
	offGo       = 256 // atomic: the parent sets it to 1 to start them all at once
	offNextGen  = 320 // plain, under the lock: generation the next holder must see
	offReclaims = 384 // plain, under the lock: reclaims reported by every helper
	offToken    = 448 // atomic: a token handed from one process to the next
	offToken2   = 512 // atomic: a second token, for the ping-pong benchmark
	offRecords  = 1024

	// Each helper process of the kill test owns one record: a plain tally
	// of its committed increments and a plain count of its reclaims, both
	// written only while it holds the lock, so they survive its death.
	recordSize     = 32
	recordTally    = 0
	recordReclaims = 8

	scratchEntries = 256 // lock-manager entries of a test segment: 64 KiB
	maxRecords     = (scratchEntries*layout.LockMgrEntrySize - offRecords) / recordSize
)

type scratch struct{ mem []byte }

func scratchOf(seg *shm.Segment) (scratch, error) {
	mem, err := seg.Region(layout.KindLockMgr)
	if err != nil {
		return scratch{}, err
	}
	if len(mem) < scratchEntries*layout.LockMgrEntrySize {
		return scratch{}, fmt.Errorf("lock-manager table of %d bytes is too small for the scratch words", len(mem))
	}
	return scratch{mem}, nil
}

// plain returns the word at off for ordinary loads and stores.
func (s scratch) plain(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }

// atomic returns the word at off as an atomic, for words used to signal
// between processes and for reading plain words another process writes.
func (s scratch) atomic(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&s.mem[off])) }

func recordOff(i int) int {
	if i < 0 || i >= maxRecords {
		panic(fmt.Sprintf("record %d outside [0, %d)", i, maxRecords))
	}
	return offRecords + i*recordSize
}
