package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shmlock/shmlock/internal/etcdtest"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// Named locks in etcd, through the same lockmgr.Locker as the shm table.
func Example() {
	ctx := context.Background()
	cli, err := etcdtest.Client(server.Endpoints()...) // clientv3.New(clientv3.Config{...})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	m, err := etcdlock.New(ctx, cli, etcdlock.Options{Prefix: "example/"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	var locks lockmgr.Locker = m

	info, err := locks.Acquire(ctx, "task:123", "agent-1", lockmgr.Exclusive,
		lockmgr.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(info.State, info.Version > 0) // the version is a fencing token

	// The holder learns if the hold ends without its release.
	lost, _ := m.Lost("task:123", "agent-1")

	_, err = locks.Acquire(ctx, "task:123", "agent-2", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	fmt.Println(errors.Is(err, lockmgr.ErrResourceLocked), lockmgr.Code(err))

	if err := locks.Release("task:123", "agent-1"); err != nil {
		fmt.Println(err)
	}
	<-lost
	o, _ := locks.Overview()
	fmt.Println(o.Stats.TotalLocks, "grant,", o.Stats.ConflictsDetected, "conflict")
	// Output:
	// acquired true
	// true RESOURCE_LOCKED
	// 1 grant, 1 conflict
}
