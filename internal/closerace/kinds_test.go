package closerace_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

// A kind is one lock and one blocking acquisition of it. A helper process
// holds the lock in a way that makes the acquisition wait (hold); the test
// process's waiters wait for it on a segment that it closes under them.
type kind struct {
	name    string
	waiters int // waiters on one segment at once
	// exclusive: at most one waiter may succeed at a time.
	exclusive bool
	hold      func(seg *shm.Segment) (release func() error, err error)
	waiter    func(tb testing.TB, seg *shm.Segment, h *holder) (waiter, error)
	// held is the number of holds the file records for this process, read
	// through another mapping (observer).
	held func(tb testing.TB, observer *shm.Segment) int
	// started, if set, reports whether the waiters' acquisitions have
	// begun (the test waits for it before it closes the segment): for an
	// operation that, begun after the Close, would not fail but run on.
	started func(tb testing.TB, seg *shm.Segment, waiters int) bool
	// checkGrants, if set, replaces check's comparison of held with the
	// grants.
	checkGrants func(tb testing.TB, observer *shm.Segment, granted, waiters int) string
	// trace is everything of the lock in the file that a waiter could
	// leave behind: holds, wait marks, sleeper registrations.
	trace func(tb testing.TB, observer *shm.Segment) string
	// take takes the lock without waiting and releases it, through
	// observer: the lock is not wedged.
	take func(observer *shm.Segment) error
}

// check requires that the file records exactly the holds of the waiters
// that succeeded: none for one that failed (no leaked hold), one for each
// that succeeded (no phantom hold).
func (k kind) check(tb testing.TB, observer *shm.Segment, granted, waiters, round int) {
	tb.Helper()
	if k.checkGrants != nil {
		if msg := k.checkGrants(tb, observer, granted, waiters); msg != "" {
			tb.Fatalf("round %d: %s", round, msg)
		}
		return
	}
	require.Equal(tb, granted, k.held(tb, observer), "round %d: the file records other holds than the waiters that succeeded", round)
}

// A waiter is one goroutine's handle and its acquisition.
type waiter interface {
	acquire() error // blocks; the test closes the segment under it
	release() error // releases what acquire took, after the segment's Close
	close() error   // releases what the waiter held before acquire, closes the handle
}

var kinds = []kind{
	upgradeKind("upgrade-Lock", 4, true, (*upgrade.Mutex).Lock, (*upgrade.Mutex).Unlock,
		func(st upgrade.Status, self uint64) int {
			return b2i(st.Writer == self && st.WriteLocked && !st.UpgradeLocked)
		}),
	upgradeKind("upgrade-LockUpgrade", 4, true, (*upgrade.Mutex).LockUpgrade, (*upgrade.Mutex).UnlockUpgrade,
		func(st upgrade.Status, self uint64) int { return b2i(st.Upgrader == self && st.UpgradeLocked) }),
	upgradeKind("upgrade-LockShared", 4, false, (*upgrade.Mutex).LockShared, (*upgrade.Mutex).UnlockShared,
		func(st upgrade.Status, self uint64) int {
			n := 0
			for _, r := range st.Readers {
				if r.Owner == self {
					n += int(r.Count)
				}
			}
			return n
		}),
	upgradeToUniqueKind(),
	spinKind("spinlock", 0, func(l *spinlock.Lock) waiter { return &spinWaiter{l: l} }),
	spinKind("coro-ProcessMutex", 1, func(l *spinlock.Lock) waiter {
		return &coroWaiter{m: coro.NewProcessMutex(coro.SpinLock(l))}
	}),
	lockmgrKind(),
	txnCloseKind(),
}

func kindNamed(name string) kind {
	for _, k := range kinds {
		if k.name == name {
			return k
		}
	}
	panic("closerace: no kind " + name)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

var self = proc.Self().Pack()

// upgrade mutex 0: the helper holds the unique lock.
func upgradeKind(name string, waiters int, exclusive bool, acquire, release func(*upgrade.Mutex) error,
	held func(upgrade.Status, uint64) int) kind {
	return kind{
		name: name, waiters: waiters, exclusive: exclusive,
		hold: func(seg *shm.Segment) (func() error, error) {
			return holdUpgrade(seg, (*upgrade.Mutex).Lock, (*upgrade.Mutex).Unlock)
		},
		waiter: func(_ testing.TB, seg *shm.Segment, _ *holder) (waiter, error) {
			m, err := upgrade.Open(seg, 0)
			return &upgradeWaiter{m: m, acq: acquire, rel: release}, err
		},
		held:  func(tb testing.TB, o *shm.Segment) int { return held(inspectUpgrade(tb, o), self) },
		trace: traceUpgrade,
		take:  takeUpgrade,
	}
}

// UpgradeToUnique: the waiter holds the upgrade lock and waits for the
// helper's shared hold to drain.
func upgradeToUniqueKind() kind {
	k := upgradeKind("upgrade-UpgradeToUnique", 1, true, (*upgrade.Mutex).UpgradeToUnique, (*upgrade.Mutex).UniqueToUpgrade,
		func(st upgrade.Status, self uint64) int { return b2i(st.Upgrader == self && st.Unique()) })
	k.hold = func(seg *shm.Segment) (func() error, error) {
		return holdUpgrade(seg, (*upgrade.Mutex).LockShared, (*upgrade.Mutex).UnlockShared)
	}
	k.waiter = func(_ testing.TB, seg *shm.Segment, _ *holder) (waiter, error) {
		m, err := upgrade.Open(seg, 0)
		if err != nil {
			return nil, err
		}
		if err := m.LockUpgrade(); err != nil {
			return nil, err
		}
		return &upgradeWaiter{m: m, acq: (*upgrade.Mutex).UpgradeToUnique, rel: (*upgrade.Mutex).UniqueToUpgrade,
			before: (*upgrade.Mutex).UnlockUpgrade}, nil
	}
	return k
}

// holdUpgrade takes a hold of mutex 0 with a handle of its own, which the
// release closes.
func holdUpgrade(seg *shm.Segment, take, release func(*upgrade.Mutex) error) (func() error, error) {
	m, err := upgrade.Open(seg, 0)
	if err != nil {
		return nil, err
	}
	if err := take(m); err != nil {
		return nil, err
	}
	return func() error { return errors.Join(release(m), m.Close()) }, nil
}

type upgradeWaiter struct {
	m        *upgrade.Mutex
	acq, rel func(*upgrade.Mutex) error
	before   func(*upgrade.Mutex) error // releases what the waiter held before acquire
}

func (w *upgradeWaiter) acquire() error { return w.acq(w.m) }
func (w *upgradeWaiter) release() error { return w.rel(w.m) }
func (w *upgradeWaiter) close() error {
	if w.before != nil {
		if err := w.before(w.m); err != nil {
			return err
		}
	}
	return w.m.Close()
}

func inspectUpgrade(tb testing.TB, o *shm.Segment) upgrade.Status {
	tb.Helper()
	st, err := upgrade.Inspect(o, 0)
	require.NoError(tb, err)
	return st
}

func traceUpgrade(tb testing.TB, o *shm.Segment) string {
	st := inspectUpgrade(tb, o)
	st.Generation = 0
	st.Inconsistent = false // nobody died here
	// The helper's record stays claimed while its handle is open: only
	// counts, and this process's records, are the waiters' business.
	var readers []upgrade.ReaderStatus
	for _, r := range st.Readers {
		if r.Count != 0 || r.Owner == self {
			readers = append(readers, r)
		}
	}
	st.Readers = readers
	return fmt.Sprintf("%+v raw writer word %#x", st, rawWriter(tb, o))
}

// rawWriter is the Writer word as it is, hungry mark included.
func rawWriter(tb testing.TB, o *shm.Segment) uint64 {
	e, err := o.Upgrade(0)
	require.NoError(tb, err)
	return e.Writer.Load()
}

func takeUpgrade(o *shm.Segment) error {
	m, err := upgrade.Open(o, 0)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.TryLock(); err != nil {
		return err
	}
	return m.Unlock()
}

// spinlock over owner slot index: the helper holds it.
func spinKind(name string, index int, newWaiter func(*spinlock.Lock) waiter) kind {
	open := func(seg *shm.Segment) (*spinlock.Lock, error) { return spinlock.Open(seg, index, spinlock.PIDTID) }
	return kind{
		name: name, waiters: 4, exclusive: true,
		hold: func(seg *shm.Segment) (func() error, error) {
			l, err := open(seg)
			if err != nil {
				return nil, err
			}
			g, err := l.Lock(spinlock.NewHolder())
			if err != nil {
				return nil, err
			}
			return g.Release, nil
		},
		waiter: func(_ testing.TB, seg *shm.Segment, _ *holder) (waiter, error) {
			l, err := open(seg)
			if err != nil {
				return nil, err
			}
			return newWaiter(l), nil
		},
		held: func(tb testing.TB, o *shm.Segment) int {
			l, err := open(o)
			require.NoError(tb, err)
			id, held := l.Owner()
			return b2i(held && id.PID == self)
		},
		trace: func(tb testing.TB, o *shm.Segment) string {
			l, err := open(o)
			require.NoError(tb, err)
			s := l.Slot()
			return fmt.Sprintf("pid %x tid %x recursion %d sleepers %d", s.PID.Load(), s.TID.Load(), s.RecursionCount.Load(), s.Sleepers())
		},
		take: func(o *shm.Segment) error {
			l, err := open(o)
			if err != nil {
				return err
			}
			g, err := l.TryLock(spinlock.NewHolder())
			if err != nil {
				return err
			}
			return g.Release()
		},
	}
}

type spinWaiter struct {
	l *spinlock.Lock
	g *spinlock.Guard
}

func (w *spinWaiter) acquire() (err error) { w.g, err = w.l.Lock(spinlock.NewHolder()); return err }
func (w *spinWaiter) release() error       { return w.g.Release() }
func (w *spinWaiter) close() error         { return nil }

type coroWaiter struct {
	m *coro.ProcessMutex
	g coro.ProcessGuard
}

func (w *coroWaiter) acquire() (err error) { w.g, err = w.m.Lock(context.Background()); return err }
func (w *coroWaiter) release() error       { return w.g.Unlock() }
func (w *coroWaiter) close() error         { return nil }

// lockmgr: resource "res", held exclusively by the helper; each waiter is
// an owner of its own, retrying until granted.
const resource = "res"

var owners atomic.Uint64

func lockmgrKind() kind {
	return kind{
		name: "lockmgr", waiters: 4, exclusive: true,
		hold: func(seg *shm.Segment) (func() error, error) {
			m, err := lockmgr.Open(seg, lockmgr.Options{})
			if err != nil {
				return nil, err
			}
			if _, err := m.Acquire(context.Background(), resource, "helper", lockmgr.Exclusive, lockmgr.AcquireOptions{}); err != nil {
				return nil, err
			}
			return func() error { return m.Release(resource, "helper") }, nil
		},
		waiter: func(_ testing.TB, seg *shm.Segment, _ *holder) (waiter, error) {
			m, err := lockmgr.Open(seg, lockmgr.Options{})
			return &lockmgrWaiter{m: m, owner: fmt.Sprintf("w%d", owners.Add(1))}, err
		},
		held: func(tb testing.TB, o *shm.Segment) int {
			n := 0
			for _, h := range inspectLockmgr(tb, o).Holders {
				n += b2i(h.PID == os.Getpid())
			}
			return n
		},
		trace: func(tb testing.TB, o *shm.Segment) string {
			ri := inspectLockmgr(tb, o)
			// Where the resource sits in the table is no state of its lock:
			// a free resource may be recycled out and come back elsewhere.
			ri.Version, ri.Entry = 0, 0
			for i := range ri.Holders {
				ri.Holders[i].AcquiredAt = ri.Holders[i].AcquiredAt.Round(0)
			}
			return fmt.Sprintf("%+v", ri)
		},
		take: func(o *shm.Segment) error {
			m, err := lockmgr.Open(o, lockmgr.Options{})
			if err != nil {
				return err
			}
			if _, err := m.Acquire(context.Background(), resource, "observer", lockmgr.Exclusive, lockmgr.AcquireOptions{}); err != nil {
				return err
			}
			return m.Release(resource, "observer")
		},
	}
}

func inspectLockmgr(tb testing.TB, o *shm.Segment) lockmgr.ResourceInfo {
	tb.Helper()
	m, err := lockmgr.Open(o, lockmgr.Options{})
	require.NoError(tb, err)
	ri, err := m.Inspect(resource)
	require.NoError(tb, err)
	return ri
}

type lockmgrWaiter struct {
	m     *lockmgr.Manager
	owner string
}

func (w *lockmgrWaiter) acquire() error {
	_, err := w.m.Acquire(context.Background(), resource, w.owner, lockmgr.Exclusive,
		lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
	return err
}
func (w *lockmgrWaiter) release() error { return w.m.Release(resource, w.owner) }
func (w *lockmgrWaiter) close() error   { return nil }
