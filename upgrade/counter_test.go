package upgrade_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/upgrade"
)

// plain is data in Go memory that goroutines guard with an upgrade mutex
// of a segment, as a program would: plain variables, no atomics, so that
// the race detector checks that the mutex orders every access. It sees
// atomics on the segment's words not at all (they are outside Go's
// memory): only the mutex's annotations (internal/racesync) tell it.
type plain struct {
	counter int    // written under the unique lock, read under any hold
	upgrade int    // written under the upgrade lock (or the unique one), never read by readers
	token   uint64 // 1 + the fencing token (Generation) of the last unique or upgrade hold; 0 before any
}

// fence checks the fencing token of a unique or upgrade hold that has just
// begun (by Lock, LockUpgrade, or a writer's UniqueToUpgrade, which ends
// its unique hold): it must exceed the last one.
func fence(m *upgrade.Mutex, p *plain) error {
	g := m.Generation() + 1
	if g <= p.token {
		return fmt.Errorf("fencing token %d after %d", g-1, p.token-1)
	}
	p.token = g
	return nil
}

// An op takes one hold of m, possibly converts it, and reports the writes
// it made to p.counter and p.upgrade.
type op func(m *upgrade.Mutex, p *plain) (counter, upgrades int, err error)

var (
	opUnique op = func(m *upgrade.Mutex, p *plain) (int, int, error) {
		if err := m.Lock(); err != nil {
			return 0, 0, err
		}
		if err := fence(m, p); err != nil {
			return 0, 0, errors.Join(err, m.Unlock())
		}
		p.counter++
		p.upgrade++
		return 1, 1, m.Unlock()
	}
	opShared op = func(m *upgrade.Mutex, p *plain) (int, int, error) {
		if err := m.LockShared(); err != nil {
			return 0, 0, err
		}
		if p.counter < 0 {
			return 0, 0, errors.New("negative counter")
		}
		return 0, 0, m.UnlockShared()
	}
	opUpgrade op = func(m *upgrade.Mutex, p *plain) (int, int, error) {
		if err := m.LockUpgrade(); err != nil {
			return 0, 0, err
		}
		if err := fence(m, p); err != nil {
			return 0, 0, errors.Join(err, m.UnlockUpgrade())
		}
		_ = p.counter
		p.upgrade++
		return 0, 1, m.UnlockUpgrade()
	}
	// LockUpgrade, UpgradeToUnique, write, UniqueToUpgrade, UnlockUpgrade.
	opUpgradeRoundTrip op = func(m *upgrade.Mutex, p *plain) (int, int, error) {
		if err := m.LockUpgrade(); err != nil {
			return 0, 0, err
		}
		if err := fence(m, p); err != nil {
			return 0, 0, errors.Join(err, m.UnlockUpgrade())
		}
		p.upgrade++
		if err := m.UpgradeToUnique(); err != nil {
			return 0, 1, err
		}
		p.counter++
		if err := m.UniqueToUpgrade(); err != nil {
			return 1, 1, err
		}
		_ = p.counter
		p.upgrade++
		return 1, 2, m.UnlockUpgrade()
	}
	// LockUpgrade, UpgradeToUnique, write, UniqueToShared, UnlockShared.
	opUpgradeToShared op = func(m *upgrade.Mutex, p *plain) (int, int, error) {
		if err := m.LockUpgrade(); err != nil {
			return 0, 0, err
		}
		if err := fence(m, p); err != nil {
			return 0, 0, errors.Join(err, m.UnlockUpgrade())
		}
		if err := m.UpgradeToUnique(); err != nil {
			return 0, 0, err
		}
		p.counter++
		if err := m.UniqueToShared(); err != nil {
			return 1, 0, err
		}
		_ = p.counter
		return 1, 0, m.UnlockShared()
	}
	// Lock, write, UniqueToShared, UnlockShared.
	opUniqueToShared op = func(m *upgrade.Mutex, p *plain) (int, int, error) {
		if err := m.Lock(); err != nil {
			return 0, 0, err
		}
		if err := fence(m, p); err != nil {
			return 0, 0, errors.Join(err, m.Unlock())
		}
		p.counter++
		if err := m.UniqueToShared(); err != nil {
			return 1, 0, err
		}
		_ = p.counter
		return 1, 0, m.UnlockShared()
	}
	// Lock, write, UniqueToUpgrade (or Unlock if the upgrade lock is
	// taken), write under the upgrade lock, UnlockUpgrade.
	opUniqueToUpgrade op = func(m *upgrade.Mutex, p *plain) (int, int, error) {
		if err := m.Lock(); err != nil {
			return 0, 0, err
		}
		if err := fence(m, p); err != nil {
			return 0, 0, errors.Join(err, m.Unlock())
		}
		p.counter++
		switch err := m.UniqueToUpgrade(); {
		case errors.Is(err, upgrade.ErrWouldBlock):
			return 1, 0, m.Unlock()
		case err != nil:
			return 1, 0, err
		}
		if err := fence(m, p); err != nil {
			return 1, 0, errors.Join(err, m.UnlockUpgrade())
		}
		p.upgrade++
		return 1, 1, m.UnlockUpgrade()
	}
	// Through the sync.Locker adapter, as sync.RWMutex users would.
	// Its fast paths are copies of the handle's (see guard.go), so it
	// checks the fencing token too.
	opLocker op = func(m *upgrade.Mutex, p *plain) (int, int, error) {
		l := m.Locker()
		l.Lock()
		err := fence(m, p)
		p.counter++
		p.upgrade++
		l.Unlock()
		l.RLock()
		_ = p.counter
		l.RUnlock()
		return 1, 1, err
	}
)

// Goroutines of one process, each with a handle of its own on one mutex
// of a segment, guard plain Go variables with it in every mode and through
// every conversion; the totals must be exact, and under -race no access
// may be reported.
func TestPlainDataAcrossGoroutines(t *testing.T) {
	t.Parallel()
	goroutines, iters := 6, 1500
	if long() {
		iters = 20000
	}
	mixes := []struct {
		name string
		ops  []op
	}{
		{"unique", []op{opUnique}},
		{"unique-shared", []op{opUnique, opShared, opShared}},
		{"upgrade", []op{opUpgrade, opUnique}},
		{"upgrade-shared", []op{opUpgrade, opUpgradeRoundTrip, opShared}},
		{"conversions", []op{opUpgradeRoundTrip, opUpgradeToShared, opUniqueToShared, opUniqueToUpgrade, opShared}},
		{"locker", []op{opLocker, opUpgrade}},
	}
	for _, mix := range mixes {
		t.Run(mix.name, func(t *testing.T) {
			t.Parallel()
			seg, _ := newSegment(t)
			var p plain
			tallies := make([][2]int, goroutines) // each goroutine's writes to p.counter and p.upgrade
			var wg sync.WaitGroup
			start := make(chan struct{}) // all at once: alone, each would finish within its time slice
			for g := range goroutines {
				m := open(t, seg)
				wg.Go(func() {
					defer func() {
						if err := m.Close(); err != nil {
							t.Errorf("goroutine %d: Close: %v", g, err)
						}
					}()
					<-start
					for i := range iters {
						c, u, err := mix.ops[(g+i)%len(mix.ops)](m, &p)
						tallies[g][0] += c
						tallies[g][1] += u
						if err != nil {
							t.Errorf("goroutine %d, op %d: %v", g, i, err)
							return
						}
					}
				})
			}
			close(start)
			wg.Wait()
			var counter, upgrades int
			for _, n := range tallies {
				counter, upgrades = counter+n[0], upgrades+n[1]
			}
			require.Positive(t, counter+upgrades)
			require.Equal(t, counter, p.counter, "counter: every write under the unique lock")
			require.Equal(t, upgrades, p.upgrade, "upgrade counter: every write under the upgrade or unique lock")
			checkFree(t, status(t, seg))
		})
	}
}
