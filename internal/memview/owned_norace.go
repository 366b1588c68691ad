//go:build !race

package memview

// unsafe is needed for plain (unfenced) stores to words that other
// goroutines and processes load atomically.

import (
	"sync/atomic"
	"unsafe"
)

// StoreOwned stores v into a word that only the current holder of a lock
// writes (a lock's holder id, generation or recursion count), without the
// full fence of atomic.Store (an XCHG on amd64).
//
// It is correct only where the store is published by a later atomic store
// or CAS of the same goroutine (the lock word's release), which orders it
// for every observer: x86's stores are never reordered with later stores,
// and arm64's atomic stores are store-release. Until then, a concurrent
// atomic load may see the old or the new value, never a torn one (aligned
// 64-bit and 32-bit stores are single instructions where pointers have 64
// bits; where they have 32, a plain 64-bit store is two, and StoreOwned
// stores atomically). Race-detector builds use atomic stores instead, so
// -race still checks every other access.
func StoreOwned(w *atomic.Uint64, v uint64) {
	if unsafe.Sizeof(uintptr(0)) < 8 { // a constant: the branch is compiled away
		w.Store(v)
		return
	}
	*(*uint64)(unsafe.Pointer(w)) = v
}

// StoreOwned32 is StoreOwned for a 32-bit word.
func StoreOwned32(w *atomic.Uint32, v uint32) { *(*uint32)(unsafe.Pointer(w)) = v }
