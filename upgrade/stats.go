package upgrade

import (
	"time"

	"github.com/shmlock/shmlock/internal/mono"
)

// Contention counters (layout.LockStats): only slow paths touch them. An
// acquisition that misses its first try notes when (beginWait, at the
// start of every wait: the first one counts) and records its wait as it
// returns (endWait, on the paths that waited). The start lives in the
// handle, not on the stack, because the waits are deep in helpers shared
// by every kind of acquisition; a handle is used by one holder at a time,
// and the word is atomic only so that misuse stays memory-safe.

// beginWait notes that the current acquisition did not get the lock at
// once, unless an earlier wait of it did already.
func (m *Mutex) beginWait() {
	if m.waitStart.Load() == 0 {
		m.waitStart.Store(mono.Now())
	}
}

// endWait records the wait of the acquisition that returns err, if it
// waited: a grant, or a give-up (timeout, cancellation, close) if err is
// not nil.
func (m *Mutex) endWait(err error) error {
	if start := m.waitStart.Load(); start != 0 {
		m.waitStart.Store(0)
		m.stats.RecordWait(time.Duration(mono.Now()-start), err != nil)
	}
	return err
}
