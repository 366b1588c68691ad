package upgrade

import "github.com/shmlock/shmlock/internal/racesync"

// The race detector does not see atomics on a segment's words, so the
// mutex tells it its happens-before through internal/racesync, the way
// sync.RWMutex tells it through its two semaphores, with three words of
// the entry standing for what each kind of hold publishes:
//
//   - State: what a unique hold publishes. Every grant (shared, upgrade,
//     unique) acquires it; every end of a unique hold releases it (Unlock,
//     and the downgrades UniqueToUpgrade and UniqueToShared).
//   - Writer: what holds that only read publish (they may still write Go
//     data of their own that a writer later reads). Every end of a shared
//     hold or of an upgrade hold releases it; every unique grant (Lock,
//     UpgradeToUnique) acquires it.
//   - Upgrader: what an upgrade hold publishes to the next, since upgrade
//     holders exclude each other. Upgrade grants acquire it, ends of
//     upgrade holds release it, and unique grants acquire it too.
//
// A grant acquires once it is certain (after the CAS or the drain check
// that completes it, and after the last check that could still give it
// back); an end releases before the store that lets the next holder in.
// Readers never acquire what other readers released: their holds overlap,
// and the detector still checks what they do side by side. Holds ended
// for a holder that did not end them (a dead one, Reclaim, ForceUnlock)
// release nothing: that holder made no release.

// raceAcquireShared is a shared grant.
func (m *Mutex) raceAcquireShared() {
	if racesync.Enabled {
		racesync.Acquire(&m.e.State)
	}
}

// raceReleaseShared is the end of a shared hold.
func (m *Mutex) raceReleaseShared() {
	if racesync.Enabled {
		racesync.Release(&m.e.Writer)
	}
}

// raceAcquireUpgrade is an upgrade grant.
func (m *Mutex) raceAcquireUpgrade() {
	if racesync.Enabled {
		racesync.Acquire(&m.e.State)
		racesync.Acquire(&m.e.Upgrader)
	}
}

// raceReleaseUpgrade is the end of an upgrade hold.
func (m *Mutex) raceReleaseUpgrade() {
	if racesync.Enabled {
		racesync.Release(&m.e.Upgrader)
		racesync.Release(&m.e.Writer)
	}
}

// raceAcquireUnique is a unique grant, by Lock or by UpgradeToUnique.
func (m *Mutex) raceAcquireUnique() {
	if racesync.Enabled {
		racesync.Acquire(&m.e.State)
		racesync.Acquire(&m.e.Writer)
		racesync.Acquire(&m.e.Upgrader)
	}
}

// raceReleaseUnique is the end of a unique hold (which may go on as an
// upgrade or a shared hold).
func (m *Mutex) raceReleaseUnique() {
	if racesync.Enabled {
		racesync.Release(&m.e.State)
	}
}
