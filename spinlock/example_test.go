package spinlock_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// A lock over a slot in process memory: one holder at a time, and every
// release bumps the generation.
func Example() {
	l := spinlock.New(spinlock.NewInProcessState(), spinlock.PIDTID)
	me := spinlock.NewHolder()

	var g spinlock.Guard
	if err := g.Lock(l, me); err != nil {
		fmt.Println(err)
		return
	}
	// ... the critical section ...
	_, err := l.TryLock(spinlock.NewHolder())
	fmt.Println("another holder:", err)
	if err := g.Release(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("generation:", l.Generation())
	// Output:
	// another holder: spinlock: lock is held
	// generation: 1
}

// In Token mode whoever has the guard may release: here the goroutine that
// locks hands the guard to another, which releases it.
func ExampleGuard_handoff() {
	l := spinlock.New(spinlock.NewInProcessState(), spinlock.Token)
	handoff := make(chan *spinlock.Guard)
	var wg sync.WaitGroup
	wg.Go(func() {
		g := <-handoff
		fmt.Println("receiver holds it:", g.Held())
		fmt.Println("receiver releases:", g.Release())
	})

	g := new(spinlock.Guard)
	if err := g.Lock(l, spinlock.NewToken()); err != nil {
		fmt.Println(err)
		return
	}
	handoff <- g // from here on, only the receiver uses g
	wg.Wait()
	_, held := l.Owner()
	fmt.Println("still held:", held)
	// Output:
	// receiver holds it: true
	// receiver releases: <nil>
	// still held: false
}

// Processes that name the same lock in a segment share it; if a holder
// dies, the next one to lock is told to repair what it protects. The
// README's "Go quick start" is quickStart.
func ExampleNamed() {
	path := fmt.Sprintf("/dev/shm/shmlock-example-%d", os.Getpid())
	defer shm.Remove(path)
	if err := quickStart(path); err != nil {
		fmt.Println(err)
	}
	// Output:
	// holding queue (generation 0), job 1
}

func quickStart(path string) error {
	// Every process runs this; exactly one creates the segment, the others open it.
	seg, err := shm.OpenOrCreate(path, shm.Options{}) // a bare name means /dev/shm/NAME; mode 0600
	if err != nil {
		return err
	}
	defer seg.Close()

	// The data the lock protects lives in the segment too: a data region,
	// made by the first process that names it, found by the others.
	queue, err := seg.Data("queue", 4096) // zeros at first; never moved or freed
	if err != nil {
		return err
	}

	// Unrelated processes that name one lock share it.
	lock, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	if err != nil {
		return err
	}
	defer lock.Close()         // drops this handle's reference to the name (after the Release below)
	me := spinlock.NewHolder() // who holds it: this process and a holder id
	g, err := lock.Lock(me)    // or TryLock, TryLockFor(d), LockContext(ctx)
	if err != nil {
		return err
	}
	defer g.Release() // a release still works after seg.Close
	if g.Inconsistent() {
		// A holder died holding the lock (kill -9, a crash): the data it
		// protects may be half-updated. Every holder is told until one
		// repairs it and says so (g.Reclaimed says whether this hold was
		// the one that took the lock over).
		fmt.Println("a holder died: repair the queue")
		if err := g.MarkConsistent(); err != nil {
			return err
		}
	}
	// Under the lock, plain reads and writes of the region are safe.
	n := binary.LittleEndian.Uint64(queue.Bytes()) + 1
	binary.LittleEndian.PutUint64(queue.Bytes(), n)
	fmt.Printf("holding queue (generation %d), job %d\n", lock.Generation(), n)
	return nil
}

// A Lock serves as a sync.Locker for one holder.
func ExampleLock_Locker() {
	l := spinlock.New(spinlock.NewInProcessState(), spinlock.PIDTID)
	var mu sync.Locker = l.Locker(spinlock.NewHolder())
	mu.Lock()
	_, held := l.Owner()
	fmt.Println("held:", held)
	mu.Unlock()
	_, held = l.Owner()
	fmt.Println("held:", held)
	// Output:
	// held: true
	// held: false
}
