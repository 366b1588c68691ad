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
	files   []ownFile
	removed bool
}

// An ownFile is a file the driver made: its path, and the file made there,
// held open so that one put in its place since is told apart (a file
// removed and made again may get the freed inode's number; an inode held
// open is not freed).
type ownFile struct {
	path string
	made *os.File // nil if it could not be opened once made: then it is not removed
}

// create runs mk, which makes a file and returns its path, and records
// the path if mk succeeded. A path that mk refused (it was there
// already) is never recorded: the driver removes only what it made.
func (f *ownFiles) create(mk func() (string, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	path, err := mk()
	if err == nil {
		made, _ := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		f.files = append(f.files, ownFile{path: path, made: made})
	}
	return err
}

// remove removes the files recorded that are still the ones made there,
// once, and returns the paths removed. A file another program put at one
// of the paths during the run (removed and made again, or renamed over
// it) is left alone: bench removes only what it made. (A swap between
// the check and the removal, a moment, is not caught.)
func (f *ownFiles) remove() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.removed {
		return nil
	}
	f.removed = true
	var removed []string
	for _, o := range f.files {
		if o.made == nil {
			continue
		}
		made, err := o.made.Stat()
		now, lerr := os.Lstat(o.path)
		if err == nil && lerr == nil && os.SameFile(made, now) && os.Remove(o.path) == nil {
			removed = append(removed, o.path)
		}
		_ = o.made.Close()
	}
	return removed
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
