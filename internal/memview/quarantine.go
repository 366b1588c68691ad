package memview

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Quarantine replaces the mapping under mem, in place and in one step, by
// private zero-filled pages with the same protection. Pointers into mem
// that outlive it then read zeros and write memory that nobody else sees,
// instead of faulting (an unmapped address kills the process; Go cannot
// recover from it) or reaching a file that other processes share. The
// address range stays reserved for the life of the process: a few page
// table entries and no memory until a stale pointer writes. Adjacent
// quarantined ranges merge into one mapping, so closing many segments does
// not run the process out of mappings.
func Quarantine(mem []byte, writable bool) error {
	if len(mem) == 0 {
		return nil
	}
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(mem)), prot,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	return err
}
