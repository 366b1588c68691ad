package coro_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/upgrade"
)

// A holder through a ProcessMutex over an upgrade mutex changes the hold's
// mode (UpgradeToUnique under the upgrade lock, UniqueToUpgrade under the
// unique lock, UniqueToShared under either once unique, UniqueToUpgrade
// and UpgradeToUnique under the unique lock) and forgets to change it back
// before Unlock: a misuse. Unlock must say so with a typed error and still
// end the hold. Before, the adapter's release failed (upgrade.ErrNotHeld),
// but the ProcessGuard's hold and this process's turn ended all the same:
// the handle kept the lock in the file for good, no guard could release
// it, every other process waited forever, and every later Lock here failed
// (ErrHeld). A hold downgraded to shared, and a unique lock that went to
// the upgrade lock and back, were left so after the fix for the two other
// modes: Unlock reported upgrade.ErrNotHeld and the handle kept its hold,
// which kept every writer out for good.
func TestUpgradeProcessMutexUnlockInAnotherMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		adapt  func(*upgrade.Mutex) coro.ProcessLock
		change func(*upgrade.Mutex) error
	}{
		{"upgradable left unique", coro.UpgradeUpgradable, (*upgrade.Mutex).UpgradeToUnique},
		{"unique left upgradable", coro.UpgradeUnique, (*upgrade.Mutex).UniqueToUpgrade},
		{"unique left shared", coro.UpgradeUnique, (*upgrade.Mutex).UniqueToShared},
		{"unique left upgraded", coro.UpgradeUnique, func(h *upgrade.Mutex) error {
			if err := h.UniqueToUpgrade(); err != nil {
				return err
			}
			return h.UpgradeToUnique()
		}},
		{"upgradable left shared", coro.UpgradeUpgradable, func(h *upgrade.Mutex) error {
			if err := h.UpgradeToUnique(); err != nil {
				return err
			}
			return h.UniqueToShared()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := newProcessSegment(t)
			seg, h, _ := openUpgrade(t, path)
			other, err := upgrade.Named(seg, rwName)
			require.NoError(t, err)
			defer other.Close()
			m := coro.NewProcessMutex(tc.adapt(h))

			g, err := m.Lock(context.Background())
			require.NoError(t, err)
			require.NoError(t, tc.change(h))
			require.ErrorIs(t, g.Unlock(), coro.ErrWrongMode)
			require.False(t, g.Held())
			require.NoError(t, other.TryLock(), "the lock is free in the file")
			require.NoError(t, other.Unlock())

			g, err = m.TryLock()
			require.NoError(t, err, "and here")
			require.NoError(t, g.Unlock())
		})
	}
}
