package upgrade_test

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/peerwork"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// record is the 64-byte record the tests protect: eight words that every
// writer sets to one new value, so a reader that sees two different values
// saw a write in progress (a torn read). It lives in the scratch lockmgr
// entry; its words are atomics only so that the race detector looks at the
// lock, not at the test.
type record [8]*atomic.Uint64

func recordOf(seg *shm.Segment) (record, error) {
	var r record
	mem, err := seg.Region(layout.KindLockMgr)
	if err != nil {
		return r, err
	}
	for k := range r {
		if r[k], err = memview.Uint64(mem, uint64(8*k)); err != nil {
			return r, err
		}
	}
	return r, nil
}

// read returns the first word and whether all eight agree.
func (r record) read() (uint64, bool) {
	v := r[0].Load()
	for k := 1; k < len(r); k++ {
		if r[k].Load() != v {
			return v, false
		}
	}
	return v, true
}

// fenceOf is the word after the record: 1 + the last fencing token
// (Generation) that a holder of the unique or upgrade lock saw, 0 before
// any.
func fenceOf(seg *shm.Segment) (*atomic.Uint64, error) {
	mem, err := seg.Region(layout.KindLockMgr)
	if err != nil {
		return nil, err
	}
	return memview.Uint64(mem, 8*uint64(len(record{})))
}

// fenced checks the token of a unique or upgrade hold that has just
// begun: it must exceed every token an earlier such hold saw (those holds
// exclude each other, so the fence word needs no more than they give).
// It reports a stale token.
func fenced(m *upgrade.Mutex, fence *atomic.Uint64) bool {
	g := m.Generation() + 1
	stale := g <= fence.Load()
	fence.Store(g)
	return stale
}

// write stores v in the first n words.
func (r record) write(v uint64, n int) {
	for k := range n {
		r[k].Store(v)
	}
}

func openHelper(path string) (*shm.Segment, *upgrade.Mutex, record, error) {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		return nil, nil, record{}, err
	}
	m, err := upgrade.Open(seg, 0)
	if err != nil {
		return nil, nil, record{}, err
	}
	rec, err := recordOf(seg)
	return seg, m, rec, err
}

// mix says how mixedOps splits its operations, in twentieths: shared
// reads, then Lock writes; the rest are upgrades.
type mix struct{ shared, unique uint64 }

var (
	readMostly = mix{shared: 18, unique: 1} // 90% shared, 5% Lock, 5% upgrades
	// writersAndUpgraders is half Lock writes and half upgrades, no
	// reader: Lock's one-CAS fast path and LockUpgrade meet as often as
	// they can (Dekker's pair, state.go).
	writersAndUpgraders = mix{shared: 0, unique: 10}
)

// mixedOps runs iters operations of the mixed workload on m: shared
// reads, Lock writes and upgrades (read under the upgrade lock, upgrade,
// write, then leave through UniqueToUpgrade or UniqueToShared), as mx
// splits them. It returns the number of writes, of torn reads, and of
// unique or upgrade holds whose fencing token was not above every earlier
// one (fence: see fenced).
func mixedOps(m *upgrade.Mutex, rec record, fence *atomic.Uint64, iters int, seed uint64, mx mix) (writes, torn, stale uint64, err error) {
	fences := func() {
		if fenced(m, fence) {
			stale++
		}
	}
	check := func(e error, what string) {
		if e != nil && err == nil {
			err = fmt.Errorf("%s: %w", what, e)
		}
	}
	// Every other shared and unique hold goes through the Locker, whose
	// methods are copies of the handle's fast paths (guard.go); it panics
	// on an error, which fails the caller all the same.
	l := m.Locker()
	for i := 0; i < iters && err == nil; i++ {
		viaLocker := i%2 == 1
		switch r := peerwork.SplitMix64(&seed) % 20; {
		case r < mx.shared && viaLocker:
			l.RLock()
			if _, ok := rec.read(); !ok {
				torn++
			}
			l.RUnlock()
		case r < mx.shared:
			check(m.LockShared(), "LockShared")
			if _, ok := rec.read(); !ok {
				torn++
			}
			check(m.UnlockShared(), "UnlockShared")
		case r < mx.shared+mx.unique && viaLocker:
			l.Lock()
			fences()
			rec.write(rec[0].Load()+1, len(rec))
			writes++
			l.Unlock()
		case r < mx.shared+mx.unique:
			check(m.Lock(), "Lock")
			fences()
			rec.write(rec[0].Load()+1, len(rec))
			writes++
			check(m.Unlock(), "Unlock")
		default:
			check(m.LockUpgrade(), "LockUpgrade")
			fences()
			if _, ok := rec.read(); !ok {
				torn++
			}
			check(m.UpgradeToUnique(), "UpgradeToUnique")
			rec.write(rec[0].Load()+1, len(rec))
			writes++
			if peerwork.SplitMix64(&seed)%2 == 0 {
				check(m.UniqueToUpgrade(), "UniqueToUpgrade")
				if _, ok := rec.read(); !ok {
					torn++
				}
				check(m.UnlockUpgrade(), "UnlockUpgrade")
			} else {
				check(m.UniqueToShared(), "UniqueToShared")
				if _, ok := rec.read(); !ok {
					torn++
				}
				check(m.UnlockShared(), "UnlockShared after UniqueToShared")
			}
		}
	}
	return writes, torn, stale, err
}

func rwHelper(args []string) int {
	iters, _ := strconv.Atoi(args[1])
	seed, _ := strconv.ParseUint(args[2], 10, 64)
	mx := readMostly
	if len(args) > 3 && args[3] == "writers-and-upgraders" {
		mx = writersAndUpgraders
	}
	seg, m, rec, err := openHelper(args[0])
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	defer seg.Close()
	fence, err := fenceOf(seg)
	if err != nil {
		fmt.Println("fence:", err)
		return 1
	}
	writes, torn, stale, err := mixedOps(m, rec, fence, iters, seed, mx)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if err := m.Close(); err != nil {
		fmt.Println("close:", err)
		return 1
	}
	fmt.Printf("writes %d torn %d stale %d\n", writes, torn, stale)
	return 0
}

// holdHelper takes a hold and keeps it until killed. Modes: shared,
// upgrade, unique, unique-half (Lock, then half a write), unique-try-half
// (the same with TryLock, whose hold is in the stateWrite form), upgraded-half
// (upgrade to unique, then half a write), pending (upgrade lock, then an
// UpgradeToUnique that the parent's shared hold keeps waiting), queued
// (prints "held" first, then waits in Lock behind the parent),
// queued-shared and queued-upgrade (likewise, waiting in LockShared and
// LockUpgrade).
func holdHelper(args []string) int {
	seg, m, rec, err := openHelper(args[0])
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	defer seg.Close()
	switch mode := args[1]; mode {
	case "shared":
		err = m.LockShared()
	case "upgrade":
		err = m.LockUpgrade()
	case "unique":
		err = m.Lock()
	case "unique-half":
		if err = m.Lock(); err == nil {
			rec.write(rec[0].Load()+1, len(rec)/2)
		}
	case "unique-try-half":
		// TryLock has no fast path: the hold is in its stateWrite form.
		if err = m.TryLock(); err == nil {
			rec.write(rec[0].Load()+1, len(rec)/2)
		}
	case "upgraded-half":
		if err = m.LockUpgrade(); err == nil {
			if err = m.UpgradeToUnique(); err == nil {
				rec.write(rec[0].Load()+1, len(rec)/2)
			}
		}
	case "queued":
		// Queue behind the parent's unique lock; the parent kills this
		// process while it waits, marked hungry.
		fmt.Println("held")
		err = m.Lock()
	case "queued-shared":
		fmt.Println("held")
		err = m.LockShared()
	case "queued-upgrade":
		// Likewise in LockUpgrade, holding the upgrade holder's word.
		fmt.Println("held")
		err = m.LockUpgrade()
	case "pending":
		if err = m.LockUpgrade(); err == nil {
			fmt.Println("upgrade held")
			err = m.UpgradeToUnique()
		}
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("held")
	time.Sleep(time.Hour)
	return 0
}
