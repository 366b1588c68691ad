package lockmgr_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
)

// A damaged header whose insertion reach (its Next word) is short of a
// resource's entry: lookups miss the resource, inserts find it. Check says
// so, and an acquisition that needs room for one more holder neither loops
// nor fails: the insert that finds the entry restores the reach, grow
// then finds it too and links an overflow entry (the fuzzer found the
// loop: FuzzTable/6f9d28d10f71be60).
func TestDamagedReach(t *testing.T) {
	t.Parallel()
	m, seg := newManager(t, 8, lockmgr.Options{Logger: discard()})
	mem, err := seg.Region(layout.KindLockMgr)
	require.NoError(t, err)
	ctx := context.Background()

	// y takes x's home entry, so x lies one entry past it.
	home, y := m.HomeEntry("x"), ""
	for i := 0; y == ""; i++ {
		require.Less(t, i, 1000, "no name shares x's home")
		if n := fmt.Sprintf("y%d", i); m.HomeEntry(n) == home {
			y = n
		}
	}
	for _, h := range []struct{ resource, owner string }{{y, "a"}, {"x", "a"}, {"x", "b"}} {
		_, err := m.Acquire(ctx, h.resource, h.owner, lockmgr.Collaborative, lockmgr.AcquireOptions{})
		require.NoError(t, err)
	}
	reach := mem[20:24] // the header entry's Next
	require.NotZero(t, binary.LittleEndian.Uint32(reach))
	found, err := m.Check()
	require.NoError(t, err)
	require.Empty(t, found)

	binary.LittleEndian.PutUint32(reach, 0)
	found, err = m.Check()
	require.NoError(t, err)
	require.Len(t, found, 1)
	require.Contains(t, found[0], `resource "x" lies 1 entries past its home, beyond the reach lookups trust (0)`)

	done := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, "x", "c", lockmgr.Collaborative, lockmgr.AcquireOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "the third holder gets an overflow record")
	case <-time.After(testTimeout):
		t.Fatal("the acquisition loops")
	}
	require.EqualValues(t, 1, binary.LittleEndian.Uint32(reach), "the insert that found x restored the reach")
	found, err = m.Check()
	require.NoError(t, err)
	require.Empty(t, found)
	info, err := m.Inspect("x")
	require.NoError(t, err)
	require.Len(t, info.Holders, 3)
}
