package upgrade

import (
	"context"
	"errors"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/shmlock/shmlock/internal/futex"
	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/internal/spin"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// gate is one of the two futex gates with its bits in the Waiters word:
// a sleeper's registration (waitersShared, a count, or its flag on the
// unique gate), and for a waker, all the gate's sleepers.
type gate struct {
	word *atomic.Uint32
	unit uint32 // a sleeper's registration
	all  uint32 // the bits of every sleeper of the gate
}

// wakeAnyway moves the gate and wakes everyone asleep on it, registered
// or not, for a waiter that must look at something other than the state
// (its context, the segment's Close); the others sleep again.
func wakeAnyway(word *atomic.Uint32) {
	word.Add(1)
	_, _ = futex.WakeAll(word)
}

func (m *Mutex) sharedGate() gate {
	return gate{&m.e.SharedGate, waitersShared, waitersSharedMask}
}

// uniqueGate is UniqueGate for a waker; uniqueGateAs for a sleeper that
// holds the writers' mutex (uniqueWriter) or the upgrade lock
// (uniqueUpgrader).
func (m *Mutex) uniqueGate() gate { return m.uniqueGateAs(0) }

func (m *Mutex) uniqueGateAs(role uint32) gate {
	return gate{&m.e.UniqueGate, role, waitersUnique}
}

// liveness schedules a waiter's checks for dead holders: one every
// livenessInterval of waiting, whether the waiter's sleeps end by timeout
// or by wakes. A waiter woken by other traffic (every writer's Unlock wakes
// the shared gate) would otherwise never time out, and a dead holder it
// waits for would never be taken over while the mutex is busy.
type liveness struct {
	next time.Time // when the next check is due; zero before the first sleep
	// again: the last wait ended with a check, so the next one sleeps
	// without spinning and yielding first. A waiter blocked for long would
	// otherwise spin and yield every 50 ms, and each runtime.Gosched of an
	// otherwise idle process wakes the Go scheduler's idle threads: about
	// 1.5 ms of CPU per slice, 3% of a core.
	again bool
}

// due reports whether a check is due after a sleep that timed out or not,
// and if so schedules the next one.
func (l *liveness) due(timedOut bool) bool {
	now := time.Now()
	if !timedOut && (l.next.IsZero() || now.Before(l.next)) {
		if l.next.IsZero() {
			l.next = now.Add(livenessInterval)
		}
		return false
	}
	l.next = now.Add(livenessInterval)
	return true
}

// wait returns once ready reports true (the caller then tries again, and
// may well come back), or once a liveness check is due (slice true: the
// caller should look for dead holders), or with ctx's error, or with
// shm.ErrClosed once the segment is closed: at once if the caller
// registered a closeWatch (Close wakes it), otherwise at the latest one
// liveness interval after Close, since the sleep of a waiter that was in
// the kernel then ends only at a wake or its timeout.
//
// w, if not nil, is the caller's closeWatch: it holds part of the lock
// while it waits, and registers before it first yields or sleeps. lv is
// the caller's liveness schedule, one for each loop of waits.
func (m *Mutex) wait(ctx context.Context, g gate, w *closeWatch, lv *liveness, ready func() bool) (slice bool, err error) {
	m.beginWait()
	for i := range spinLoads + spinYields {
		if lv.again {
			break
		}
		if ready() {
			return false, m.openErr()
		}
		if i >= spinLoads {
			// Off the CPU from here on, maybe for long: a Close meanwhile
			// must wait for what the caller holds.
			if err := m.watch(w); err != nil {
				return false, err
			}
			m.timeWait()
			yield()
		}
	}
	lv.again = false
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if ctx.Done() != nil {
		// A sleeper cannot watch a channel: cancellation wakes the gate,
		// and the other sleepers on it sleep again.
		defer onCancel(ctx, func() { wakeAnyway(g.word) })()
	}
	if lv.next.IsZero() {
		lv.next = time.Now().Add(livenessInterval)
	}
	sleep := max(time.Until(lv.next), time.Microsecond)
	if d, ok := ctx.Deadline(); ok {
		sleep = min(sleep, max(time.Until(d), time.Microsecond))
	}
	if m.segClosed() {
		return false, shm.ErrClosed
	}
	if err := m.watch(w); err != nil {
		return false, err
	}
	ticket := m.register(g)
	seq := g.word.Load()
	if ready() || m.segClosed() { // after seq: see closeWatch
		m.unregister(g, ticket)
		return false, m.openErr()
	}
	m.timeWait()
	m.stats.AddSleep()
	err = futex.Wait(g.word, seq, sleep)
	m.unregister(g, ticket)
	if m.segClosed() {
		return false, shm.ErrClosed
	}
	if cerr := ctx.Err(); cerr != nil {
		return false, cerr
	}
	slice = lv.due(errors.Is(err, futex.ErrTimeout))
	lv.again = slice
	return slice, nil
}

// openErr is shm.ErrClosed once the segment is closed, nil before.
func (m *Mutex) openErr() error {
	if m.segClosed() {
		return shm.ErrClosed
	}
	return nil
}

// yield lets other goroutines of this process run, then other processes
// of this CPU: runtime.Gosched alone returns at once in a process whose
// only goroutine is the caller.
func yield() {
	runtime.Gosched()
	futex.Yield()
}

// onCancel runs f when ctx is done, until the returned stop is called;
// stop returns only once f has finished if it started. f touches the
// segment's memory, which the caller may unmap right after the wait ends.
func onCancel(ctx context.Context, f func()) (stop func()) {
	done := make(chan struct{})
	stopF := context.AfterFunc(ctx, func() {
		defer close(done)
		f()
	})
	return func() {
		if !stopF() {
			<-done
		}
	}
}

// register records a sleeper of g in the Waiters word: one more on the
// shared gate (its ticket: the epoch it counts in), or the caller's flag on
// the unique gate.
func (m *Mutex) register(g gate) sleepers.Ticket {
	if g.unit == waitersShared {
		return sleepers.RegisterIn(&m.e.Waiters, waitersEpoch)
	}
	m.e.Waiters.Or(g.unit)
	return 0
}

// unregister undoes register. On the shared gate it takes one off the
// count, unless a drop since took the registration already (see the
// Waiters word in state.go), and resets the futile-wake count: a shared
// sleeper ran.
func (m *Mutex) unregister(g gate, t sleepers.Ticket) {
	if g.unit != waitersShared {
		// A pending upgrade that ForceUnlock freed while it slept leaves
		// the bit to the next upgrade holder's pending upgrade, which may
		// have set it since: taking it off left that sleeper to its
		// liveness interval.
		if g.unit != uniqueUpgrader || m.holdsUpgrader() || !otherUpgradePending(m.e.State.Load()) {
			m.e.Waiters.And(^g.unit)
		}
		return
	}
	sleepers.UnregisterIn(&m.e.Waiters, waitersSharedMask, waitersEpoch, t)
}

// otherUpgradePending reports whether state s has an upgrade pending, for
// a caller that does not hold the upgrade lock: another holder's.
func otherUpgradePending(s uint32) bool {
	return s&(stateUpgrade|statePending) == stateUpgrade|statePending
}

// wake wakes every sleeper of g, if it has any. The caller has changed the
// state those sleepers wait on. The check is inlined into every release
// (most find no sleeper); the wake-up is not.
func (m *Mutex) wake(g gate) {
	if m.e.Waiters.Load()&g.all != 0 {
		m.wakeSleepers(g)
	}
}

func (m *Mutex) wakeSleepers(g gate) {
	g.word.Add(1)
	n, err := futex.WakeAll(g.word)
	if n > 0 && err == nil {
		m.stats.AddWakeup()
	} else if g.all == waitersSharedMask {
		sleepers.FutileIn(&m.e.Waiters, waitersSharedMask, waitersEpoch)
	}
}

// readersZero reports whether no shared hold is recorded, reading the
// records the mask says have been in use.
func (m *Mutex) readersZero() bool {
	if len(m.readers) == 0 {
		return true
	}
	for mask := m.readers[0].Pad.Load(); mask != 0; mask &= mask - 1 {
		for j := bits.TrailingZeros32(mask); j < len(m.readers); j += maskBits {
			if m.readers[j].Count.Load() != 0 {
				return false
			}
		}
	}
	return true
}

// acquireWriterWord takes the writers' mutex (the Writer word) for the
// handle, waiting for it unless try, or takes it over from a dead holder
// (reclaimed: a write bit the dead one left is now the caller's). waited
// reports that the word was not free at once: the segment may have closed
// during the wait, so the acquisition checks again before it reports
// success (writerGranted).
func (m *Mutex) acquireWriterWord(ctx context.Context, try bool) (reclaimed, waited bool, err error) {
	w := &m.e.Writer
	if w.CompareAndSwap(0, m.pid) {
		return false, false, nil
	}
	if try {
		// A stale handoff is a free word (see handoffExpiry).
		if o := w.Load(); isHandoff(o) && handoffExpired(o) && w.CompareAndSwap(o, m.pid) {
			return false, false, nil
		}
		return false, false, ErrWouldBlock
	}
	m.beginWait()
	spin.KeepOff(writerKeepOff)
	// The yields between the checks are sched_yields, which let the
	// holder run if it waits for this CPU; a goroutine of this process
	// that holds the word gets its turn before each sleep below. They were
	// runtime.Goscheds, which in a process of one busy goroutine return at
	// once, after waking an idle runtime thread for nothing (a futex wake
	// and a context switch on the other CPU; see lockmgr's entry.go).
	// bench/matrix -baseline, far-placed host, 10 rounds: counter 1.15x,
	// 1.51x and 1.72x at 2/4/8 processes (9, 10 and 10 of 10 rounds),
	// pingpong_retry 1.37x (9 of 10), rw90 0.96-0.98x (3-5 of 10). The
	// readers' yields (yield, a Gosched and a sched_yield) as sched_yields
	// alone were measured with it and not kept: rw90 0.90-0.93x.
	for i := range spinLoads + spinYields {
		if w.Load() == 0 && w.CompareAndSwap(0, m.pid) {
			return false, true, nil
		}
		if i >= spinLoads {
			m.timeWait()
			futex.Yield()
		}
	}
	// Hungry from here on: the holder's word says a writer has waited, and
	// its release is handed to the waiting writers (a handoff).
	for range spinLoads {
		if m.claimHungry() {
			return false, true, nil
		}
	}
	gate := &m.e.WriterGate
	if ctx.Done() != nil {
		// As in wait: cancellation bumps the gate and wakes every writer.
		defer onCancel(ctx, func() { wakeAnyway(gate) })()
	}
	var lv liveness
	for {
		if err := ctx.Err(); err != nil {
			m.giveUpWriterWait()
			return false, true, err
		}
		if lv.next.IsZero() {
			lv.next = time.Now().Add(livenessInterval)
		}
		sleep := max(time.Until(lv.next), time.Microsecond)
		if d, ok := ctx.Deadline(); ok {
			sleep = min(sleep, max(time.Until(d), time.Microsecond))
		}
		runtime.Gosched() // the holder may be a goroutine of this process
		ticket := sleepers.Register(&m.e.WriterSleepers)
		seq := gate.Load()
		if o := w.Load(); o == 0 || isHandoff(o) {
			m.unregisterWriter(ticket)
			if w.CompareAndSwap(o, m.pid) {
				return false, true, nil
			}
			continue
		} else if o&writerHungry != 0 {
			// A release handed to a sleeper would leave the lock idle
			// until it runs: only writers on a CPU ask for handoffs.
			w.CompareAndSwap(o, o&^writerHungry)
		}
		m.timeWait()
		m.stats.AddSleep()
		werr := futex.Wait(gate, seq, sleep)
		m.unregisterWriter(ticket)
		if m.segClosed() {
			m.giveUpWriterWait()
			return false, true, shm.ErrClosed
		}
		for range spinLoads {
			if m.claimHungry() {
				return false, true, nil
			}
		}
		if lv.due(errors.Is(werr, futex.ErrTimeout)) {
			if o := w.Load(); m.takeOverWriter(o) {
				return true, true, nil
			}
		}
	}
}

// giveUpWriterWait is for a writer that stops waiting for the Writer word
// (its context is done, or the segment closed). It takes off the hungry
// mark it may have set: left there, the holder's release would hand the
// lock to writers that no longer wait. Writers still spinning mark again.
// Then the wake or the handoff that may have been meant for it goes on.
func (m *Mutex) giveUpWriterWait() {
	w := &m.e.Writer
	if o := w.Load(); o&writerHungry != 0 && !isHandoff(o) {
		w.CompareAndSwap(o, o&^writerHungry)
	}
	m.passWriterWake()
}

// claimHungry is one try of a writer that has waited: take the Writer
// word if it is free or handed to the waiting writers, or else mark the
// holder's word hungry, so that its release is handed over.
func (m *Mutex) claimHungry() bool {
	w := &m.e.Writer
	switch o := w.Load(); {
	case o == 0 || isHandoff(o):
		return w.CompareAndSwap(o, m.pid)
	case o&writerHungry == 0:
		w.CompareAndSwap(o, o|writerHungry)
	}
	return false
}

// unregisterWriter takes one sleeper off WriterSleepers (an
// internal/sleepers word) and clears the futile-wake count and the
// wake-pending bit: if this writer was the one woken, the next release may
// wake another; if it was not, that costs at most one early wake.
func (m *Mutex) unregisterWriter(t sleepers.Ticket) { sleepers.Unregister(&m.e.WriterSleepers, t) }

// wakeWriter wakes one writer asleep on WriterGate, unless none is or a
// woken one has not run yet. The caller has released the Writer word. The
// gate moves first, so a writer between its registration and its futex
// call does not sleep.
func (m *Mutex) wakeWriter() {
	m.e.WriterGate.Add(1)
	if sleepers.WakeOne(&m.e.WriterSleepers, &m.e.WriterGate) {
		m.stats.AddWakeup()
	}
}

// passWriterWake is for a writer that gives up waiting: if the Writer word
// is free, the wake it may have consumed goes to the next writer.
func (m *Mutex) passWriterWake() {
	// A handoff goes back to everyone: other waiters may be hungry, or
	// not yet, and a fast-path writer may take it.
	if o := m.e.Writer.Load(); isHandoff(o) {
		m.e.Writer.CompareAndSwap(o, 0)
	}
	if m.e.Writer.Load() == 0 && sleepers.Count(m.e.WriterSleepers.Load()) != 0 {
		m.wakeWriter()
	}
}

// clearDeadReaders drops the records of dead processes that count holds.
func (m *Mutex) clearDeadReaders() {
	for _, r := range m.readers {
		if r.Count.Load() != 0 {
			m.freeDeadRecord(r)
		}
	}
}

// freeDeadRecord frees r if its owner is dead, and returns that owner and
// the holds it left: CAS the owner to this process first, so a live
// process that took the record over meanwhile keeps it, then zero the
// count, then free the record.
func (m *Mutex) freeDeadRecord(r *layout.ReaderRecord) (owner uint64, count uint32, freed bool) {
	o := r.Owner.Load()
	if o == 0 || m.alive(o) || !r.Owner.CompareAndSwap(o, m.pid) {
		return 0, 0, false
	}
	count = r.Count.Load() // the record is ours: its count is final
	r.Count.Store(0)
	r.Owner.Store(0)
	m.repairs.Add(1)
	if count != 0 {
		m.stats.AddReclaim() // shared holds ended for the dead
	}
	return o, count, true
}

// releaseDeadWriter releases the writer's lock if its recorded holder is
// dead, and reports whether it did. It takes the Writer word over first,
// so of several repairers exactly one proceeds. A stale handoff is freed
// too (reported as false: nobody held it).
func (m *Mutex) releaseDeadWriter() bool {
	o := m.e.Writer.Load()
	if isHandoff(o) {
		if handoffExpired(o) {
			m.releaseStaleHandoff(o)
		}
		return false
	}
	if !m.takeOverWriter(o) {
		return false
	}
	m.clearWriteBit()
	m.releaseWriterWord()
	m.wake(m.sharedGate())
	m.wake(m.uniqueGate())
	return true
}

// releaseStaleHandoff frees the Writer word o, a stale handoff, and wakes
// whoever may want it; false if the word changed meanwhile.
func (m *Mutex) releaseStaleHandoff(o uint64) bool {
	if !m.e.Writer.CompareAndSwap(o, 0) {
		return false
	}
	m.wake(m.sharedGate())
	m.wakeWriter()
	return true
}

// takeOverWriter takes the Writer word o (read by the caller) over if its
// holder is dead: by CAS, so of several repairers exactly one succeeds,
// and that one clears the dead holder's flag on UniqueGate (if it slept
// there) before anyone can hold the word again and set it. If the dead
// writer held the unique lock (stateWrite without stateUpgrade, or
// writerUnique), the reclaim is recorded for the next unique holder
// (stateInconsistent). A writerUnique hold ends in the CAS, which lets
// readers and upgrade seekers in, so the bit is set and the generation
// moved on before it, while the dead one's bit still keeps them out: with
// locked instructions, since another repairer may do the same. (A writer
// that died between its fast path's CAS and its step back held nothing:
// the report is then a false alarm, on the safe side, and the generation
// may move under an upgrade holder, as ForceUnlock's does.)
func (m *Mutex) takeOverWriter(o uint64) bool {
	// The marks below go before the CAS that would tell that o is gone:
	// see diedHolding.
	if id := writerID(o); id == 0 || !m.diedHolding(id, func() bool { return m.e.Writer.Load() == o }) {
		return false
	}
	if o&writerUnique != 0 {
		m.forceGeneration()
	}
	if !m.seizeWriterWord(o) {
		return false
	}
	m.e.WriterTID.Store(0) // the dead one's grant, if any, is over (state.go: granted holds)
	m.e.Waiters.And(^uniqueWriter)
	if m.e.State.Load()&(stateWrite|stateUpgrade) == stateWrite {
		// The dead one held the unique lock (or was draining readers for
		// it): its hold, and with it the generation, is ours now.
		m.bumpGeneration()
		m.e.State.Or(stateInconsistent) // the write bit is ours now: nobody else clears it
	}
	m.repairs.Add(1)
	m.stats.AddReclaim()
	return true
}

// seizeWriterWord takes the Writer word o (read by the caller) over from
// its dead holder (takeOverWriter): CAS to the caller's identity. A
// writerUnique hold ends in that CAS, so the mutex is marked inconsistent
// before it; a stateWrite hold stays set, for the caller to mark and
// clear. The dead one's holder id goes before the CAS too, while the word
// is still the dead one's (clearDeadTID): after it, the word names the
// live taker, and a ForceUnlock that saw a holder id there would take the
// acquisition for a granted hold and free its word under it.
func (m *Mutex) seizeWriterWord(o uint64) bool {
	if o&writerUnique != 0 {
		m.e.State.Or(stateInconsistent)
	}
	clearDeadTID(&m.e.Writer, &m.e.WriterTID, o)
	return m.e.Writer.CompareAndSwap(o, m.pid)
}

// clearDeadTID clears the holder id tid of the dead holder of the identity
// word w while w is still o, the dead one's (see seizeWriterWord). By CAS
// from the id seen: if the word went to a taker after it was read, that
// taker clears the id itself, and a holder it was granted to since has an
// id of its own, which stays. (The word never comes back to o once taken
// over; a forcer that gives back o leaves the dead one's id or 0.)
func clearDeadTID(w, tid *atomic.Uint64, o uint64) {
	if t := tid.Load(); t != 0 && w.Load() == o {
		tid.CompareAndSwap(t, 0)
	}
}

// takeOverUpgrader is takeOverWriter for the Upgrader word.
func (m *Mutex) takeOverUpgrader(o uint64) bool {
	if o == 0 || m.alive(o) || !m.seizeUpgraderWord(o) {
		return false
	}
	m.e.UpgraderTID.Store(0) // as in takeOverWriter
	m.e.Waiters.And(^uniqueUpgrader)
	if m.e.State.Load()&stateUpgrade != 0 {
		m.bumpGeneration() // as in takeOverWriter: its hold is ours now
	}
	m.repairs.Add(1)
	m.stats.AddReclaim()
	return true
}

// seizeUpgraderWord is seizeWriterWord for the Upgrader word.
func (m *Mutex) seizeUpgraderWord(o uint64) bool {
	clearDeadTID(&m.e.Upgrader, &m.e.UpgraderTID, o)
	return m.e.Upgrader.CompareAndSwap(o, m.pid)
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
	if !m.takeOverUpgrader(m.e.Upgrader.Load()) {
		return false, false
	}
	unique = m.clearUpgradeBits()&stateWrite != 0
	m.releaseUpgraderWord()
	m.wake(m.sharedGate())
	m.wake(m.uniqueGate())
	return true, unique
}

// clearUpgradeBits clears the bits of an upgrade holder that is not the
// caller (dead, forced out, or abandoned at Close) and returns the state it
// found. While stateUpgrade is set nobody but the Upgrader word's holder
// (the caller) changes the state; while it is clear, stateWrite is a
// writer's and is left alone. If the holder had upgraded (stateWrite), its
// unique hold ends here without its release: stateInconsistent is set in
// the same CAS, so that nobody who gets in next sees the unique hold gone
// and the bit not yet set.
func (m *Mutex) clearUpgradeBits() uint32 {
	for {
		s := m.e.State.Load()
		if s&stateUpgrade == 0 {
			return 0
		}
		next := s &^ (stateUpgrade | statePending | stateWrite)
		if s&stateWrite != 0 {
			next |= stateInconsistent
		}
		if m.e.State.CompareAndSwap(s, next) {
			return s
		}
	}
}

// releaseWriterWord ends the caller's hold of the Writer word: holder id
// first, then the word, so anyone who sees the word free sees the holder
// id reset; then it wakes one waiting writer. If a writer has waited
// (writerHungry), the word goes to the waiting writers (a handoff) rather
// than to whoever comes first. The end of a unique hold has bumped the
// generation before (bumpGeneration).
func (m *Mutex) releaseWriterWord() {
	e := m.e
	memview.StoreOwned(&e.WriterTID, 0) // published by the Writer CAS
	if w := e.Writer.Load(); writerID(w) == m.pid {
		m.freeWriterWord(e, w)
	} else {
		m.handOffWriterWord() // ForceUnlock has it: wait for it back, free nothing else
	}
	m.wakeWaitingWriter(e)
}

// freeWriterWord is releaseWriterWord's release of the word itself (w, as
// the caller loaded it: the caller's identity, with writerUnique if it
// holds the lock so), small enough to inline (Unlock, the hot caller,
// writes out all three steps of releaseWriterWord). Only a waiting writer
// changes the word meanwhile, adding writerHungry: then the CAS fails (or
// is not tried) and the word is handed off.
func (m *Mutex) freeWriterWord(e *layout.UpgradeEntry, w uint64) {
	if w&writerHungry != 0 || !e.Writer.CompareAndSwap(w, 0) {
		m.handOffWriterWord()
	}
}

// wakeWaitingWriter wakes one writer asleep on WriterGate, if any.
func (m *Mutex) wakeWaitingWriter(e *layout.UpgradeEntry) {
	if sleepers.Count(e.WriterSleepers.Load()) != 0 {
		m.wakeWriter()
	}
}

// handOffWriterWord is freeWriterWord's release when a writer is hungry,
// or marks the word hungry meanwhile: the word goes to the waiting writers
// (a handoff).
func (m *Mutex) handOffWriterWord() {
	var forcer uint64 // the identity that took the word, once seen
	for tries := 0; ; {
		// Waiting writers only ever add or take off writerHungry.
		o, next := m.e.Writer.Load(), uint64(0)
		if id := writerID(o); id != m.pid {
			// ForceUnlock took the word while this release ran. It gives
			// the word straight back when it sees that the holder id
			// went (force.go): wait for that for as long as the forcer
			// lives and has the word (a release that stopped waiting
			// sooner left the word it gave back to nobody, for good),
			// but free nothing that is not ours: a word gone elsewhere
			// (freed, or to another holder) ends the wait. Forces of a
			// mutex never overlap, so only the one whose reads came
			// before the id went takes the word from this release: any
			// later one reads the id gone and leaves the word alone.
			if id == 0 || forcer != 0 && id != forcer {
				return
			}
			forcer = id
			// shmctl unlock --force exits right after its give-back: see
			// diedHolding.
			if tries++; tries%forceGiveBackWait == 0 &&
				m.diedHolding(id, func() bool { return writerID(m.e.Writer.Load()) == id }) {
				return // a waiter takes the dead forcer's word over
			}
			futex.Yield()
			continue
		}
		if o&writerHungry != 0 {
			next = handoffWord()
		}
		if m.e.Writer.CompareAndSwap(o, next) {
			return
		}
	}
}

// releaseUpgraderWord ends the caller's hold of the Upgrader word, in the
// order releaseWriterWord keeps.
func (m *Mutex) releaseUpgraderWord() {
	memview.StoreOwned(&m.e.UpgraderTID, 0) // published by the Upgrader store
	m.e.Upgrader.Store(0)
}

// bumpGeneration moves the fencing generation on at the end of a unique or
// upgrade hold. Only the holder of one of them calls it, before its state
// bit goes, and the two exclude each other: the generation is an owned
// word (see state.go), bumped without a locked instruction.
func (m *Mutex) bumpGeneration() {
	memview.StoreOwned(&m.e.Generation, m.e.Generation.Load()+1) // published by the state word's release
}

// repairBlockers releases whichever dead holder the state blames for
// blocking readers. Both may: a writer killed on Lock's fast path between
// its CAS of writerUnique and its step back leaves the bit under a live
// upgrade holder's stateUpgrade, and readers, whom the upgrade holder
// does not block, would otherwise wait for as long as it holds.
func (m *Mutex) repairBlockers() {
	if m.e.State.Load()&stateUpgrade != 0 {
		m.releaseDeadUpgrader()
	}
	if writerHoldsUnique(m.e.State.Load(), m.e.Writer.Load()) {
		m.releaseDeadWriter()
	}
}
