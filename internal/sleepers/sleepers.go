package sleepers

import (
	"sync/atomic"

	"github.com/shmlock/shmlock/internal/futex"
)

// The bits of a sleepers word (see the package documentation).
const (
	CountMask   uint32 = 1<<16 - 1
	EpochShift         = 16
	EpochMask   uint32 = 0xff << EpochShift
	FutileShift        = 24
	FutileMask  uint32 = 0x7f << FutileShift
	FutileMax          = FutileMask >> FutileShift
	WakePending uint32 = 1 << 31
)

// Count is the number of registered sleepers in word value v.
func Count(v uint32) uint32 { return v & CountMask }

// A Ticket is a sleeper's registration: the epoch of the word when it
// registered. Unregister takes the sleeper off the count only if no drop
// has happened since (see the package documentation).
type Ticket uint32

// Register records one more sleeper in w and returns its ticket.
func Register(w *atomic.Uint32) Ticket { return RegisterIn(w, EpochMask) }

// RegisterIn is Register for a word whose count (from bit 0 up to its
// epoch) and epoch (the bits epoch) share it with flags of the caller's
// (upgrade's Waiters word).
//
// A full count takes no more: one more would carry into the epoch, which
// would move on as at a drop while the count read zero, so that wakes
// skipped the sleeper (and, from the last epoch, into the bits above it,
// upgrade's unique-gate flags). A count that full is sleepers killed while
// registered, kept from a drop by live ones that unregister in between;
// the sleeper that finds it so is counted all the same in effect, for the
// count stays far from zero, and takes one off when it unregisters.
func RegisterIn(w *atomic.Uint32, epoch uint32) Ticket {
	full := epoch&-epoch - 1 // the count's bits: every bit below the epoch's
	for {
		v := w.Load()
		if v&full == full {
			return Ticket(v & epoch)
		}
		if w.CompareAndSwap(v, v+1) {
			return Ticket((v + 1) & epoch)
		}
	}
}

// Unregister takes the sleeper of ticket t off w, unless its registration
// was dropped since (the epoch moved on), and clears wake-pending and the
// futile count either way: whoever returns from the kernel, woken or not,
// clears the bit, and shows that registered sleepers are alive.
func Unregister(w *atomic.Uint32, t Ticket) { UnregisterIn(w, CountMask, EpochMask, t) }

// UnregisterIn is Unregister for a word whose count has the bits count
// (from bit 0) and its epoch the bits epoch, both below FutileShift, and
// whose other bits below the futile count are flags of the caller's, which
// it keeps (upgrade's Waiters word keeps its unique-gate flags there; it
// has no wake-pending bit, which is cleared all the same). It never takes
// the count below zero.
func UnregisterIn(w *atomic.Uint32, count, epoch uint32, t Ticket) {
	for {
		v := w.Load()
		n := v & count
		if n > 0 && Ticket(v&epoch) == t {
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
		futile(w, CountMask, EpochMask, WakePending)
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
		futile(w, CountMask, EpochMask, 0)
		return false
	}
	return true
}

// FutileIn counts a wake of the sleepers counted in the bits count of w,
// with their epoch in the bits epoch (see UnregisterIn), that found nobody
// in the kernel.
func FutileIn(w *atomic.Uint32, count, epoch uint32) { futile(w, count, epoch, 0) }

// futile counts a wake that found nobody in the kernel, clearing the bits
// in clear too, and drops the count (the bits count) at the FutileMax-th
// such wake in a row; the drop moves the epoch (the bits epoch) on, so that
// the dropped registrations are not taken off the count of later ones.
func futile(w *atomic.Uint32, count, epoch, clear uint32) {
	for {
		v := w.Load()
		next := v&^clear + 1<<FutileShift
		switch {
		case v&count == 0:
			next = v &^ (clear | FutileMask)
		case next&FutileMask == FutileMask:
			next = v &^ (clear | FutileMask | count)
			next = next&^epoch | (v+epoch&-epoch)&epoch // epoch&-epoch: its lowest bit
		}
		if w.CompareAndSwap(v, next) {
			return
		}
	}
}
