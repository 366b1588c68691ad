package shm_test

import (
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
