package upgrade

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
)

// ForceUnlock drops a reader record's count while its (live) owner is
// between LockShared's count and its back-off (a writer blocked it): the
// back-off must not take the count below zero, where it would read as
// 2^32-1 holds of a live process that every later writer waits for, and
// that refuses the handle's every shared lock (ErrOverflow).
func TestForceUnlockDuringReaderBackOff(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 1)
	w, _ := Open(seg, 0)
	r, _ := Open(seg, 0)
	if err := w.Lock(); err != nil {
		t.Fatal(err)
	}
	rec, err := r.record()
	if err != nil {
		t.Fatal(err)
	}
	n := rec.Count.Add(1) // lockSharedFast's count; it then sees the writer
	if _, err := ForceUnlock(seg, 0); err != nil {
		t.Fatal(err)
	}
	r.backOff(rec, n) // and takes its count back
	if n := rec.Count.Load(); n != 0 {
		t.Fatalf("count after the back-off: %#x, want 0", n)
	}
	w2, _ := Open(seg, 0)
	// The lock is free: only a bug waits. A short bound could run out
	// before the call on a loaded machine (a done context fails at once).
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
	defer cancel()
	if err := w2.LockContext(ctx); err != nil {
		t.Fatalf("a writer after the forced unlock: %v", err)
	}
	_ = w2.Unlock()
}

// ForceUnlock while a live writer holds only the Writer word, waiting for
// a stuck upgrade holder (the case an operator forces): the writer was not
// granted, so its word is left to it; it goes on once the upgrade holder
// is freed, and no second writer gets in beside it. (Freeing its word let
// the writer go on all the same and set stateWrite without the word, and
// the next writer adopt that bit as its own: two writers.)
func TestForceUnlockWaitingWriterTwoOwners(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 1)
	h, _ := Open(seg, 0)
	w, _ := Open(seg, 0)
	if err := h.LockUpgrade(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := w.acquireWriterWord(ctx, false); err != nil { // Lock's first step
		t.Fatal(err)
	}
	f, err := ForceUnlock(seg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Upgrader != h.pid || f.Writer != 0 || f.WaitingWriter != w.pid {
		t.Fatalf("forced %+v: want the upgrade holder freed and the waiting writer left", f)
	}
	if err := w.finishLock(ctx, false, false, false); err != nil {
		t.Fatalf("the waiting writer after the force: %v", err)
	}
	w2, _ := Open(seg, 0)
	ctx2, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := w2.LockContext(ctx2); err == nil {
		t.Fatal("two writers hold the unique lock after ForceUnlock")
	}
	if err := w.Unlock(); err != nil {
		t.Fatalf("the writer's own unlock: %v", err)
	}
	if err := w2.Lock(); err != nil {
		t.Fatal(err)
	}
	_ = w2.Unlock()
}

// giveBackWriterWord returns a word forceWriter took from a writer that
// was not granted to that writer, with the bits set meanwhile: a waiting
// writer's writerHungry kept, a writerUnique the writer stepped back from
// not put back.
func TestGiveBackWriterWord(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 1)
	m, _ := Open(seg, 0)
	const other = uint64(12345)
	handoff := handoffWord()
	for _, tc := range []struct{ held, want uint64 }{
		{m.pid, other},
		{m.pid | writerHungry, other | writerHungry},
		{m.pid | writerUnique, other | writerUnique},
		{0, 0},                 // freed meanwhile: left alone
		{handoff, handoff},     // handed off: left alone
		{other + 1, other + 1}, // another holder's: left alone
	} {
		m.e.Writer.Store(tc.held)
		m.giveBackWriterWord(other)
		if got := m.e.Writer.Load(); got != tc.want {
			t.Errorf("held %#x: word %#x after the give-back, want %#x", tc.held, got, tc.want)
		}
	}
	m.e.Writer.Store(0)
}

// A force that meets a live writer's Unlock after the release cleared its
// holder id: the forcer's CAS of the id fails and it gives the word back,
// and the release frees it then. The forcer may be off its CPU between
// its two CASes for longer than the release's forceGiveBackWait yields: a
// release that stopped waiting left the word given back to its identity,
// with no holder id and nobody to free it, so no writer could take it
// while that process lived, and ForceUnlock took it for a waiting writer.
func TestForceGiveBackAfterSlowForcer(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 1)
	h, _ := Open(seg, 0)
	f, _ := Open(seg, 0)
	f.pid = otherLiveIdentity(t) // the forcer: another live process
	if err := h.Lock(); err != nil {
		t.Fatal(err)
	}
	e := h.e
	o, tid := e.Writer.Load(), e.WriterTID.Load() // forceWriter reads the hold
	w := e.Writer.Load()                          // Unlock's ownership check
	if !h.holdsWriterWord(w) {
		t.Fatal("not held")
	}
	h.endUniqueHold(e, w)                                  // the holder id goes
	if !e.Writer.CompareAndSwap(o, f.pid|o&writerUnique) { // the forcer takes the word
		t.Fatal("the forcer's CAS failed")
	}
	released := make(chan struct{})
	go func() {
		h.freeWriterWord(e, w) // Unlock's last step, while the forcer is off its CPU
		close(released)
	}()
	select {
	case <-released:
	case <-time.After(200 * time.Millisecond):
	}
	if e.WriterTID.CompareAndSwap(tid, 0) { // the forcer runs again
		t.Fatal("the forcer cleared the holder id of a release")
	}
	f.giveBackWriterWord(writerID(o))
	<-released
	if got := e.Writer.Load(); got != 0 {
		forced, _ := ForceUnlock(seg, 0)
		t.Fatalf("Writer word %#x after the release and the give-back, held by nobody (ForceUnlock: %+v)", got, forced)
	}
	w2, _ := Open(seg, 0)
	if err := w2.TryLock(); err != nil {
		t.Fatalf("a writer after the release: %v", err)
	}
	_ = w2.Unlock()
}

// A forcer that gives the word back and exits (shmctl unlock --force
// does, just after) between the release's load of the word, which named
// it, and the release's check that it lives: the check says dead, and a
// release that trusted the word it had loaded stopped waiting and left
// the word given back to its identity, held by nobody for as long as its
// process lived. The give-back runs inside the liveness check, so the
// interleaving is exact.
func TestForceGiveBackThenForcerExits(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 1)
	h, _ := Open(seg, 0)
	f, _ := Open(seg, 0)
	f.pid = deadIdentity(t) // the forcer, dead by the time the release asks
	if err := h.Lock(); err != nil {
		t.Fatal(err)
	}
	e := h.e
	o := e.Writer.Load()
	w := e.Writer.Load() // Unlock's ownership check
	h.endUniqueHold(e, w)
	if !e.Writer.CompareAndSwap(o, f.pid|o&writerUnique) { // the forcer takes the word
		t.Fatal("the forcer's CAS failed")
	}
	gaveBack := false
	h.alive = func(id uint64) bool {
		if id == f.pid && !gaveBack { // the forcer's give-back and exit land just before the check
			gaveBack = true
			f.giveBackWriterWord(writerID(o))
		}
		return seg.OwnerAlive(id)
	}
	h.freeWriterWord(e, w)
	if !gaveBack {
		t.Fatal("the release did not wait for the forcer")
	}
	if got := e.Writer.Load(); got != 0 {
		t.Fatalf("Writer word %#x after the release and the give-back, held by nobody", got)
	}
}

// otherLiveIdentity is the packed identity of a live process other than
// this one (the test's parent).
func otherLiveIdentity(tb testing.TB) uint64 {
	tb.Helper()
	parent, err := proc.Lookup(uint32(os.Getppid()))
	if err != nil {
		tb.Fatal(err)
	}
	return parent.Pack()
}

// deadIdentity is the packed identity of a process that has exited.
func deadIdentity(tb testing.TB) uint64 { return testproc.ExitedIdentity(tb) }

// ForceUnlock of a mutex whose holder died granted (its holder id still
// there) while a waiter takes the dead one's word over: just after the
// taker's CAS the word has the taker's live identity, and the holder id
// must not be the dead one's any more, or the force takes the taker's
// acquisition for a granted hold and frees its word under it. The taker
// then goes on to a unique hold without the word, and the next writer
// adopts its stateWrite: two writers. Likewise for the Upgrader word.
func TestForceUnlockDuringTakeover(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 2)
	dead := deadIdentity(t)
	ctx := context.Background()

	w, _ := Open(seg, 0)
	e := w.e
	e.Writer.Store(dead) // a writer that died holding the unique lock
	e.WriterTID.Store(777)
	e.State.Store(stateWrite)
	if !w.seizeWriterWord(dead) { // takeOverWriter's CAS
		t.Fatal("the takeover's CAS failed")
	}
	f, err := ForceUnlock(seg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Writer != 0 || f.WaitingWriter != w.pid {
		t.Errorf("forced %+v during a takeover: want the taker left to go on", f)
	}
	if err := w.finishLock(ctx, false, true, true); err != nil { // Lock after the takeover
		t.Fatal(err)
	}
	w2, _ := Open(seg, 0)
	ctx2, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := w2.LockContext(ctx2); err == nil {
		t.Fatal("two writers hold the unique lock after ForceUnlock")
	}
	if err := w.Unlock(); err != nil {
		t.Fatalf("the taker's own unlock: %v", err)
	}

	u, _ := Open(seg, 1)
	e = u.e
	e.Upgrader.Store(dead) // an upgrade holder that died holding it
	e.UpgraderTID.Store(777)
	e.State.Store(stateUpgrade)
	if !u.seizeUpgraderWord(dead) { // takeOverUpgrader's CAS
		t.Fatal("the takeover's CAS failed")
	}
	if f, err = ForceUnlock(seg, 1); err != nil {
		t.Fatal(err)
	}
	if f.Upgrader != 0 || f.WaitingUpgrader != u.pid || e.Upgrader.Load() != u.pid {
		t.Errorf("forced %+v during a takeover: want the taker left to go on", f)
	}
}

// ForceUnlock of words whose holders died with holder id 0: a writer
// killed after its grant and before its store of the id (or while it
// waited), an upgrade seeker likewise. Nobody goes on with those: they are
// freed, as a reclaim would, not reported as waiters left to go on (the
// operator was told a dead process would get the lock, and TryLock kept
// failing until a waiter or Reclaim came by).
func TestForceUnlockDeadWithoutHolderID(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 2)
	dead := deadIdentity(t)

	w, _ := Open(seg, 0)
	w.e.Writer.Store(dead) // granted, killed before its holder id
	w.e.State.Store(stateWrite)
	f, err := ForceUnlock(seg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Writer != dead || f.WaitingWriter != 0 {
		t.Errorf("forced %+v: want the dead writer freed", f)
	}
	if err := w.TryLock(); err != nil {
		t.Fatalf("a writer after the force: %v", err)
	}
	if !w.Reclaimed() {
		t.Error("the dead writer's unique hold freed without a report")
	}
	_ = w.Unlock()

	u, _ := Open(seg, 1)
	u.e.Upgrader.Store(dead) // granted, killed before its holder id
	u.e.State.Store(stateUpgrade)
	if f, err = ForceUnlock(seg, 1); err != nil {
		t.Fatal(err)
	}
	if f.Upgrader != dead || f.WaitingUpgrader != 0 {
		t.Errorf("forced %+v: want the dead upgrade holder freed", f)
	}
	if err := u.TryLockUpgrade(); err != nil {
		t.Fatalf("an upgrade holder after the force: %v", err)
	}
	_ = u.UnlockUpgrade()
}

// ForceUnlock that lands between UpgradeToUnique's check of the upgrade
// lock and its setting of statePending: the pending bit goes up after the
// force cleared the upgrade holder's bits, with no upgrade lock under it.
// The upgrade fails (ErrNotHeld) once its readers leave, and must take
// that bit down: nothing else does (Reclaim and ForceUnlock leave it, and
// only the next upgrade holder's release clears it), and it keeps every
// reader out meanwhile.
func TestForceUnlockBeforePendingUpgrade(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 1)
	u, _ := Open(seg, 0)
	r, _ := Open(seg, 0)
	if err := r.LockShared(); err != nil {
		t.Fatal(err)
	}
	if err := u.LockUpgrade(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- u.UpgradeToUnique() }()
	for u.e.State.Load()&statePending == 0 || u.e.Waiters.Load()&uniqueUpgrader == 0 {
		time.Sleep(time.Millisecond) // draining r's hold
	}
	if _, err := ForceUnlock(seg, 0); err != nil { // the force lands first...
		t.Fatal(err)
	}
	u.e.State.Or(statePending) // ...and the upgrade's pending bit after it
	u.wake(u.uniqueGate())
	if err := <-done; err != ErrNotHeld {
		t.Fatalf("the forced upgrade: %v, want ErrNotHeld", err)
	}
	if s := u.e.State.Load(); s&statePending != 0 {
		t.Errorf("state %#x after the forced upgrade failed: a pending bit without the upgrade lock", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout) // only a bug waits (see above)
	defer cancel()
	if err := r.LockSharedContext(ctx); err != nil {
		t.Fatalf("a reader after the forced upgrade: %v", err)
	}
	_ = r.UnlockShared()
}

// releaseWriterWord (the downgrades' and the repairs' release of the
// Writer word) meets a forcer that took the word, as Unlock's release
// does: it frees nothing that is not its own, and waits for the give-back.
// (It loaded the word afresh and CASed whatever was there to 0: the
// forcer's word, which the forcer then gave back to nobody.)
func TestReleaseWriterWordLeavesForcersWord(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 1)
	h, _ := Open(seg, 0)
	f, _ := Open(seg, 0)
	f.pid = otherLiveIdentity(t) // the forcer: another live process
	if err := h.TryLock(); err != nil {
		t.Fatal(err)
	}
	e := h.e
	o := e.Writer.Load()
	e.WriterTID.Store(0) // a downgrade's first step
	if !e.Writer.CompareAndSwap(o, f.pid) {
		t.Fatal("the forcer's CAS failed")
	}
	released := make(chan struct{})
	go func() {
		h.clearWriteBit()
		h.releaseWriterWord()
		close(released)
	}()
	select {
	case <-released:
		t.Fatal("the release did not wait for the forcer's give-back")
	case <-time.After(100 * time.Millisecond):
	}
	if got := e.Writer.Load(); got != f.pid {
		t.Fatalf("Writer word %#x while the forcer had it, want the forcer's %#x", got, f.pid)
	}
	f.giveBackWriterWord(writerID(o))
	<-released
	if got := e.Writer.Load(); got != 0 {
		t.Fatalf("Writer word %#x after the give-back and the release", got)
	}
}
