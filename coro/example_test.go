package coro_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

func ExampleMutex() {
	var mu coro.Mutex
	ctx := context.Background()

	g, err := mu.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held:", g.Held())
	fmt.Println("unlock:", g.Unlock())
	fmt.Println("again:", g.Unlock())
	// Output:
	// held: true
	// unlock: <nil>
	// again: coro: guard does not hold the mutex
}

func ExampleMutex_Lock_timeout() {
	var mu coro.Mutex
	g, _ := mu.Lock(context.Background())
	defer g.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := mu.Lock(ctx); errors.Is(err, context.DeadlineExceeded) {
		fmt.Println("gave up; the lock is still held:", g.Held())
	}
	// Output:
	// gave up; the lock is still held: true
}

func ExampleMutex_TryLock() {
	var mu coro.Mutex
	g, ok := mu.TryLock()
	fmt.Println(ok)
	_, ok = mu.TryLock()
	fmt.Println(ok)
	_ = g.Unlock()
	// Output:
	// true
	// false
}

func ExampleMutex_LockOn() {
	var mu coro.Mutex
	loop := coro.NewLoop()
	defer loop.Close()

	g, _ := mu.Lock(context.Background())
	done := make(chan struct{})
	for i := range 3 {
		// Queued in order; each continuation runs on the loop's goroutine.
		err := mu.LockOn(context.Background(), loop, func(g coro.Guard, err error) {
			if err != nil {
				fmt.Println(err)
				return
			}
			fmt.Println("turn", i)
			_ = g.Unlock() // hands the mutex to the next waiter
			if i == 2 {
				close(done)
			}
		})
		if err != nil {
			fmt.Println(err)
		}
	}
	_ = g.Unlock()
	<-done
	// Output:
	// turn 0
	// turn 1
	// turn 2
}

func ExampleLoop() {
	loop := coro.NewLoop()
	for i := range 3 {
		_ = loop.Post(func() { fmt.Println("step", i) })
	}
	loop.Close()
	<-loop.Done()
	fmt.Println(loop.Post(func() {}))
	// Output:
	// step 0
	// step 1
	// step 2
	// coro: loop is closed
}

// A lock that other processes share, waited for with a deadline: the
// goroutines of this process queue in order, and a wait that times out
// leaves nothing behind.
func ExampleProcessMutex() {
	path := fmt.Sprintf("/dev/shm/shmlock-example-coro-%d", os.Getpid())
	seg, err := shm.Create(path, shm.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer shm.Remove(path) // runs after Close
	defer seg.Close()

	lock, err := spinlock.Named(seg, "jobs", spinlock.PIDTID)
	if err != nil {
		fmt.Println(err)
		return
	}
	mu := coro.NewProcessMutex(coro.SpinLock(lock))

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	g, err := mu.Lock(ctx)
	if err != nil {
		fmt.Println(err) // the deadline passed first
		return
	}
	if g.Reclaimed() {
		fmt.Println("the previous holder died: repair the jobs")
	}
	fmt.Println("holding jobs")
	fmt.Println("unlock:", g.Unlock())
	// Output:
	// holding jobs
	// unlock: <nil>
}
