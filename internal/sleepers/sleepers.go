package sleepers

import (
	"sync/atomic"

	"github.com/shmlock/shmlock/internal/futex"
)

// The bits of a sleepers word (see the package documentation).
const (
	CountMask   uint32 = 1<<24 - 1
	FutileShift        = 24
	FutileMask  uint32 = 0x7f << FutileShift
	FutileMax          = FutileMask >> FutileShift
	WakePending uint32 = 1 << 31
)

// Count is the number of registered sleepers in word value v.
func Count(v uint32) uint32 { return v & CountMask }

// Register records one more sleeper in w.
func Register(w *atomic.Uint32) { w.Add(1) }

// Unregister takes one sleeper off w, never below zero (a stale count may
// have been dropped meanwhile), and clears wake-pending and the futile
// count: whoever returns from the kernel, woken or not, clears the bit,
// and shows that registered sleepers are alive.
func Unregister(w *atomic.Uint32) { UnregisterIn(w, CountMask) }

// UnregisterIn is Unregister for a word whose count has only the bits
// count (a subset of CountMask) and whose other bits below the futile
// count are flags of the caller's, which it keeps (upgrade's Waiters word
// keeps its unique-gate flags there; it has no wake-pending bit, which is
// cleared all the same).
func UnregisterIn(w *atomic.Uint32, count uint32) {
	for {
		v := w.Load()
		n := v & count
		if n > 0 {
			n--
		}
		if w.CompareAndSwap(v, v&^(count|FutileMask|WakePending)|n) {
			return
		}
	}
}

// WakeOne wakes one sleeper on gate unless w has none registered or a
// woken one has not run yet. It reports whether the wake found a sleeper
// in the kernel (for the contention counters, layout.LockStats).
func WakeOne(w, gate *atomic.Uint32) bool {
	for {
		v := w.Load()
		if v&CountMask == 0 || v&WakePending != 0 {
			return false
		}
		if w.CompareAndSwap(v, v|WakePending) {
			break
		}
	}
	if n, err := futex.Wake(gate, 1); n == 0 || err != nil {
		// The registered sleepers are not in the kernel yet (they will find
		// the gate changed), or they are dead. Nobody is on the way to
		// clear the bit.
		futile(w, CountMask, WakePending)
		return false
	}
	return true
}

// WakeAll wakes every sleeper on gate if w has any registered. It leaves
// wake-pending alone: that bit belongs to a WakeOne whose woken sleeper
// clears it. It reports whether the wake found a sleeper in the kernel.
func WakeAll(w, gate *atomic.Uint32) bool {
	if w.Load()&CountMask == 0 {
		return false
	}
	if n, err := futex.WakeAll(gate); n == 0 || err != nil {
		futile(w, CountMask, 0)
		return false
	}
	return true
}

// FutileIn counts a wake of the sleepers counted in the bits count of w
// (see UnregisterIn) that found nobody in the kernel.
func FutileIn(w *atomic.Uint32, count uint32) { futile(w, count, 0) }

// futile counts a wake that found nobody in the kernel, clearing the bits
// in clear too, and drops the count (the bits count) at the FutileMax-th
// such wake in a row.
func futile(w *atomic.Uint32, count, clear uint32) {
	for {
		v := w.Load()
		next := v&^clear + 1<<FutileShift
		switch {
		case v&count == 0:
			next = v &^ (clear | FutileMask)
		case next&FutileMask == FutileMask:
			next = v &^ (clear | FutileMask | count)
		}
		if w.CompareAndSwap(v, next) {
			return
		}
	}
}
