package upgrade

import (
	"context"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/shm"
)

// UpgradeToUnique turns the handle's upgrade lock into the unique lock: it
// marks the upgrade pending, which keeps new readers out, and waits for the
// readers there are to leave. No writer can get in between: a writer needs
// the upgrade lock free. ErrNotHeld (ErrNotOwner) if the handle does not
// hold the upgrade lock; ErrHeld if it holds it upgraded already, or
// holds shared locks of its own, which it would wait for forever.
func (m *Mutex) UpgradeToUnique() error { return m.upgradeToUnique(context.Background(), false) }

// TryUpgradeToUnique upgrades only if no reader holds the lock;
// ErrWouldBlock otherwise, still holding the upgrade lock.
func (m *Mutex) TryUpgradeToUnique() error { return m.upgradeToUnique(context.Background(), true) }

// UpgradeToUniqueContext is UpgradeToUnique, giving up when ctx is done:
// it then returns ctx.Err(), still holds the upgrade lock, and the upgrade
// is no longer pending.
func (m *Mutex) UpgradeToUniqueContext(ctx context.Context) error {
	return m.upgradeToUnique(ctx, false)
}

func (m *Mutex) upgradeToUnique(ctx context.Context, try bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s, err := m.checkUpgrader()
	if err != nil {
		return err
	}
	if s&stateWrite != 0 || m.sharedHolds() != 0 {
		return ErrHeld
	}
	// While stateUpgrade is ours nobody else changes the state word.
	m.e.State.Or(statePending)
	if !m.readersZero() {
		if try {
			m.cancelPending()
			return ErrWouldBlock
		}
		var w closeWatch
		err := m.drainReaders(ctx, uniqueUpgrader, &w)
		if err == nil && m.segClosed() {
			err = shm.ErrClosed // see writerGranted
		}
		if err != nil {
			m.cancelPending()
			w.done()
			return m.endWait(err)
		}
		defer m.endWait(nil) // after the CAS below: a granted wait
		defer w.done()       // after the CAS below
	}
	for {
		s := m.e.State.Load()
		if s&(stateUpgrade|statePending) != stateUpgrade|statePending || !m.holdsUpgrader() {
			// ForceUnlock freed the upgrade lock while this upgrade waited
			// for readers: setting stateWrite now would make a unique hold
			// of a lock the handle no longer has. If the force came before
			// this upgrade set statePending, the bit stands with no upgrade
			// lock under it, keeping readers out, and nobody else takes it
			// down: this upgrade does.
			if s&(stateUpgrade|statePending) == statePending {
				if !m.e.State.CompareAndSwap(s, s&^statePending) {
					continue
				}
				m.wake(m.sharedGate())
			}
			if _, err := m.upgraderState(); err != nil {
				return err
			}
			return ErrNotHeld
		}
		if m.e.State.CompareAndSwap(s, s&^statePending|stateWrite) {
			m.raceAcquireUnique()
			if s&stateInconsistent != 0 {
				m.setReclaimed(true) // a dead holder's unique hold was freed, and nobody repaired
			}
			return nil
		}
	}
}

// cancelPending withdraws a pending upgrade: readers may come in again.
// Only the caller's: ForceUnlock may have freed its upgrade lock while it
// waited, and another holder's upgrade be pending now, which must keep
// readers out. A bit with no upgrade lock under it (a force that came
// before the caller set it, see upgradeToUnique) goes.
func (m *Mutex) cancelPending() {
	for {
		s := m.e.State.Load()
		if s&statePending == 0 || s&stateUpgrade != 0 && !m.holdsUpgrader() {
			return
		}
		if m.e.State.CompareAndSwap(s, s&^statePending) {
			break
		}
	}
	m.wake(m.sharedGate())
}

// UniqueToUpgrade turns the unique lock into the upgrade lock without
// blocking; readers may come in again. After the segment's Close it still
// undoes an UpgradeToUnique (a release), but a writer's (which takes the
// upgrade lock) returns shm.ErrClosed. From a unique lock taken with Lock
// it needs the upgrade lock to be free (nobody waiting to take it either);
// ErrWouldBlock otherwise, still holding the unique lock.
func (m *Mutex) UniqueToUpgrade() error {
	switch {
	case m.holdsUpgrader() && m.e.State.Load()&(stateUpgrade|stateWrite) == stateUpgrade|stateWrite:
		// Only a release: it works after the segment's Close too.
		m.raceReleaseUnique()
		m.e.State.And(^stateWrite)
		m.wake(m.sharedGate()) // readers; writers still wait for the upgrade lock
		return nil
	case m.segClosed():
		return shm.ErrClosed // a writer's would take the Upgrader word
	case m.holdsWriter():
		// A dead seeker's word (killed between its CAS and stateUpgrade)
		// is nobody waiting: take it over rather than refuse for good.
		if !m.e.Upgrader.CompareAndSwap(0, m.pid) && !m.takeOverUpgrader(m.e.Upgrader.Load()) {
			return ErrWouldBlock
		}
		// The unique hold ends here: its holder id goes first, as in
		// Unlock (a ForceUnlock that meets this downgrade sees it).
		memview.StoreOwned(&m.e.WriterTID, 0)
		// stateWrite (writer's) becomes stateUpgrade in one step, then the
		// writers' mutex goes (with writerUnique, if that was the hold's
		// form: stateWrite is clear then, and readers wait for the bit).
		m.raceReleaseUnique()
		m.bumpGeneration() // the unique hold ends
		for {
			s := m.e.State.Load()
			if m.e.State.CompareAndSwap(s, s&^stateWrite|stateUpgrade) {
				break
			}
		}
		// The upgrade hold is granted now that its bit is set; its holder
		// id says so (see "Granted holds" in state.go).
		memview.StoreOwned(&m.e.UpgraderTID, m.tid)
		m.releaseWriterWord()
		m.wake(m.sharedGate())
		m.wake(m.uniqueGate())
		return nil
	}
	return m.notUnique()
}

// UniqueToShared turns the unique lock (taken with Lock or by an upgrade)
// into one shared hold without blocking. ErrTooManyReaders if the handle
// has no reader record and none is free, still holding the unique lock.
func (m *Mutex) UniqueToShared() error {
	if m.segClosed() {
		return shm.ErrClosed
	}
	writer := m.holdsWriter()
	upgrader := !writer && m.holdsUpgrader() && m.e.State.Load()&(stateUpgrade|stateWrite) == stateUpgrade|stateWrite
	if !writer && !upgrader {
		return m.notUnique()
	}
	r, err := m.record()
	if err != nil {
		return err
	}
	// The shared hold is counted before the exclusive one goes, so no
	// writer can get in between.
	if !grantable(r.Count.Add(1)) {
		r.Count.Add(^uint32(0))
		return ErrOverflow
	}
	// The exclusive hold ends here: its holder id goes first, as in
	// Unlock and UnlockUpgrade.
	if writer {
		memview.StoreOwned(&m.e.WriterTID, 0)
	} else {
		memview.StoreOwned(&m.e.UpgraderTID, 0)
	}
	m.setReclaimed(false)
	m.raceReleaseUnique()
	m.bumpGeneration()
	if writer {
		m.e.State.And(^stateWrite) // none for a writerUnique hold: releaseWriterWord clears that
		m.releaseWriterWord()
	} else {
		m.raceReleaseUpgrade()
		m.e.State.And(^(stateWrite | stateUpgrade | statePending))
		m.releaseUpgraderWord()
	}
	m.wake(m.sharedGate())
	m.wake(m.uniqueGate())
	return nil
}

// notUnique is the error for a downgrade by a handle without the unique
// lock.
func (m *Mutex) notUnique() error {
	if uniqueHeld(m.e.State.Load(), m.e.Writer.Load()) {
		return ErrNotOwner
	}
	return ErrNotHeld
}
