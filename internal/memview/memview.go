package memview

// unsafe is needed to view bytes of a MAP_SHARED mapping as atomic words and
// as the fixed-layout structs of package layout; nothing else in shmlock
// converts memory itself.

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// ErrOutOfRange is returned for an offset whose object would not lie wholly
// inside the mapping or is not aligned for atomic access.
var ErrOutOfRange = errors.New("memview: offset out of range")

// wordAlign is the alignment every typed view needs: 64-bit atomics fault
// on some platforms when they are not 8-byte aligned.
const wordAlign = 8

// At returns a *T viewing mem[off : off+sizeof(T)]. The mapping must outlive
// every use of the pointer.
func At[T any](mem []byte, off uint64) (*T, error) {
	var zero T
	size := uint64(unsafe.Sizeof(zero))
	end := off + size
	if end < off || end > uint64(len(mem)) {
		return nil, fmt.Errorf("%w: %d+%d of %d bytes", ErrOutOfRange, off, size, len(mem))
	}
	p := unsafe.Pointer(unsafe.SliceData(mem[off:]))
	align := uint64(unsafe.Alignof(zero))
	if align < wordAlign && size >= wordAlign {
		align = wordAlign
	}
	if uintptr(p)%uintptr(align) != 0 {
		return nil, fmt.Errorf("%w: offset %d is not %d-byte aligned", ErrOutOfRange, off, align)
	}
	return (*T)(p), nil
}

// Uint32 returns the 32-bit word at off as an atomic.
func Uint32(mem []byte, off uint64) (*atomic.Uint32, error) { return At[atomic.Uint32](mem, off) }

// Uint64 returns the 64-bit word at off as an atomic.
func Uint64(mem []byte, off uint64) (*atomic.Uint64, error) { return At[atomic.Uint64](mem, off) }

// LowHalf returns the low 32 bits of a 64-bit word as a word of their own,
// for futex calls (the kernel compares and waits on 32-bit words only). It
// relies on the little-endian layout that package layout enforces.
func LowHalf(w *atomic.Uint64) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(w)) }

// Index returns the index of p in an array of T that starts at base, or -1
// if p is not an element of it (before base, or not on an element's
// boundary). It reads no memory.
func Index[T any](base, p *T) int {
	var zero T
	size := unsafe.Sizeof(zero)
	b, q := uintptr(unsafe.Pointer(base)), uintptr(unsafe.Pointer(p))
	if size == 0 || q < b || (q-b)%size != 0 {
		return -1
	}
	return int((q - b) / size)
}
