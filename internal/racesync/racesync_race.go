//go:build race

package racesync

// unsafe is needed to hash a lock word's address and to hand the race
// runtime the address of its proxy.

import (
	"runtime"
	"unsafe"
)

// Enabled reports whether the race detector is on: code that only
// prepares an annotation (a loop over words to acquire) goes under it.
const Enabled = true

// Acquire tells the race detector that the caller now holds the lock
// whose word is w: what every earlier Release of w published
// happens-before what the caller does next. Call it after the
// compare-and-swap (or the observation) that granted the hold.
func Acquire[T any](w *T) { runtime.RaceAcquire(proxy(unsafe.Pointer(w))) }

// Release tells the race detector that the caller gives up its hold of
// the lock whose word is w: what it did so far happens-before what a
// later Acquire of w follows. Call it before the store that frees the
// word: once the word is free another goroutine may take the lock and
// acquire, and must find this release there. It merges (see the package
// documentation).
func Release[T any](w *T) { runtime.RaceReleaseMerge(proxy(unsafe.Pointer(w))) }

// proxyBits sizes the table of proxies: 4096 words, 32 KiB of Go memory in
// race builds only. Two words far apart share a proxy with a chance of one
// in proxyCount (see the package documentation).
const (
	proxyBits  = 12
	proxyCount = 1 << proxyBits
)

// proxies are the words of Go memory the detector synchronizes on in
// place of the lock words; nothing reads or writes them.
var proxies [proxyCount]uint64

// proxy returns the proxy of the word at p.
func proxy(p unsafe.Pointer) unsafe.Pointer { return unsafe.Pointer(&proxies[slot(uintptr(p))]) }

// slot is the index of the proxy of the word at addr: Fibonacci hashing of
// the address (in 4-byte units: lock words are at least 32-bit aligned),
// whose top bits differ for words near each other.
func slot(addr uintptr) uint64 {
	const golden = 0x9e3779b97f4a7c15 // 2^64 divided by the golden ratio
	return uint64(addr>>2) * golden >> (64 - proxyBits)
}
