package shm

import (
	"context"
	"fmt"
	"time"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/futex"
	"github.com/shmlock/shmlock/layout"
)

// Operator locks: an operator's action on a lock that must not overlap
// another's action on the same lock (upgrade.ForceUnlock and, in pid/tid
// mode, spinlock.Lock.ForceUnlock: two forces of one mutex or slot at
// once can leave its lock word with nobody) takes that lock's operator
// lock first. It is kept out of the segment's memory, so
// that no process can die holding it and no format changes: it is an
// fcntl lock of an open file description (fsys.TryLockByte) on one byte
// of the segment file far past its end, operatorLockBase + kind<<32 +
// index, which the kernel drops when its holder dies. Each take opens the
// file again, a description of its own, so that it excludes every other
// take, of another process, another Segment or a goroutine of this one,
// and its release (an explicit unlock, then a close: a close alone would
// leave the lock to a child forked meanwhile, until that child's exec)
// drops it whatever became of the Segment. It ignores the flock(2) of
// reboot recovery on the same file.
const operatorLockBase = 1 << 62 // past any file tmpfs can hold, below the largest offset (2^63-1)

// operatorLockOffset is the byte of the operator lock of entry i of k.
func operatorLockOffset(k layout.Kind, i int) int64 {
	return operatorLockBase + int64(k)<<32 + int64(i)
}

// TryLockOperator takes the operator lock of entry i of table k if no
// other process, Segment or goroutine holds it (ok false then), and
// returns the function that releases it, which the caller must call, also
// after Close (a second call does nothing). The segment must be writable
// (ErrReadOnly: the kernel grants such a lock only on a file open for
// writing, and no tool that only reads needs it). The lock guards nothing
// by itself: the operations that must not overlap each take it. A caller
// that must wait uses LockOperator.
func (s *Segment) TryLockOperator(k layout.Kind, i int) (unlock func(), ok bool, err error) {
	if err := s.writable(); err != nil {
		return nil, false, err
	}
	if i < 0 || i >= s.Len(k) {
		return nil, false, fmt.Errorf("shm: operator lock of %s %d: %w", k, i, ErrIndex)
	}
	testHookOperatorLock()
	unlock, ok, err = fsys.TryLockByte(s.file, operatorLockOffset(k, i))
	if err != nil {
		if s.closed.Load() {
			// A Close after the check above closed the file under the
			// reopen: that failure ("use of closed file") is the Close's.
			return nil, false, ErrClosed
		}
		return nil, false, fmt.Errorf("shm: operator lock of %s %d: %w", k, i, err)
	}
	return unlock, ok, nil
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
