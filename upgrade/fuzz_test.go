package upgrade_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/upgrade"
)

// FuzzEntry: whatever words an upgrade mutex's entry and its reader
// records hold (a damaged or hostile segment), the calls that do not wait
// return, with an error or not, and never panic or hang: Inspect, Check,
// the Try acquisitions (a grant is released again), a dry-run Reclaim,
// Reclaim and ForceUnlock.
func FuzzEntry(f *testing.F) {
	seg, _ := newSegment(f)
	ups, err := seg.Region(layout.KindUpgrades)
	require.NoError(f, err)
	readers, err := seg.Region(layout.KindUpgradeReaders)
	require.NoError(f, err)
	m, err := upgrade.Open(seg, 0)
	require.NoError(f, err)
	f.Cleanup(func() { _ = m.Close() })

	// Seeds: a free mutex, and one held every way this process can.
	f.Add(snapshot(ups, readers))
	require.NoError(f, m.LockShared())
	f.Add(snapshot(ups, readers))
	require.NoError(f, m.UnlockShared())
	require.NoError(f, m.LockUpgrade())
	f.Add(snapshot(ups, readers))
	require.NoError(f, m.UnlockUpgrade())
	require.NoError(f, m.Lock())
	f.Add(snapshot(ups, readers))
	require.NoError(f, m.Unlock())

	f.Fuzz(func(t *testing.T, data []byte) {
		clear(ups)
		clear(readers)
		n := copy(ups, data)
		copy(readers, data[n:])
		_, _ = upgrade.Inspect(seg, 0)
		_, _ = upgrade.Check(seg, 0)
		if m.TryLock() == nil {
			_ = m.Unlock()
		}
		if m.TryLockShared() == nil {
			_ = m.UnlockShared()
		}
		if m.TryLockUpgrade() == nil {
			if m.TryUpgradeToUnique() == nil {
				_ = m.Unlock()
			} else {
				_ = m.UnlockUpgrade()
			}
		}
		_, _ = upgrade.Reclaim(seg, 0, true)
		_, _ = upgrade.Reclaim(seg, 0, false)
		_, _ = upgrade.ForceUnlock(seg, 0)
		_, _ = upgrade.Inspect(seg, 0)
	})
}

func snapshot(regions ...[]byte) []byte {
	var b []byte
	for _, r := range regions {
		b = append(b, r...)
	}
	return b
}
