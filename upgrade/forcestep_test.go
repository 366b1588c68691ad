package upgrade_test

import (
	"context"
	"fmt"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// forceStepHelper (PATH STOPS) forces upgrade mutex 0 of the segment at
// PATH, saying how far it got: "busy" when it finds another force's lock
// held, "loaded" when it has read the writer's word and holder id, "took"
// when it has taken the word (each the first time only); at each of those
// named in STOPS (comma-separated, or "-" for none) it then waits for a
// line on stdin. At the end it prints "forced WRITER WAITING" (the
// identities, in hex) and exits.
func forceStepHelper(args []string) int {
	steps := testproc.NewSteps(args[1])
	upgrade.SetForceHooks(steps.Hook("busy"), steps.Hook("loaded"), steps.Hook("took"))
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	defer seg.Close()
	f, err := upgrade.ForceUnlock(seg, 0)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Printf("forced %x %x\n", f.Writer, f.WaitingWriter)
	return 0
}

// lockOnceHelper (PATH) takes the unique lock of mutex 0, waiting at most
// testTimeout, releases it and prints "locked".
func lockOnceHelper(args []string) int {
	seg, m, ok := openMutex0(args[0])
	if !ok {
		return 1
	}
	defer seg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := m.LockContext(ctx); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if err := m.Unlock(); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("locked")
	return 0
}

// openMutex0 opens, in a child, the segment at path and a handle on its
// upgrade mutex 0; it prints "open: ERR" and reports false if it cannot.
func openMutex0(path string) (*shm.Segment, *upgrade.Mutex, bool) {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		fmt.Println("open:", err)
		return nil, nil, false
	}
	m, err := upgrade.Open(seg, 0)
	if err != nil {
		seg.Close()
		fmt.Println("open:", err)
		return nil, nil, false
	}
	return seg, m, true
}
