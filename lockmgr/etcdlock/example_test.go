package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// Named locks in etcd, through the same lockmgr.Locker as the shm table.
// The README's "Beyond one machine" section is quickStart.
func Example() {
	if err := quickStart(context.Background(), server.Endpoints()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// acquired true
	// true RESOURCE_LOCKED
	// 1 grant, 1 conflict
}

func quickStart(ctx context.Context, endpoints []string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	m, err := etcdlock.New(ctx, cli, etcdlock.Options{Prefix: "example/"})
	if err != nil {
		return err
	}
	defer m.Close()
	var locks lockmgr.Locker = m // the code below runs on the shm table too

	info, err := locks.Acquire(ctx, "task:123", "agent-1", lockmgr.Exclusive,
		lockmgr.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		return err
	}
	fmt.Println(info.State, info.Version > 0) // the version is a fencing token: an etcd revision
	lost, _ := m.Lost("task:123", "agent-1")  // closed if the hold ends without its release

	_, err = locks.Acquire(ctx, "task:123", "agent-2", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	fmt.Println(errors.Is(err, lockmgr.ErrResourceLocked), lockmgr.Code(err))

	if err := locks.Release("task:123", "agent-1"); err != nil {
		return err
	}
	<-lost // and closed by the release
	o, err := locks.Overview()
	if err != nil {
		return err
	}
	fmt.Println(o.Stats.TotalLocks, "grant,", o.Stats.ConflictsDetected, "conflict")
	return nil
}
