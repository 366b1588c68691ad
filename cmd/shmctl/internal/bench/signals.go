package bench

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/stopsig"
)

// ownFiles are the files a driver made (the shared file and the lock's
// segment), which it removes when it ends, and also when a signal ends it
// first: Ctrl-C, timeout(1)'s SIGTERM or a closed terminal killed the
// driver at once and left both in /dev/shm. The workers die with the
// driver (their parent-death signal), so nothing else outlives it.
type ownFiles struct {
	// mu is held while a file is made and recorded, and while they are
	// removed: a signal that comes while the driver makes one waits for
	// its record, so none escapes the removal, and a removal never runs
	// twice.
	mu      sync.Mutex
	paths   []string
	removed bool
}

// create runs mk, which makes a file and returns its path, and records
// the path if mk succeeded. A path that mk refused (it was there
// already) is never recorded: the driver removes only what it made.
func (f *ownFiles) create(mk func() (string, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	path, err := mk()
	if err == nil {
		f.paths = append(f.paths, path)
	}
	return err
}

// remove removes the files recorded, once, and returns their paths.
func (f *ownFiles) remove() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.removed {
		return nil
	}
	f.removed = true
	for _, p := range f.paths {
		_ = os.Remove(p)
	}
	return f.paths
}

// removeOnSignal makes SIGINT, SIGTERM and SIGHUP remove the files and
// exit 128+N (saying so on stderr) until stop is called (stopsig.On).
func (f *ownFiles) removeOnSignal() (stop func()) {
	return stopsig.On(func(sig syscall.Signal) {
		if removed := f.remove(); len(removed) > 0 {
			fmt.Fprintf(os.Stderr, "shmctl: bench stopped by %s: removed %s\n", unix.SignalName(sig), strings.Join(removed, " and "))
		}
		os.Exit(stopsig.ExitStatus(sig))
	})
}
