package upgrade

import (
	"fmt"

	"github.com/shmlock/shmlock/shm"
)

// Forced says what ForceUnlock freed.
type Forced struct {
	Writer   uint64         // the writer's packed identity, 0 if none held the unique lock's word
	Upgrader uint64         // the upgrade holder's, 0 if none
	Readers  []ReaderStatus // the reader records whose shared holds were dropped
}

// Empty reports whether there was nothing to free.
func (f Forced) Empty() bool { return f.Writer == 0 && f.Upgrader == 0 && len(f.Readers) == 0 }

// ForceUnlock frees every hold of upgrade mutex i of seg, whoever has it,
// alive or not: for an operator who knows a holder is stuck (shmctl
// unlock --force). The writer's and the upgrade holder's words are taken
// over and released as a reclaim would, so the generation advances past
// every token they had, and a unique hold freed marks the mutex
// inconsistent; the shared holds of the reader records are dropped. The
// holders' own releases then fail (ErrNotHeld, or ErrNotOwner once another
// handle holds the lock). Waiters are woken.
func ForceUnlock(seg *shm.Segment, i int) (Forced, error) {
	if seg == nil {
		return Forced{}, shm.ErrNoSegment
	}
	if seg.ReadOnly() {
		return Forced{}, fmt.Errorf("upgrade: force unlock of mutex %d: %w", i, shm.ErrReadOnly)
	}
	m, err := open(seg, i)
	if err != nil {
		return Forced{}, err
	}
	var f Forced
	if o := m.e.Writer.Load(); isHandoff(o) {
		m.releaseStaleHandoff(o)
	} else if id := writerID(o); id != 0 && m.seizeWriterWord(o) {
		m.e.Waiters.And(^uniqueWriter)
		if m.e.State.Load()&(stateWrite|stateUpgrade) == stateWrite {
			m.e.State.Or(stateInconsistent)
		}
		m.e.WriterTID.Store(m.tid)
		m.forceGeneration()
		m.clearWriteBit()
		m.releaseWriterWord()
		f.Writer = id
	}
	if u := m.e.Upgrader.Load(); u != 0 && m.e.Upgrader.CompareAndSwap(u, m.pid) {
		m.e.Waiters.And(^uniqueUpgrader)
		m.e.UpgraderTID.Store(m.tid)
		m.forceGeneration()
		m.clearUpgradeBits() // sets stateInconsistent if it had upgraded
		m.releaseUpgraderWord()
		f.Upgrader = u
	}
	for j, r := range m.readers {
		if n := r.Count.Swap(0); n != 0 {
			f.Readers = append(f.Readers, ReaderStatus{Record: j, Owner: r.Owner.Load(), Count: n})
		}
	}
	if !f.Empty() {
		m.wake(m.sharedGate())
		m.wake(m.uniqueGate())
		m.wakeWriter()
	}
	return f, nil
}

// forceGeneration moves the generation past every token of a holder that
// ForceUnlock takes a word from. That holder may be alive, and in the
// middle of its own release, which bumps the generation as an owned word
// (bumpGeneration: load, add 1, store): a locked add here is never lost
// to that store in a way that leaves the generation at the holder's token
// (the store writes at least its token + 1).
func (m *Mutex) forceGeneration() { m.e.Generation.Add(1) }
