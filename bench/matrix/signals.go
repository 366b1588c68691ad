package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/stopsig"
)

// stopper ends a matrix that SIGINT, SIGTERM or SIGHUP stops (Ctrl-C,
// timeout(1), a closed terminal). Before, the matrix died at once: the
// driver running then went on alone, and its shared file and sidecars
// stayed in /dev/shm if it never ended (a wedged lock) or was killed too.
// Now the running driver gets the same signal (and is killed after the
// runner's wait delay), its files are removed as after any run, and the
// matrix exits 128+N without writing results: a sitting cut short is no
// sitting.
type stopper struct {
	ctx    context.Context // cancelled by the signal: no driver starts after it
	cancel context.CancelFunc
	// mu is held by a driver run until its files are removed, and while
	// the results are written: the stop waits for both, so it never
	// leaves a driver's files or half a results file.
	mu       sync.Mutex
	sig      syscall.Signal // set before ctx is cancelled
	cleanups []func()       // under mu
	log      io.Writer
	exit     func(code int) // os.Exit; a test's hook
}

// newStopper makes the stop signals (stopsig.Signals) stop the matrix
// until stop is called.
func newStopper(log io.Writer, exit func(int)) (s *stopper, stop func()) {
	s = &stopper{log: log, exit: exit}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, stopsig.On(s.stopBy)
}

// stopBy stops the running driver, waits for its files' removal, runs
// the cleanups and exits 128+sig. It keeps mu: nothing runs after it.
func (s *stopper) stopBy(sig syscall.Signal) {
	s.sig = sig
	s.cancel()
	s.mu.Lock()
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	fmt.Fprintf(s.log, "matrix: stopped by %s: the running driver stopped, its files removed, no results written\n", unix.SignalName(sig))
	s.exit(stopsig.ExitStatus(sig))
}

// context is what a driver runs under; a nil stopper's never ends.
func (s *stopper) context() context.Context {
	if s == nil {
		return context.Background()
	}
	return s.ctx
}

// hold keeps the stop waiting until the returned func is called.
func (s *stopper) hold() (release func()) {
	if s == nil {
		return func() {}
	}
	s.mu.Lock()
	return s.mu.Unlock
}

// stopping is the signal that stopped the matrix, or 0.
func (s *stopper) stopping() syscall.Signal {
	if s == nil || s.ctx.Err() == nil {
		return 0
	}
	return s.sig
}

// atStop adds a cleanup that a stop runs (the baseline's temporary
// tree, an empty output directory the matrix made).
func (s *stopper) atStop(f func()) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}
