package lockmgr_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// Named resource locks shared by every process that opens the segment.
// The README's "Named resource locks" section is quickStart.
func Example() {
	path := fmt.Sprintf("/dev/shm/lockmgr-example-%d", os.Getpid())
	defer shm.Remove(path)
	if err := quickStart(context.Background(), path); err != nil {
		fmt.Println(err)
	}
	// Output:
	// acquired version 1
	// true RESOURCE_LOCKED
	// 1 grant, 1 conflict
}

func quickStart(ctx context.Context, path string) error {
	seg, err := shm.OpenOrCreate(path, shm.Options{}) // a lock table of 64 entries
	if err != nil {
		return err
	}
	defer seg.Close()
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	if err != nil {
		return err
	}

	info, err := m.Acquire(ctx, "task:123", "agent-1", lockmgr.Exclusive,
		lockmgr.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		return err
	}
	fmt.Println(info.State, "version", info.Version) // the version is a fencing token

	// Another owner (in this process or any other) meets the conflict at
	// once, unless it asks to retry (Retries, Wait, Backoff).
	_, err = m.Acquire(ctx, "task:123", "agent-2", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	fmt.Println(errors.Is(err, lockmgr.ErrResourceLocked), lockmgr.Code(err))

	if err := m.Release("task:123", "agent-1"); err != nil {
		return err
	}
	fmt.Println(m.Stats().TotalLocks, "grant,", m.Stats().ConflictsDetected, "conflict")
	return nil
}

// Collaborative holders share a resource; each checks before it writes
// that nobody joined or left since it read the version.
func ExampleManager_CheckVersion() {
	path := fmt.Sprintf("/dev/shm/lockmgr-example-cv-%d", os.Getpid())
	seg, err := shm.Create(path, shm.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer shm.Remove(path)
	defer seg.Close()
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	a, _ := m.Acquire(ctx, "doc:7", "editor-a", lockmgr.Collaborative, lockmgr.AcquireOptions{})
	b, _ := m.Acquire(ctx, "doc:7", "editor-b", lockmgr.Collaborative, lockmgr.AcquireOptions{})
	fmt.Println("a:", m.CheckVersion("doc:7", a.Version))
	fmt.Println("b:", m.CheckVersion("doc:7", b.Version))
	_ = m.Release("doc:7", "editor-a")
	_ = m.Release("doc:7", "editor-b")
	// Output:
	// a: lockmgr: version is no longer current (VERSION_CONFLICT): "doc:7" is at version 2, not 1
	// b: <nil>
}
