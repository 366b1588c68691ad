package shm

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/futex"
	"github.com/shmlock/shmlock/layout"
)

// Operator locks: an operator's action on a lock that must not overlap
// another's action on the same lock (upgrade.ForceUnlock and, in pid/tid
// mode, spinlock.Lock.ForceUnlock: two forces of one mutex or slot at
// once can leave its lock word with nobody) takes that lock's operator
// lock first. It is kept out of the segment's memory, so that no process
// can die holding it and no format changes: it is an fcntl lock of an open
// file description (fsys.TryLockByte) on one byte of the segment file far
// past its end, operatorLockBase + kind<<32 + index, which the kernel
// drops when its holder dies. It is taken on the Segment's own
// description, which excludes every other Segment of the file, of this
// process or another; the Segment's goroutines, which share that
// description and so its locks, exclude each other with its
// operatorLocks. A take or release opens and closes nothing: the close of
// any descriptor of the file would drop every classic record lock
// (F_SETLK, lockf) the process holds on it, the application's own. The
// release unlocks explicitly (a child forked meanwhile shares the
// description until its exec, and the mapping shares it until it goes),
// and Close leaves the file open until the last release, so that a force
// in flight at Close keeps its lock to the end. It ignores the flock(2)
// of reboot recovery on the same file.
const operatorLockBase = 1 << 62 // past any file tmpfs can hold, below the largest offset (2^63-1)

// operatorLockOffset is the byte of the operator lock of entry i of k.
func operatorLockOffset(k layout.Kind, i int) int64 {
	return operatorLockBase + int64(k)<<32 + int64(i)
}

// operatorLocks are the operator locks a Segment holds.
type operatorLocks struct {
	mu   sync.Mutex         // also keeps Close from closing the file under a take
	held map[int64]struct{} // their bytes: a goroutine's take of one fails
	// closeLater: Close came while some were held, and left the file,
	// which their releases unlock through, to the last release.
	closeLater bool
}

// TryLockOperator takes the operator lock of entry i of table k if no
// other process, Segment or goroutine holds it (ok false then), and
// returns the function that releases it, which the caller must call, also
// after Close (a second call does nothing). The segment must be writable
// (ErrReadOnly: the kernel grants such a lock only on a file open for
// writing, and no tool that only reads needs it). The lock guards nothing
// by itself: the operations that must not overlap each take it. A caller
// that must wait uses LockOperator. A Close while it is held leaves it
// held, and the segment's file open, until its release. Neither the take
// nor the release opens or closes a descriptor of the file, which would
// drop the classic record locks (F_SETLK) the process holds on it.
func (s *Segment) TryLockOperator(k layout.Kind, i int) (unlock func(), ok bool, err error) {
	if err := s.writable(); err != nil {
		return nil, false, err
	}
	if i < 0 || i >= s.Len(k) {
		return nil, false, fmt.Errorf("shm: operator lock of %s %d: %w", k, i, ErrIndex)
	}
	testHookOperatorLock()
	off := operatorLockOffset(k, i)
	o := &s.operators
	o.mu.Lock()
	defer o.mu.Unlock()
	if s.closed.Load() {
		// A Close after the check above: it closed the file, or will
		// once the locks held now are released.
		return nil, false, ErrClosed
	}
	if _, mine := o.held[off]; mine {
		return nil, false, nil // another goroutine's
	}
	if ok, err = fsys.TryLockByte(s.file, off); err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("shm: operator lock of %s %d: %w", k, i, err)
		}
		return nil, false, err
	}
	if o.held == nil {
		o.held = make(map[int64]struct{})
	}
	o.held[off] = struct{}{}
	var once sync.Once
	return func() { once.Do(func() { s.unlockOperator(off) }) }, true, nil
}

// unlockOperator releases the operator lock at off, which this Segment
// holds, and closes the file if Close left that to it.
func (s *Segment) unlockOperator(off int64) {
	o := &s.operators
	o.mu.Lock()
	defer o.mu.Unlock()
	// It cannot fail but for a closed file, which the file is not while
	// a lock is held.
	_ = fsys.UnlockByte(s.file, off)
	delete(o.held, off)
	if o.closeLater && len(o.held) == 0 {
		o.closeLater = false
		_ = s.file.Close()
	}
}

// closeFile is Close's close of the segment's file, which it leaves to
// the last release of the operator locks still held, if any: their
// releases unlock through the file, and closing it would not end them
// (the mapping keeps the description open).
func (s *Segment) closeFile() error {
	o := &s.operators
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.held) > 0 {
		o.closeLater = true
		return nil
	}
	return s.file.Close()
}

// Waits for an operator lock held by another (LockOperator): an operator's
// action holds it for microseconds unless it is stopped, so the first
// looks come soon and the later ones no more often than operatorNapMax.
const (
	operatorNapMin = 20 * time.Microsecond
	operatorNapMax = 10 * time.Millisecond
)

// LockOperator is TryLockOperator, waiting while another holds the lock:
// it polls (the kernel's waiting take, F_OFD_SETLKW, cannot be given up
// when ctx is done), calling busy, if not nil, each time it finds the lock
// held, and gives up when ctx is done, with ctx's error wrapped and
// nothing changed. One stopped, or in a debugger, in the middle of its
// action holds the lock for as long: a tool should pass a deadline.
func (s *Segment) LockOperator(ctx context.Context, k layout.Kind, i int, busy func()) (unlock func(), err error) {
	nap := operatorNapMin
	for {
		unlock, ok, err := s.TryLockOperator(k, i)
		if err != nil || ok {
			return unlock, err
		}
		if busy != nil {
			busy()
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("waiting for another force of it in progress: %w", err) // the callers name the lock
		}
		futex.Nap(nap) // time.Sleep would stretch the first naps to hundreds of microseconds
		nap = min(2*nap, operatorNapMax)
	}
}

// testHookOperatorLock runs in TryLockOperator between its checks and
// the lock's take.
var testHookOperatorLock = func() {}
