package memview

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Quarantine replaces the mapping under mem, in place and in one step, by
// private zero-filled pages. Pointers into mem that outlive it then read
// zeros and write memory that nobody else sees, instead of faulting (an
// unmapped address kills the process; Go cannot recover from it) or
// reaching a file that other processes share. The address range stays
// reserved for the life of the process: a few page table entries and no
// memory until a stale pointer writes. Adjacent quarantined ranges merge
// into one mapping, so closing many segments does not run the process out
// of mappings (vm.max_map_count).
//
// The pages are readable and writable whatever the protection of the
// mapping they replace: ranges of different protections would not merge,
// and a process that closes read-only and writable segments in turn (a
// monitor beside a user) would gain a mapping for every two, until mmap
// fails. A stale pointer into a read-only segment that writes, which
// would have faulted before, writes private memory.
func Quarantine(mem []byte) error {
	if len(mem) == 0 {
		return nil
	}
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(mem)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	return err
}
