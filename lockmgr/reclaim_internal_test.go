package lockmgr

import (
	"context"
	"testing"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// A holder that releases and exits between a dry run's snapshot of the
// holds, which had its hold, and the dry run's check that it lives: the
// check says dead, and a dry run that trusted its snapshot reported a dead
// holder's hold (shmctl reclaim --dry-run) that no Reclaim would end. The
// release runs at the hook between the two, so the interleaving is exact;
// the holder's identity is a process that has exited. (Not parallel: the
// hook is the package's.)
func TestReclaimDryRunAfterCleanRelease(t *testing.T) {
	seg, err := shm.Create(testproc.SegmentPath(t), shm.Options{Options: layout.Options{Slots: 1, LockMgrEntries: 8}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = seg.Close() })
	holder, err := Open(seg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checker, err := Open(seg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	holder.t.self = testproc.ExitedIdentity(t)
	if _, err := holder.Acquire(context.Background(), "res", "owner", Exclusive, AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	released := false
	testHookStep = func(step string) {
		if step == "reclaim:snapshot" && !released {
			released = true
			if err := holder.Release("res", "owner"); err != nil {
				t.Error(err)
			}
		}
	}
	defer func() { testHookStep = nil }()
	ended, err := checker.Reclaim(true)
	if err != nil {
		t.Fatal(err)
	}
	if !released {
		t.Fatal("the dry run did not take its snapshot of the hold")
	}
	if len(ended) != 0 {
		t.Errorf("dry run %+v: a dead holder's hold reported after a clean release", ended)
	}
}
