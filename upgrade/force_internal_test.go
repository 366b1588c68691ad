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
