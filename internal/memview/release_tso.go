//go:build amd64 && !race

package memview

// unsafe is needed for a store with release ordering and no fence: a plain
// MOV on x86, whose stores are never reordered with earlier loads or stores.
// Not on 386, where a plain 64-bit store is two MOVs, and a concurrent
// load may see half of each value (release_other.go serves it).

import (
	"sync/atomic"
	"unsafe"
)

// StoreRelease32 stores v into w with release ordering only: whoever loads
// v also sees every store the caller made before it (x86 is TSO: a plain
// store is a release store). It is for a lock word that only the holder
// writes while it holds it, at the release: an atomic Store would add an
// XCHG, a full fence the release does not need. A later load of the
// caller's may still be ordered before the store: where that matters (a
// check for sleepers after the release), a locked instruction must come
// between.
func StoreRelease32(w *atomic.Uint32, v uint32) { *(*uint32)(unsafe.Pointer(w)) = v }

// StoreRelease64 is StoreRelease32 for a 64-bit word.
func StoreRelease64(w *atomic.Uint64, v uint64) { *(*uint64)(unsafe.Pointer(w)) = v }
