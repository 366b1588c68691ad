package upgrade

import (
	"context"
	"fmt"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// Forced says what ForceUnlock freed, and which acquisitions in progress
// it left to go on.
type Forced struct {
	Writer   uint64         // the writer's packed identity, 0 if no writer held the unique lock
	Upgrader uint64         // the upgrade holder's, 0 if none
	Readers  []ReaderStatus // the reader records whose shared holds were dropped

	// A live writer that held the Writer word but was not granted (it
	// waited for the upgrade holder or for readers), and a live upgrade
	// seeker that held the Upgrader word but was not granted: not holds,
	// so not freed. 0 if none. (A dead one's word is freed, and reported
	// above.)
	WaitingWriter, WaitingUpgrader uint64
}

// Empty reports whether there was nothing to free.
func (f Forced) Empty() bool { return f.Writer == 0 && f.Upgrader == 0 && len(f.Readers) == 0 }

// forceTries bounds ForceUnlock's looks at a word that keeps changing
// hands: a lock that busy has no stuck holder to free.
const forceTries = 64

// forceGiveBackWait is how many times (each a sched_yield) a release that
// finds its Writer word taken by ForceUnlock looks again for it to come
// back before it checks that the forcer is alive: the forcer gives it back
// within a few instructions when it sees the release's holder id gone,
// unless it is off its CPU, and nobody else would free the word then.
const forceGiveBackWait = 1000

// ForceUnlock frees every hold of upgrade mutex i of seg, whoever has it,
// alive or not: for an operator who knows a holder is stuck (shmctl
// unlock --force). The writer's and the upgrade holder's words are taken
// over and released as a reclaim would, so the generation advances past
// every token they had, and a unique hold freed marks the mutex
// inconsistent; the shared holds of the reader records are dropped. The
// holders' own releases then fail (ErrNotHeld, or ErrNotOwner once another
// handle holds the lock). Waiters are woken.
//
// Only granted holds are freed: a live writer or upgrade seeker that holds
// its word while it waits (most often for the very holder the operator
// means) is left to go on, and gets the lock next (Forced.WaitingWriter,
// WaitingUpgrader). Freeing its word would let it go on all the same and
// a second writer in beside it.
//
// Forces of one mutex never overlap: each holds the mutex's operator lock
// (shm.Segment.TryLockOperator, an fcntl lock on the segment's file that
// the kernel drops if its holder dies) for its whole run, and waits for
// it while another force, of any process, runs; ForceUnlock waits for as
// long as that takes (ForceUnlockContext gives up). That costs a force
// two system calls (the fcntl of its take and of its release), and costs
// nothing to any other operation. Overlapping forces wedged the mutex:
// two that both read a holder's word and id just before its release
// cleared the id each took the word in turn and gave it back, while the
// release waited for the first only, and left the word with the releasing
// process, held by nobody, until that process exited. Now the reads of a
// force that comes after another's come after that one's give-back, and
// so after the release's clear of the id: it sees the id gone and leaves
// the word alone, and one forcer at most takes the word from a release,
// the one the release waits for.
//
// A force and a live holder's own release of the same hold, at the same
// instant: the release clears its holder id first, so a forcer that took
// the word sees the id gone and gives the word back, and the release waits
// for it and ends as it began. Left open is the instant between a
// release's ownership check and that first store (the releases end a hold
// with plain stores, one locked instruction each, see state.go): a force
// that lands there proceeds, and the release's stores of the generation
// and the state word may land after the force, over the next holder's.
// The forces' lock does not help there: the release takes no lock. A stuck
// holder is not releasing; a force of a live holder that is running is the
// operator's gamble, and its data's fencing tokens are the protection that
// stays.
func ForceUnlock(seg *shm.Segment, i int) (Forced, error) {
	return ForceUnlockContext(context.Background(), seg, i)
}

// ForceUnlockContext is ForceUnlock, giving up when ctx is done while it
// waits for another force of the same mutex (one stopped, or in a
// debugger, mid-force holds the forces' lock for as long): it then returns
// ctx's error, having changed nothing. For a tool, which should not wait
// for ever without a word.
func ForceUnlockContext(ctx context.Context, seg *shm.Segment, i int) (Forced, error) {
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
	unlock, err := lockForce(ctx, seg, i)
	if err != nil {
		return Forced{}, fmt.Errorf("upgrade: force unlock of mutex %d: %w", i, err)
	}
	defer unlock()
	var f Forced
	f.Writer, f.WaitingWriter = m.forceWriter()
	f.Upgrader, f.WaitingUpgrader = m.forceUpgrader()
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

// lockForce takes the operator lock of mutex i (see ForceUnlock), waiting
// while another force holds it, and returns its release.
func lockForce(ctx context.Context, seg *shm.Segment, i int) (unlock func(), err error) {
	return seg.LockOperator(ctx, layout.KindUpgrades, i, func() { testHookForceBusy() })
}

// Test hooks: testHookForceBusy runs when a force finds the forces' lock
// held; testHookForceLoaded when forceWriter has read a hold's word and
// holder id, testHookForceTook when it has taken the word.
var testHookForceBusy, testHookForceLoaded, testHookForceTook = func() {}, func() {}, func() {}

// forceWriter frees the writer's granted hold, and returns the identity
// it freed, or that of a writer it left because it was not granted.
//
// A granted writer has its holder id in WriterTID (see "Granted holds" in
// state.go). The word is taken (CAS to this process's identity, keeping
// writerUnique so that readers stay out until the release), then the holder
// id is cleared by CAS from the one seen before: that fails if the hold
// ended in between, and a writer of the holder's process may then have
// taken the same word value, not granted yet: the word goes back to it.
func (m *Mutex) forceWriter() (freed, waiting uint64) {
	e := m.e
	for range forceTries {
		o := e.Writer.Load()
		if isHandoff(o) {
			m.releaseStaleHandoff(o)
			return 0, 0
		}
		id := writerID(o)
		if id == 0 {
			return 0, 0
		}
		t := e.WriterTID.Load()
		testHookForceLoaded()
		if t == 0 {
			if m.alive(id) {
				return 0, id // acquiring (or being repaired): not a hold
			}
			// Dead: it goes on with nothing, and may have been granted
			// (killed before its store of the id): free it as a reclaim.
			if m.releaseDeadWriter() {
				return id, 0
			}
			continue
		}
		if !e.Writer.CompareAndSwap(o, m.pid|o&writerUnique) {
			continue
		}
		testHookForceTook()
		if !e.WriterTID.CompareAndSwap(t, 0) {
			m.giveBackWriterWord(id)
			continue
		}
		e.Waiters.And(^uniqueWriter)
		if o&writerUnique != 0 || e.State.Load()&(stateWrite|stateUpgrade) == stateWrite {
			e.State.Or(stateInconsistent)
		}
		m.forceGeneration()
		m.clearWriteBit()
		m.releaseWriterWord() // writerUnique goes with the word
		return id, 0
	}
	return 0, 0
}

// giveBackWriterWord hands the Writer word, taken by forceWriter from a
// writer that was not granted, back to that writer's identity id, with
// the bits the writer and the waiting writers set meanwhile.
func (m *Mutex) giveBackWriterWord(id uint64) {
	for {
		cur := m.e.Writer.Load()
		if writerID(cur) != m.pid || m.e.Writer.CompareAndSwap(cur, id|cur&(writerHungry|writerUnique)) {
			return
		}
	}
}

// forceUpgrader is forceWriter for the upgrade holder.
func (m *Mutex) forceUpgrader() (freed, waiting uint64) {
	e := m.e
	for range forceTries {
		u := e.Upgrader.Load()
		if u == 0 {
			return 0, 0
		}
		t := e.UpgraderTID.Load()
		if t == 0 {
			if m.alive(u) {
				return 0, u
			}
			if released, _ := m.releaseDeadUpgrader(); released { // as in forceWriter
				return u, 0
			}
			continue
		}
		if !e.Upgrader.CompareAndSwap(u, m.pid) {
			continue
		}
		if !e.UpgraderTID.CompareAndSwap(t, 0) {
			e.Upgrader.CompareAndSwap(m.pid, u)
			continue
		}
		e.Waiters.And(^uniqueUpgrader)
		m.forceGeneration()
		m.clearUpgradeBits() // sets stateInconsistent if it had upgraded
		// By CAS, not releaseUpgraderWord's store: a release the holder
		// began before the force may have stored 0 meanwhile, and a new
		// holder taken the word.
		e.Upgrader.CompareAndSwap(m.pid, 0)
		return u, 0
	}
	return 0, 0
}

// forceGeneration moves the generation past every token of a holder that
// ForceUnlock takes a word from. That holder may be alive, and in the
// middle of its own release, which bumps the generation as an owned word
// (bumpGeneration: load, add 1, store): a locked add here is never lost
// to that store in a way that leaves the generation at the holder's token
// (the store writes at least its token + 1).
func (m *Mutex) forceGeneration() { m.e.Generation.Add(1) }
