package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// The README's quick start: readers share the mutex, and an upgrade
// holder reads, decides to write, and upgrades without letting a writer
// in between. Every process that names "table" shares the mutex.
func Example() {
	path := fmt.Sprintf("/dev/shm/shmlock-upgrade-example-%d", os.Getpid())
	if err := quickStart(path); err != nil {
		fmt.Println(err)
	}
	_ = shm.Remove(path)
	// Output:
	// upgraded: the table is ours alone
	// back to the upgrade lock
}

// quickStart is the README's "Upgrade mutex" code, word for word.
func quickStart(path string) error {
	ctx := context.Background()
	seg, err := shm.OpenOrCreate(path, shm.Options{})
	if err != nil {
		return err
	}
	defer seg.Close()
	m, err := upgrade.Named(seg, "table") // one handle per holder
	if err != nil {
		return err
	}
	defer m.Close()

	// Readers: any number at once, in any processes.
	if err := m.LockShared(); err != nil {
		return err
	}
	// ... read ...
	if err := m.UnlockShared(); err != nil {
		return err
	}

	// The upgrade lock: readers may still come in; no other upgrader or writer.
	if err := m.LockUpgrade(); err != nil {
		return err
	}
	defer m.UnlockUpgrade()
	if m.Reclaimed() {
		fmt.Println("the previous upgrade holder died: check the table")
	}
	// ... read, and decide to write: WithUnique waits for the readers to
	// leave (keeping new ones out), runs f alone, then goes back to the
	// upgrade lock.
	err = m.WithUnique(ctx, func() error {
		fmt.Println("upgraded: the table is ours alone")
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Println("back to the upgrade lock")
	return nil
}

// A scoped upgrade: Upgrade returns a guard whose Close goes back to the
// upgrade lock. A cancelled upgrade leaves the upgrade lock held.
func ExampleMutex_Upgrade() {
	path := fmt.Sprintf("/dev/shm/shmlock-upgrade-example2-%d", os.Getpid())
	seg, err := shm.Create(path, shm.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer shm.Remove(path) // runs after Close
	defer seg.Close()
	m, err := upgrade.Open(seg, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	reader, err := upgrade.Open(seg, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reader.Close()

	if err := m.LockUpgrade(); err != nil {
		fmt.Println(err)
		return
	}
	defer m.UnlockUpgrade()

	// A reader holds on: the upgrade cannot finish, and gives up when the
	// context is done, still holding the upgrade lock.
	if err := reader.LockShared(); err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = m.Upgrade(ctx)
	fmt.Println("cancelled:", errors.Is(err, context.Canceled))
	if err := reader.UnlockShared(); err != nil {
		fmt.Println(err)
		return
	}

	u, err := m.Upgrade(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("a reader now:", reader.TryLockShared())
	if err := u.Close(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("a reader after Close:", reader.TryLockShared())
	_ = reader.UnlockShared()
	// Output:
	// cancelled: true
	// a reader now: upgrade: would block
	// a reader after Close: <nil>
}

// Locker adapts a handle to sync.Locker, with RLock and RUnlock like
// sync.RWMutex.
func ExampleMutex_Locker() {
	path := fmt.Sprintf("/dev/shm/shmlock-upgrade-example3-%d", os.Getpid())
	seg, err := shm.Create(path, shm.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer shm.Remove(path)
	defer seg.Close()
	m, err := upgrade.Open(seg, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()

	l := m.Locker()
	l.RLock()
	l.RUnlock()
	l.Lock()
	st, _ := upgrade.Inspect(seg, 0)
	fmt.Println("write locked:", st.WriteLocked)
	l.Unlock()
	// Output:
	// write locked: true
}
