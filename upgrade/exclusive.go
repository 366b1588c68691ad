package upgrade

import (
	"context"
	"time"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// Lock takes the unique (write) lock, waiting for the writers' mutex, for
// the upgrade lock to be released and for readers to drain. If the
// previous writer died, its lock is taken over and Reclaimed reports it.
// ErrHeld if the handle holds the lock in any mode already.
func (m *Mutex) Lock() error { return m.lock(context.Background()) }

// TryLock takes the unique lock only if that needs no waiting;
// ErrWouldBlock otherwise. It never takes over a dead holder's lock.
func (m *Mutex) TryLock() error { return m.lockSlow(context.Background(), true) }

// LockContext is Lock, giving up when ctx is done: it then returns
// ctx.Err() and the lock is as it was. A context already done fails at
// once, even if the lock is free.
func (m *Mutex) LockContext(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.lock(ctx)
}

// lock is Lock and LockContext once ctx is known not to be done (the
// check costs Lock a nanosecond for nothing).
func (m *Mutex) lock(ctx context.Context) error {
	// Fast path: nobody holds or wants anything: the unique lock in one
	// CAS, writerUnique (see state.go). (Locker.Lock has a copy.)
	e := m.e // as in Unlock
	if m.fastPathOpen() && e.Writer.CompareAndSwap(0, m.pid|writerUnique) {
		if s := e.State.Load(); s&stateLocked == 0 && m.readersZero() {
			// Granted: the holder id goes in now, not with the word (see
			// "Granted holds" in state.go).
			memview.StoreOwned(&e.WriterTID, m.tid)
			m.raceAcquireUnique()
			m.setReclaimed(s != 0)
			return nil
		}
		return m.lockAfterWriterWord(ctx)
	}
	return m.endWait(m.lockSlow(ctx, false))
}

// stepBack turns a unique hold in its writerUnique form, which the fast
// path has just taken but may not keep (a lock bit is set, or readers are
// counted), into a hold of the Writer word alone; the caller goes on to
// stateWrite. Readers that went to sleep on the bit are woken.
func (m *Mutex) stepBack() {
	m.e.Writer.And(^writerUnique) // waiting writers may add writerHungry meanwhile
	m.wake(m.sharedGate())
}

// fastPathOpen reports whether Lock may try its fast path: the handle and
// its segment are open and the handle holds no shared lock (which Lock
// refuses, ErrHeld, on its slow path).
func (m *Mutex) fastPathOpen() bool {
	return !m.closed.Load() && !m.segClosed() && m.sharedHolds() == 0
}

// lockAfterWriterWord is lock's way on when its fast path took the Writer
// word with writerUnique and found a lock bit set (which may be the
// handle's own upgrade lock) or readers holding shared locks. Readers on a
// CPU leave within a few loads, and the bit keeps new ones out (as
// stateWrite does in finishLock's first round): so with no lock bit the
// writer keeps the bit for spinLoads checks of the records before it steps
// back. (Stepping back at once lets new readers in before stateWrite goes
// up, which the former protocol never did; alternated rw90 runs with 2
// processes could not tell the two apart on the far-placement host,
// 15.8M and 16.1M ops/s, against 16.7M for the former protocol.) No
// upgrade seeker can set its bit meanwhile: it would see writerUnique and
// step back (Dekker's pair, state.go).
func (m *Mutex) lockAfterWriterWord(ctx context.Context) error {
	if m.e.State.Load()&stateLocked == 0 {
		for range spinLoads {
			if m.readersZero() {
				memview.StoreOwned(&m.e.WriterTID, m.tid) // granted
				m.raceAcquireUnique()
				m.setReclaimed(m.e.State.Load()&stateInconsistent != 0)
				return nil
			}
		}
	}
	m.stepBack()
	if m.holdsUpgrader() {
		m.abandonWriter()
		return ErrHeld
	}
	return m.endWait(m.finishLock(ctx, false, false, false))
}

func (m *Mutex) lockSlow(ctx context.Context, try bool) error {
	if err := m.checkFree(ctx); err != nil {
		return err
	}
	reclaimed, waited, err := m.acquireWriterWord(ctx, try)
	if err != nil {
		return err
	}
	return m.finishLock(ctx, try, reclaimed, waited)
}

// finishLock is Lock once the Writer word is the caller's: set stateWrite
// when the upgrade lock is free, then wait for readers to drain. On
// failure it undoes both. waited: the caller waited for the Writer word
// (see writerGranted).
//
// Readers still holding the lock get a grace period (softDrain). Readers
// on a CPU leave within a few loads of the drain check; if they have not,
// one of them is probably off the CPU (processes outnumber cores), and
// stateWrite would stop every other reader for as long as that one is.
// So the writer clears stateWrite again and, yielding, waits for a moment
// with no reader while readers go on; then it tries again. Once the grace
// period is over, stateWrite stays and keeps new readers out until the
// readers there are have left, so a stream of readers cannot starve the
// writer.
func (m *Mutex) finishLock(ctx context.Context, try, reclaimed, waited bool) error {
	var w closeWatch
	err := m.finishLockWatched(ctx, try, reclaimed, waited, &w)
	w.done()
	return err
}

func (m *Mutex) finishLockWatched(ctx context.Context, try, reclaimed, waited bool, w *closeWatch) error {
	var graceEnd time.Time // zero until the grace period begins
	for {
		if err := m.setWriteBit(ctx, try, &reclaimed, &waited, w); err != nil {
			return err
		}
		for range spinLoads {
			if m.readersZero() {
				return m.writerGranted(reclaimed, waited)
			}
			if try {
				m.abandonWriter()
				return ErrWouldBlock
			}
		}
		now := time.Now()
		if graceEnd.IsZero() {
			graceEnd = now.Add(softDrain)
		}
		if !now.Before(graceEnd) {
			break
		}
		m.beginWait()
		m.timeWait() // the grace period yields
		m.clearWriteBit()
		m.wake(m.sharedGate())
		waited = true
		// The grace period yields with the Writer word held: see
		// closeWatch.
		if err := m.watch(w); err != nil {
			m.releaseWriterWord()
			m.wake(m.sharedGate())
			return err
		}
		for !m.readersZero() && time.Now().Before(graceEnd) {
			if err := ctx.Err(); err != nil {
				m.releaseWriterWord()
				m.wake(m.sharedGate())
				return err
			}
			yield()
		}
	}
	if err := m.drainReaders(ctx, uniqueWriter, w); err != nil {
		m.abandonWriter()
		return err
	}
	return m.writerGranted(reclaimed, true)
}

// writerGranted ends an acquisition of the unique lock by Lock: it records
// whether the hold was taken from the dead, by this acquisition, or by
// anyone since a unique holder last marked the data consistent. One that waited (for the Writer word,
// the upgrade holder or readers) checks the segment once more, and gives
// the lock back if it was closed: its wait checked it last before the lock
// was taken, and a Close during a wait ends the acquisition with
// ErrClosed. (One that did not wait is as exposed to a racing Close as the
// fast path, which checks once before it begins: it succeeds, and its hold
// is real, released by Unlock as any other.)
func (m *Mutex) writerGranted(reclaimed, waited bool) error {
	if waited && m.segClosed() {
		m.abandonWriter()
		return shm.ErrClosed
	}
	memview.StoreOwned(&m.e.WriterTID, m.tid) // granted (state.go)
	m.raceAcquireUnique()
	if m.e.State.Load()&stateInconsistent != 0 {
		reclaimed = true
	}
	m.setReclaimed(reclaimed)
	return nil
}

// Inconsistent reports whether the data the mutex protects may be
// half-updated: a holder of the unique lock died (its hold was freed by a
// waiter, a reader or Reclaim) and no unique holder has called
// MarkConsistent since. Every unique acquisition meanwhile reports
// Reclaimed too.
func (m *Mutex) Inconsistent() bool { return m.e.State.Load()&stateInconsistent != 0 }

// MarkConsistent says that the data the mutex protects is whole again (the
// holder repaired it, or found nothing to repair): later holders are no
// longer told. The handle must hold the unique lock (Lock, or an upgrade
// to it); ErrNotHeld otherwise. Like the releases, it works after the
// segment's Close, so a holder that repaired the data as it unwinds says
// so (and so do lockmgr's and spinlock's).
func (m *Mutex) MarkConsistent() error {
	s, w := m.e.State.Load(), m.e.Writer.Load()
	unique := m.holdsWriterWord(w) && writerHoldsUnique(s, w) ||
		m.holdsUpgrader() && s&(stateWrite|stateUpgrade) == stateWrite|stateUpgrade
	if !unique {
		return ErrNotHeld
	}
	if s&stateInconsistent != 0 {
		m.e.State.And(^stateInconsistent) // others set it only for dead holders
	}
	return nil
}

// drainReaders waits for every shared hold to go, clearing the records of
// dead processes at each liveness slice. The caller has set the state bit
// that keeps new readers out, and undoes it if this fails; role is the
// lock it holds (uniqueWriter or uniqueUpgrader).
func (m *Mutex) drainReaders(ctx context.Context, role uint32, w *closeWatch) error {
	var lv liveness
	for !m.readersZero() {
		slice, err := m.wait(ctx, m.uniqueGateAs(role), w, &lv, m.readersZero)
		if err != nil {
			return err
		}
		if slice {
			m.clearDeadReaders()
		}
	}
	return nil
}

// setWriteBit sets stateWrite for the holder of the Writer word once the
// upgrade lock is free (or finds it set: by itself, or by a dead writer it
// took over), releasing a dead upgrade holder's lock if it must.
func (m *Mutex) setWriteBit(ctx context.Context, try bool, reclaimed, waited *bool, w *closeWatch) error {
	var lv liveness
	for {
		s := m.e.State.Load()
		if s&stateUpgrade == 0 {
			if s&stateWrite != 0 || m.e.State.CompareAndSwap(s, s|stateWrite) {
				return nil
			}
			continue
		}
		if try {
			m.abandonWriter()
			return ErrWouldBlock
		}
		*waited = true
		slice, err := m.wait(ctx, m.uniqueGateAs(uniqueWriter), w, &lv, func() bool { return m.e.State.Load()&stateUpgrade == 0 })
		if err != nil {
			m.abandonWriter()
			return err
		}
		if slice {
			if _, unique := m.releaseDeadUpgrader(); unique {
				*reclaimed = true // it died holding the unique lock
			}
		}
	}
}

// abandonWriter undoes a Lock that could not finish.
func (m *Mutex) abandonWriter() {
	m.clearWriteBit()
	m.releaseWriterWord()
	m.wake(m.sharedGate())
	m.wake(m.uniqueGate())
}

// checkOpen is the entry check of every acquisition: a context already
// done fails at once, and so does a closed segment or handle.
func (m *Mutex) checkOpen(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.segClosed() {
		return shm.ErrClosed
	}
	if m.closed.Load() {
		return ErrClosed
	}
	return nil
}

// checkFree is Lock's entry check: checkOpen, and a handle that holds the
// lock in any mode would wait for itself.
func (m *Mutex) checkFree(ctx context.Context) error {
	if err := m.checkOpen(ctx); err != nil {
		return err
	}
	if m.holdsWriter() || m.holdsUpgrader() || m.sharedHolds() != 0 {
		return ErrHeld
	}
	return nil
}

// Unlock releases the unique lock taken by Lock, also after the segment's
// Close (see shm.Segment.Close). ErrNotHeld if the handle
// holds no unique lock (an upgrade holder's unique lock is left with
// UniqueToUpgrade or UniqueToShared), ErrNotOwner if another handle holds
// it.
func (m *Mutex) Unlock() error {
	w := m.e.Writer.Load()
	if !m.holdsWriterWord(w) {
		if writerID(w) != 0 && writerHoldsUnique(m.e.State.Load(), w) {
			return ErrNotOwner
		}
		return ErrNotHeld
	}
	// Locker.Unlock has a copy of what follows.
	m.setReclaimed(false)
	m.raceReleaseUnique()
	e := m.e // one load: the compiler reloads m.e after every atomic
	m.endUniqueHold(e, w)
	// releaseWriterWord's last two steps (endUniqueHold did its first),
	// written out: it is too big to inline, and the call measured 8% of an
	// uncontended Lock+Unlock.
	m.freeWriterWord(e, w)
	m.wakeWaitingWriter(e)
	m.wake(m.sharedGate()) // UniqueGate has no sleeper: see state.go
	return nil
}

// endUniqueHold ends the caller's unique hold up to the Writer word w
// (as loaded), which stays the caller's: the holder id goes first (so a
// ForceUnlock that meets this release sees it, see force.go), then the
// generation moves on, then stateWrite goes (unless the hold is
// writerUnique, which the Writer word's release clears). While the hold is
// ours nobody else changes the generation, nor the state word if the hold
// is stateWrite (see state.go), so these are plain and release stores, no
// locked instruction; the Writer word's CAS that follows (freeWriterWord)
// publishes them and is the full barrier before the loads of the
// sleepers. Small enough to inline into both Unlocks (Mutex's and
// Locker's).
func (m *Mutex) endUniqueHold(e *layout.UpgradeEntry, w uint64) {
	memview.StoreOwned(&e.WriterTID, 0) // published by the Writer CAS
	m.bumpGeneration()
	if w&writerUnique == 0 {
		memview.StoreRelease32(&e.State, e.State.Load()&^stateWrite)
	}
}

// LockUpgrade takes the upgrade lock: it waits for the upgrade lock to be
// free and for a writer (one holding or waiting for the unique lock) to
// finish; readers do not block it. If the previous upgrade holder died,
// its lock is taken over (downgraded to the upgrade lock, if it had
// upgraded) and Reclaimed reports it.
func (m *Mutex) LockUpgrade() error { return m.lockUpgrade(context.Background(), false) }

// TryLockUpgrade takes the upgrade lock only if that needs no waiting;
// ErrWouldBlock otherwise.
func (m *Mutex) TryLockUpgrade() error { return m.lockUpgrade(context.Background(), true) }

// LockUpgradeContext is LockUpgrade, giving up when ctx is done.
func (m *Mutex) LockUpgradeContext(ctx context.Context) error { return m.lockUpgrade(ctx, false) }

func (m *Mutex) lockUpgrade(ctx context.Context, try bool) error {
	if err := m.checkOpen(ctx); err != nil {
		return err
	}
	if m.holdsWriter() || m.holdsUpgrader() {
		return ErrHeld
	}
	reclaimed, waited := false, false
	var w closeWatch // for the second loop, which holds the Upgrader word
	var lv liveness
	for !m.e.Upgrader.CompareAndSwap(0, m.pid) {
		if try {
			return ErrWouldBlock
		}
		waited = true
		slice, err := m.wait(ctx, m.sharedGate(), nil, &lv, func() bool { return m.e.Upgrader.Load() == 0 })
		if err != nil {
			return m.endWait(err)
		}
		if slice && m.takeOverUpgrader(m.e.Upgrader.Load()) {
			reclaimed = true
			break
		}
	}
	lv = liveness{}
	for {
		s := m.e.State.Load()
		if s&stateUpgrade != 0 {
			// Left by the dead holder we took over: keep the upgrade lock,
			// drop its pending upgrade or unique hold (a unique hold is
			// recorded for the next unique holder).
			next := s &^ (statePending | stateWrite)
			if s&stateWrite != 0 {
				next |= stateInconsistent
			}
			if !m.e.State.CompareAndSwap(s, next) {
				continue
			}
			if s&(statePending|stateWrite) != 0 {
				m.wake(m.sharedGate())
			}
			if m.upgradeBitStands() {
				break
			}
		} else if s&stateWrite == 0 && m.writerWordFree() {
			// A writer that holds the writers' mutex goes first (fairness:
			// a stream of upgraders would starve it otherwise).
			if !m.e.State.CompareAndSwap(s, s|stateUpgrade) {
				continue
			}
			if m.upgradeBitStands() {
				break
			}
		}
		if try {
			m.abandonUpgrader()
			return ErrWouldBlock
		}
		waited = true
		slice, err := m.wait(ctx, m.sharedGate(), &w, &lv, func() bool {
			return m.e.State.Load()&stateWrite == 0 && m.writerWordFree()
		})
		if err != nil {
			m.abandonUpgrader()
			w.done()
			return m.endWait(err)
		}
		if slice {
			m.releaseDeadWriter()
		}
	}
	if waited && m.segClosed() {
		// As in writerGranted.
		m.clearUpgradeBits()
		m.releaseUpgraderWord()
		m.wake(m.sharedGate())
		m.wake(m.uniqueGate())
		w.done()
		return m.endWait(shm.ErrClosed)
	}
	w.done()
	memview.StoreOwned(&m.e.UpgraderTID, m.tid) // granted (state.go)
	m.raceAcquireUpgrade()
	m.setReclaimed(reclaimed)
	if waited { // only here: the uncontended path has no wait to record
		return m.endWait(nil)
	}
	return nil
}

// upgradeBitStands is the upgrade seeker's half of Dekker's pair with
// Lock's fast path (see state.go): after its CAS of stateUpgrade it loads
// the Writer word, and if a writer has taken the unique lock in its
// writerUnique form meanwhile, it clears stateUpgrade again, wakes a
// writer that may have gone to sleep on it, and reports false: the
// seeker waits for the writer. It keeps the Upgrader word.
func (m *Mutex) upgradeBitStands() bool {
	if m.e.Writer.Load()&writerUnique == 0 {
		return true
	}
	m.e.State.And(^stateUpgrade)
	m.wake(m.uniqueGate())
	return false
}

// writerWordFree reports whether no writer holds or waits for the unique
// lock: the Writer word is 0, or a stale handoff, which it frees.
func (m *Mutex) writerWordFree() bool {
	o := m.e.Writer.Load()
	if o == 0 {
		return true
	}
	return isHandoff(o) && handoffExpired(o) && (m.e.Writer.CompareAndSwap(o, 0) || m.e.Writer.Load() == 0)
}

// abandonUpgrader undoes a LockUpgrade that holds the Upgrader word but
// not stateUpgrade.
func (m *Mutex) abandonUpgrader() {
	m.releaseUpgraderWord()
	m.wake(m.sharedGate())
}

// UnlockUpgrade releases the upgrade lock, also after the segment's Close.
// ErrNotHeld if the handle holds
// no upgrade lock, or holds it upgraded (leave the unique lock first),
// ErrNotOwner if another handle holds it.
func (m *Mutex) UnlockUpgrade() error {
	s, err := m.upgraderState()
	if err != nil {
		return err
	}
	if s&stateWrite != 0 {
		return ErrNotHeld
	}
	m.setReclaimed(false)
	m.raceReleaseUpgrade()
	// As in Unlock: the holder id goes first; the word is ours while
	// stateUpgrade is; the Upgrader word's store is the full barrier.
	memview.StoreOwned(&m.e.UpgraderTID, 0)
	m.bumpGeneration()
	memview.StoreRelease32(&m.e.State, m.e.State.Load()&^(stateUpgrade|statePending))
	m.e.Upgrader.Store(0)
	m.wake(m.sharedGate())
	m.wake(m.uniqueGate())
	return nil
}

// checkUpgrader checks that the segment is open and the handle holds the
// upgrade lock (the Upgrader word and stateUpgrade), and returns the state
// word it read: while stateUpgrade is the handle's, only the handle
// changes it (but for stateInconsistent, see state.go).
func (m *Mutex) checkUpgrader() (uint32, error) {
	if m.segClosed() {
		return 0, shm.ErrClosed
	}
	return m.upgraderState()
}

// upgraderState is checkUpgrader for a release, which works after the
// segment's Close too.
func (m *Mutex) upgraderState() (uint32, error) {
	if m.holdsUpgrader() {
		if s := m.e.State.Load(); s&stateUpgrade != 0 {
			return s, nil
		}
	}
	if m.e.Upgrader.Load() != 0 && m.e.State.Load()&stateUpgrade != 0 {
		return 0, ErrNotOwner
	}
	return 0, ErrNotHeld
}
