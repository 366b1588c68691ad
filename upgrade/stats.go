package upgrade

import (
	"time"

	"github.com/shmlock/shmlock/internal/mono"
)

// Contention counters (layout.LockStats): only slow paths touch them. An
// acquisition that misses its first try notes that it waits (beginWait, at
// the start of every wait: the first one counts), starts the wait's clock
// when it first yields or sleeps (timeWait), and records its wait as it
// returns (endWait, on the paths that waited): a timed wait with its
// duration, one granted while it still spun as such (RecordSpunWait),
// untimed, since two clock reads would cost as much as the short wait.
// The start lives in the handle, not on the stack, because the waits are
// deep in helpers shared by every kind of acquisition; a handle is used by
// one holder at a time, and the word is atomic only so that misuse stays
// memory-safe.
//
// waitStart: 0 when the handle's acquisition has not waited, waitUntimed
// while it has only spun, else CLOCK_MONOTONIC (positive) when it first
// yielded or slept.
const waitUntimed = -1

// beginWait notes that the current acquisition did not get the lock at
// once, unless an earlier wait of it did already.
func (m *Mutex) beginWait() {
	if m.waitStart.Load() == 0 {
		m.waitStart.Store(waitUntimed)
	}
}

// timeWait starts the clock of the current wait as it first leaves the
// CPU, unless it runs already.
func (m *Mutex) timeWait() {
	if m.waitStart.Load() == waitUntimed {
		m.waitStart.Store(mono.Now())
	}
}

// endWait records the wait of the acquisition that returns err, if it
// waited: a grant, or a give-up (timeout, cancellation, close) if err is
// not nil.
func (m *Mutex) endWait(err error) error {
	switch start := m.waitStart.Load(); start {
	case 0:
	case waitUntimed:
		m.waitStart.Store(0)
		if err == nil {
			m.stats.RecordSpunWait()
		} else {
			m.stats.RecordWait(0, true)
		}
	default:
		m.waitStart.Store(0)
		m.stats.RecordWait(time.Duration(mono.Now()-start), err != nil)
	}
	return err
}
