package upgrade

import (
	"context"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// LockShared takes a shared hold, waiting while a writer or a pending
// upgrade blocks readers. A handle's first shared hold claims it a reader
// record (taking over one of a dead process if none is free): with every
// record in use by live handles it fails with ErrTooManyReaders, without
// waiting for one (size the table with layout.Options.UpgradeReaders).
func (m *Mutex) LockShared() error {
	if m.lockSharedFast() {
		return nil
	}
	return m.endWait(m.lockSharedSlow(context.Background(), false))
}

// TryLockShared takes a shared hold only if that needs no waiting;
// ErrWouldBlock otherwise.
func (m *Mutex) TryLockShared() error { return m.lockSharedSlow(context.Background(), true) }

// LockSharedContext is LockShared, giving up when ctx is done: it then
// returns ctx.Err() and holds nothing more than before. A context already
// done fails at once.
func (m *Mutex) LockSharedContext(ctx context.Context) error {
	if ctx.Err() == nil && m.lockSharedFast() {
		return nil
	}
	return m.endWait(m.lockSharedSlow(ctx, false))
}

// lockSharedFast takes a shared hold if the handle's record exists (so
// the handle is not closed: Close drops it), its segment is open, and
// nothing blocks readers; otherwise it changes nothing. Locker.RLock has
// a copy.
func (m *Mutex) lockSharedFast() bool {
	if r := m.rec.Load(); r != nil && !m.segClosed() {
		n := r.Count.Add(1)
		if grantable(n) && !readersBlocked(m.e) {
			m.raceAcquireShared()
			return true
		}
		m.backOff(r, n)
	}
	return false
}

func (m *Mutex) lockSharedSlow(ctx context.Context, try bool) error {
	if err := m.checkOpen(ctx); err != nil {
		return err
	}
	if m.holdsWriter() || m.holdsUpgrader() && m.e.State.Load()&stateWrite != 0 {
		return ErrHeld // it would wait for itself
	}
	r, err := m.record()
	if err != nil {
		return err
	}
	waited := false
	var lv liveness
	for {
		var n uint32
		if !waited {
			n = r.Count.Add(1)
		} else if n, err = m.countAfterWait(r); err != nil {
			return err
		}
		if !grantable(n) {
			m.backOff(r, n)
			return ErrOverflow
		}
		if !readersBlocked(m.e) {
			if waited && m.segClosed() {
				m.backOff(r, n) // see writerGranted
				return shm.ErrClosed
			}
			m.raceAcquireShared()
			return nil
		}
		m.backOff(r, n)
		if try {
			return ErrWouldBlock
		}
		waited = true
		for {
			slice, err := m.wait(ctx, m.sharedGate(), nil, &lv, func() bool { return !readersBlocked(m.e) })
			if err != nil {
				return err
			}
			if !slice {
				break
			}
			m.repairBlockers()
		}
	}
}

// countAfterWait counts a shared hold in the handle's record r after a
// wait, under recMu, unless the handle was closed meanwhile (ErrClosed):
// it held nothing then, so Close freed r, and a hold counted there would
// be ownerless, found by no release (the handle has no record any more)
// and cleared by no repair (no dead process owns it), and every writer
// would wait for it for ever. Close checks the count under recMu, so once
// this has counted the hold it refuses (ErrHeld). Only after a wait: a
// Close that lands between the first count and the handle's record()
// races with the acquisition, as it does with the fast path.
func (m *Mutex) countAfterWait(r *layout.ReaderRecord) (uint32, error) {
	m.recMu.Lock()
	defer m.recMu.Unlock()
	if m.closed.Load() {
		return 0, ErrClosed
	}
	return r.Count.Add(1), nil
}

// grantable reports whether a record whose count the hold just raised to
// n may grant it: n in 1..MaxShared. 0 is a count that wrapped: a damaged
// record said 2^32-1, and a grant there would count nothing its release
// could find (FuzzEntry found it).
func grantable(n uint32) bool { return n-1 < MaxShared }

// backOff takes back a shared hold that was counted (n: the count its add
// returned) but not granted: if that empties the record while a writer or
// an upgrade drains readers, this may have been the last one it waits for.
// (A writer with writerUnique does not wait: see state.go.) A granted
// count is taken back as UnlockShared does, never below 0: ForceUnlock may
// have dropped the record's count since the add, and a decrement would
// leave 2^32-1 holds of a live process that writers wait for forever. A
// count that was not grantable (a damaged record) is put back as it was.
func (m *Mutex) backOff(r *layout.ReaderRecord, n uint32) {
	if !grantable(n) {
		r.Count.Add(^uint32(0))
		return
	}
	m.dropShared(r)
}

// dropShared takes one hold off r's count, never below 0 (false if it was
// 0 already), and wakes a writer or an upgrade that drains readers if that
// emptied the record: it may have been the last one it waits for.
func (m *Mutex) dropShared(r *layout.ReaderRecord) bool {
	for {
		n := r.Count.Load()
		if n == 0 {
			return false
		}
		if r.Count.CompareAndSwap(n, n-1) {
			if n == 1 && m.e.State.Load()&blockReaders != 0 {
				m.wake(m.uniqueGate())
			}
			return true
		}
	}
}

// UnlockShared releases one shared hold of the handle, also after the
// segment's Close; ErrNotHeld if it has none. Locker.RUnlock has a copy of
// its first round.
func (m *Mutex) UnlockShared() error {
	r := m.rec.Load()
	if r == nil {
		return ErrNotHeld
	}
	if r.Count.Load() == 0 {
		return ErrNotHeld
	}
	m.raceReleaseShared() // before the CAS that may let a writer in
	if !m.dropShared(r) {
		return ErrNotHeld
	}
	return nil
}
