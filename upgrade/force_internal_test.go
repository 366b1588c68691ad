package upgrade

import (
	"context"
	"testing"
	"time"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// ForceUnlock drops a reader record's count while its (live) owner is
// between LockShared's count and its back-off (a writer blocked it): the
// back-off must not take the count below zero, where it would read as
// 2^32-1 holds of a live process that every later writer waits for, and
// that refuses the handle's every shared lock (ErrOverflow).
func TestForceUnlockDuringReaderBackOff(t *testing.T) {
	t.Parallel()
	seg, err := shm.Create(testproc.SegmentPath(t), shm.Options{Options: layout.Options{Upgrades: 1, UpgradeReaders: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := w2.LockContext(ctx); err != nil {
		t.Fatalf("a writer after the forced unlock: %v", err)
	}
	_ = w2.Unlock()
}

// ForceUnlock while a live writer holds only the Writer word, waiting for
// a stuck upgrade holder (the case an operator forces): the writer's Lock
// goes on, sets stateWrite without the word and is granted; the next
// writer takes the free word, finds stateWrite set, adopts it as its own
// ("set by itself, or by a dead writer it took over") and is granted too.
// Skipped: see the report; the fix needs the writer to re-check its word
// after its stateWrite CAS and a rule for a stateWrite without a holder.
func TestForceUnlockWaitingWriterTwoOwners(t *testing.T) {
	t.Skip("known defect: ForceUnlock of a waiting writer lets it and the next writer both hold the unique lock")
	t.Parallel()
	seg, err := shm.Create(testproc.SegmentPath(t), shm.Options{Options: layout.Options{Upgrades: 1, UpgradeReaders: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	h, _ := Open(seg, 0)
	w, _ := Open(seg, 0)
	if err := h.LockUpgrade(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := w.acquireWriterWord(ctx, false); err != nil { // Lock's first step
		t.Fatal(err)
	}
	w.e.WriterTID.Store(w.tid)
	if _, err := ForceUnlock(seg, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.finishLock(ctx, false, false, false); err == nil {
		w2, _ := Open(seg, 0)
		ctx2, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if err := w2.LockContext(ctx2); err == nil {
			t.Fatal("two writers hold the unique lock after ForceUnlock")
		}
	}
}
