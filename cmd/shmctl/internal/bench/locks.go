package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"sync"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

// The locks shmctl bench measures, by their --lock names. With a spinlock,
// each worker holds the lock through Lock.Locker with one identity for the
// whole run, so the two spinlock kinds differ only in the lock's mode; with
// the upgrade mutex, each worker has one handle (Mutex.Locker), whose Lock
// is the unique lock and RLock a shared hold.
//
// Token mode would rather have a fresh token per acquisition (the slot's design:
// one logical hold per token), which means a Guard and a NewToken for each
// Lock. Measured on the 2-vCPU reference VM, uncontended, that costs 27-28
// ns per pair against 8 ns for one token per worker (Guard.Lock+Release
// alone: 17 ns in process against Locker's 7.7; NewToken: 8 ns), which
// would measure the Guard API and the random source rather than the lock.
// A token is only an identity: reusing one per worker is sound as long as
// no two workers share it.
const (
	LockSpin      = "spin"          // spinlock in pid/tid mode, one NewHolder per worker
	LockSpinToken = "spin-token"    // spinlock in token mode, one NewToken per worker
	LockUpgrade   = "upgrade"       // upgrade mutex, one handle per worker: Lock, and LockShared in the shared workloads
	LockMgr       = "lockmgr"       // one lockmgr resource; exclusive, or collaborative for shared holds
	LockMgrEager  = "lockmgr-eager" // LockMgr with eager waiters (AcquireOptions.Eager)
)

// LockNames lists the --lock values.
func LockNames() []string {
	return []string{LockSpin, LockSpinToken, LockUpgrade, LockMgr, LockMgrEager}
}

// lockKind says how one --lock value is set up and what the JSON calls it.
type lockKind struct {
	peer   string      // the JSON's peer
	lock   string      // for detail: which lock
	how    string      // for detail: how each worker holds the lock
	shared bool        // has RLock/RUnlock, so the shared workloads run
	stats  layout.Kind // the table whose entries' contention counters are the lock's
	// open is a worker's handle on the lock in the sidecar segment, and
	// what closes the handle (not the segment).
	open func(seg *shm.Segment) (sync.Locker, func() error, error)
}

// Lock errors: Locker panics on one, where the harness's drivers call
// Fatal, and Work turns the panic into the worker's failure. Locker also
// takes a dead holder's lock over without a word; that only happens after a
// worker died holding the lock, and that worker's exit status and its stat
// slot, never marked done, fail the run already.
var lockKinds = map[string]lockKind{
	LockSpin: {
		peer:  "shmlock_spin",
		lock:  spinLockName(spinlock.PIDTID),
		how:   "one NewHolder per worker, Lock.Locker",
		stats: layout.KindOwnerSlots,
		open:  spinLocker(spinlock.PIDTID, spinlock.NewHolder),
	},
	LockSpinToken: {
		peer:  "shmlock_spin_token",
		lock:  spinLockName(spinlock.Token),
		how:   "one NewToken per worker, Lock.Locker",
		stats: layout.KindOwnerSlots,
		open:  spinLocker(spinlock.Token, spinlock.NewToken),
	},
	LockUpgrade: {
		peer:   "shmlock_upgrade",
		lock:   "shmlock_upgrade",
		how:    "one handle per worker, Mutex.Locker (Lock/Unlock, RLock/RUnlock)",
		shared: true,
		stats:  layout.KindUpgrades,
		open:   openUpgradeLocker,
	},
	LockMgr: {
		peer:   "shmlock_lockmgr",
		lock:   "shmlock_lockmgr",
		how:    "owner worker-PID, Acquire (waiting with retries) and Release of one resource",
		shared: true,
		stats:  layout.KindLockMgr,
		open:   mgrLockerOpener(waitForever),
	},
	LockMgrEager: {
		peer:   "shmlock_lockmgr_eager",
		lock:   "shmlock_lockmgr",
		how:    "owner worker-PID, Acquire (waiting with retries, Eager) and Release of one resource",
		shared: true,
		stats:  layout.KindLockMgr,
		open:   mgrLockerOpener(waitEager),
	},
}

// sidecar is the segment file that holds the lock, beside the shared file
// (the contract lets a driver create FILE.* files).
func sidecar(path string) string { return path + ".shm" }

// sidecarOptions size the segment: one owner slot, one upgrade mutex with a
// reader record for every possible worker, a lock-manager table with room
// for one resource with all the holders it may have (rw90's collaborative
// readers; more wait for one to leave), no transaction tables.
var sidecarOptions = shm.Options{Options: layout.Options{
	Slots: 1, Upgrades: 1, UpgradeReaders: MaxProcs, TxnRecords: -1, TxnArenaBytes: -1,
	LockMgrEntries: 1 + lockmgr.MaxHolders/layout.LockMgrHolders,
}}

// createLock makes the sidecar segment. One that exists (another user's
// segment, or one left by a run that was killed) is refused, never
// replaced: remove it with shmctl rm.
func createLock(path string) (*shm.Segment, error) {
	seg, err := shm.Create(sidecar(path), sidecarOptions)
	if errors.Is(err, shm.ErrExists) {
		return nil, fmt.Errorf("%w: %s exists, and bench makes its own segment (shmctl rm it)", ErrExists, sidecar(path))
	}
	return seg, err
}

// openLock is a worker's side: its handle on the lock, and a func that
// closes the handle and the segment.
func openLock(cfg Config, k lockKind) (sync.Locker, func() error, error) {
	seg, err := shm.Open(sidecar(cfg.Path), shm.Options{})
	if err != nil {
		return nil, nil, err
	}
	l, closeLock, err := k.open(seg)
	if err != nil {
		_ = seg.Close()
		return nil, nil, err
	}
	return l, func() error { return errors.Join(closeLock(), seg.Close()) }, nil
}

// spinLocker opens the spinlock in owner slot 0 in mode m, held by each
// worker with one identity from id for the whole run.
func spinLocker(m spinlock.Mode, id func() spinlock.Identity) func(*shm.Segment) (sync.Locker, func() error, error) {
	return func(seg *shm.Segment) (sync.Locker, func() error, error) {
		l, err := spinlock.Open(seg, 0, m)
		if err != nil {
			return nil, nil, err
		}
		return l.Locker(id()), noClose, nil
	}
}

// noClose closes a handle that holds nothing to close (a spinlock.Lock, a
// lockmgr.Manager).
func noClose() error { return nil }

func spinLockName(m spinlock.Mode) string { return fmt.Sprintf("spinlock, %v mode", m) }

// detail describes the lock for the JSON's detail.
func (k lockKind) detail() string {
	return fmt.Sprintf("shmlock %s, %s, segment FILE.shm; %s", k.lock, k.how, moduleVersion())
}

// moduleVersion names the shmlock build: module path and version, and the
// commit when the binary records one (-buildvcs).
func moduleVersion() string {
	const module = "github.com/shmlock/shmlock"
	version := "(devel)"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return module + " " + version
	}
	if bi.Main.Path == module && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		version += " rev " + rev[:min(len(rev), 12)]
		if modified == "true" {
			version += "+dirty"
		}
	}
	return module + " " + version
}

// openUpgradeLocker is a worker's handle on upgrade mutex 0: Lock is the
// unique lock, RLock a shared hold.
func openUpgradeLocker(seg *shm.Segment) (sync.Locker, func() error, error) {
	m, err := upgrade.Open(seg, 0)
	if err != nil {
		return nil, nil, err
	}
	return m.Locker(), m.Close, nil
}

// benchResource is the one resource the lockmgr workers share.
const benchResource = "bench"

// mgrLocker holds benchResource for one worker: exclusively for Lock,
// collaboratively for RLock, waiting as long as it takes (woken by
// releases). Errors panic, as Locker's do.
type mgrLocker struct {
	m     *lockmgr.Manager
	owner string
	opts  lockmgr.AcquireOptions
}

var (
	waitForever = lockmgr.AcquireOptions{Retries: lockmgr.RetryForever}
	waitEager   = lockmgr.AcquireOptions{Retries: lockmgr.RetryForever, Eager: true}
)

// mgrLockerOpener opens a worker's mgrLocker, acquiring with opts.
func mgrLockerOpener(opts lockmgr.AcquireOptions) func(seg *shm.Segment) (sync.Locker, func() error, error) {
	return func(seg *shm.Segment) (sync.Locker, func() error, error) {
		m, err := lockmgr.Open(seg, lockmgr.Options{})
		if err != nil {
			return nil, nil, err
		}
		return &mgrLocker{m: m, owner: "worker-" + strconv.Itoa(os.Getpid()), opts: opts}, noClose, nil
	}
}

func (l *mgrLocker) acquire(mode lockmgr.Mode) {
	if _, err := l.m.Acquire(context.Background(), benchResource, l.owner, mode, l.opts); err != nil {
		panic(err)
	}
}

func (l *mgrLocker) release() {
	if err := l.m.Release(benchResource, l.owner); err != nil {
		panic(err)
	}
}

func (l *mgrLocker) Lock()    { l.acquire(lockmgr.Exclusive) }
func (l *mgrLocker) Unlock()  { l.release() }
func (l *mgrLocker) RLock()   { l.acquire(lockmgr.Collaborative) }
func (l *mgrLocker) RUnlock() { l.release() }
