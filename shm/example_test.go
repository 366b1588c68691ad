package shm_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// A segment is made once and opened by every process that shares it (here
// two handles of one process, as two processes would have); a name claimed
// in one is found in the other. Locks are made on it by the packages
// spinlock, upgrade, lockmgr and txn.
func Example() {
	dir, err := os.MkdirTemp("", "shm-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "jobs")

	a, err := shm.OpenOrCreate(path, shm.Options{Options: layout.Options{Slots: 8}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	b, err := shm.Open(path, shm.Options{}) // another process would do this
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	i, err := a.Claim(layout.KindOwnerSlots, "queue")
	if err != nil {
		fmt.Println(err)
		return
	}
	j, err := b.Lookup(layout.KindOwnerSlots, "queue")
	fmt.Println(i == j, err, a.IsCreator(), b.IsCreator(), b.Len(layout.KindOwnerSlots))
	// Output: true <nil> true false 8
}

// The data a lock protects goes in a data region: claimed by name, with
// its size, by whichever process comes first, and found by the others
// (here a second handle, as another process would have). Both see the
// same bytes.
func ExampleSegment_Data() {
	dir, err := os.MkdirTemp("", "shm-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "jobs")

	a, err := shm.OpenOrCreate(path, shm.Options{}) // a 64 KiB data area by default
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	b, err := shm.Open(path, shm.Options{}) // another process would do this
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	mine, err := a.Data("queue", 4096)
	if err != nil {
		fmt.Println(err)
		return
	}
	theirs, err := b.Data("queue", 4096) // or b.Data("queue", 0): any size
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(mine.Fresh(), theirs.Fresh(), mine.Offset() == theirs.Offset(), theirs.Len())

	// Words that processes change at once are atomics.
	head, err := mine.Uint64(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	head.Add(42)
	seen, err := theirs.Uint64(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(seen.Load())

	_, err = b.Data("queue", 100)
	fmt.Println(errors.Is(err, shm.ErrRegionSize))
	// Output:
	// true false true 4096
	// 42
	// true
}
