package upgrade

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/shmlock/shmlock/internal/futex"
)

// gate is one of the two futex gates with its unit in the Waiters word.
type gate struct {
	word *atomic.Uint32
	unit uint32
}

func (m *Mutex) sharedGate() gate { return gate{&m.e.SharedGate, waitersShared} }
func (m *Mutex) uniqueGate() gate { return gate{&m.e.UniqueGate, waitersUnique} }

// wait returns once ready reports true (the caller then tries again, and
// may well come back), or once a liveness slice has passed without a wake
// (slice true: the caller should look for dead holders), or with ctx's
// error, or ErrWouldBlock when deadline passed.
func (m *Mutex) wait(ctx context.Context, g gate, ready func() bool) (slice bool, err error) {
	for i := range spinLoads + spinYields {
		if ready() {
			return false, nil
		}
		if i >= spinLoads {
			runtime.Gosched()
		}
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if ctx.Done() != nil {
		// A sleeper cannot watch a channel: cancellation wakes the gate,
		// and the other sleepers on it sleep again.
		stop := context.AfterFunc(ctx, func() { g.word.Add(1); _, _ = futex.WakeAll(g.word) })
		defer stop()
	}
	sleep := livenessInterval
	if d, ok := ctx.Deadline(); ok {
		sleep = min(sleep, max(time.Until(d), time.Microsecond))
	}
	m.e.Waiters.Add(g.unit)
	seq := g.word.Load()
	if ready() {
		m.e.Waiters.Add(-g.unit)
		return false, nil
	}
	err = futex.Wait(g.word, seq, sleep)
	m.e.Waiters.Add(-g.unit)
	if cerr := ctx.Err(); cerr != nil {
		return false, cerr
	}
	return errors.Is(err, futex.ErrTimeout), nil
}

// wake wakes every sleeper of g, if it has any. The caller has changed the
// state those sleepers wait on.
func (m *Mutex) wake(g gate) {
	if (m.e.Waiters.Load()/g.unit)&waitersMask == 0 {
		return
	}
	g.word.Add(1)
	_, _ = futex.WakeAll(g.word)
}

// readersZero reports whether no shared hold is recorded.
func (m *Mutex) readersZero() bool {
	for _, r := range m.readers {
		if r.Count.Load() != 0 {
			return false
		}
	}
	return true
}

// clearDeadReaders drops the records of dead processes: CAS the owner to
// this process first, so a live process that took the record over
// meanwhile keeps it, then zero the count, then free the record.
func (m *Mutex) clearDeadReaders() {
	for _, r := range m.readers {
		if r.Count.Load() == 0 {
			continue
		}
		if o := r.Owner.Load(); o != 0 && !m.alive(o) && r.Owner.CompareAndSwap(o, m.pid) {
			r.Count.Store(0)
			r.Owner.Store(0)
			m.repairs.Add(1)
		}
	}
}

// releaseDeadWriter releases the writer's lock if its recorded holder is
// dead, and reports whether it did. It takes the Writer word over first,
// so of several repairers exactly one proceeds.
func (m *Mutex) releaseDeadWriter() bool {
	o := m.e.Writer.Load()
	if o == 0 || m.alive(o) || !m.e.Writer.CompareAndSwap(o, m.pid) {
		return false
	}
	m.e.WriterTID.Store(m.tid)
	m.clearWriteBit()
	m.releaseWriterWord()
	m.repairs.Add(1)
	m.wake(m.sharedGate())
	m.wake(m.uniqueGate())
	return true
}

// clearWriteBit clears a writer's stateWrite. Only stateWrite without
// stateUpgrade is the writer's; with stateUpgrade it belongs to the upgrade
// holder, and stateWrite cannot appear without stateUpgrade while the
// caller holds the Writer word, so a CAS of what was read is exact.
func (m *Mutex) clearWriteBit() {
	for {
		s := m.e.State.Load()
		if s&stateWrite == 0 || s&stateUpgrade != 0 || m.e.State.CompareAndSwap(s, s&^stateWrite) {
			return
		}
	}
}

// releaseDeadUpgrader is releaseDeadWriter for the upgrade holder, whose
// stateUpgrade, statePending and stateWrite (if it had upgraded) go. unique
// reports that the dead one held the unique lock: the data may be
// half-updated.
func (m *Mutex) releaseDeadUpgrader() (released, unique bool) {
	o := m.e.Upgrader.Load()
	if o == 0 || m.alive(o) || !m.e.Upgrader.CompareAndSwap(o, m.pid) {
		return false, false
	}
	m.e.UpgraderTID.Store(m.tid)
	unique = m.clearUpgradeBits()&stateWrite != 0
	m.releaseUpgraderWord()
	m.repairs.Add(1)
	m.wake(m.sharedGate())
	m.wake(m.uniqueGate())
	return true, unique
}

// clearUpgradeBits clears the upgrade holder's bits and returns the state
// it found. While stateUpgrade is set nobody but the Upgrader word's holder
// (the caller) changes the state; while it is clear, stateWrite is a
// writer's and is left alone.
func (m *Mutex) clearUpgradeBits() uint32 {
	for {
		s := m.e.State.Load()
		if s&stateUpgrade == 0 {
			return 0
		}
		if m.e.State.CompareAndSwap(s, s&^(stateUpgrade|statePending|stateWrite)) {
			return s
		}
	}
}

// releaseWriterWord ends the caller's hold of the Writer word: holder id
// first, then the generation, then the word, so anyone who sees the word
// free sees the rest reset.
func (m *Mutex) releaseWriterWord() {
	m.e.WriterTID.Store(0)
	m.e.Generation.Add(1)
	m.e.Writer.Store(0)
}

func (m *Mutex) releaseUpgraderWord() {
	m.e.UpgraderTID.Store(0)
	m.e.Generation.Add(1)
	m.e.Upgrader.Store(0)
}

// repairBlockers releases whichever dead holder the state blames for
// blocking readers.
func (m *Mutex) repairBlockers() {
	s := m.e.State.Load()
	switch {
	case s&stateUpgrade != 0:
		m.releaseDeadUpgrader()
	case s&stateWrite != 0:
		m.releaseDeadWriter()
	}
}
