package metrics_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/metrics"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// An unnamed slot whose index is another slot's name is labelled "#index",
// so that the two never share a series.
func TestUnnamedSlotWhoseIndexIsAName(t *testing.T) {
	t.Parallel()
	path := newSegment(t) // 4 slots, slot 0 named "queue"
	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	named, err := spinlock.Named(seg, "3", spinlock.PIDTID)
	require.NoError(t, err)
	t.Cleanup(func() { _ = named.Close() })
	require.NotEqual(t, 3, named.Index(), "the slot named 3 is not slot 3")
	// Slot 3, unclaimed, is listed while it is held.
	third, err := spinlock.Open(seg, 3, spinlock.PIDTID)
	require.NoError(t, err)
	t.Cleanup(func() { _ = third.Close() })
	g, err := third.TryLock(spinlock.NewHolder())
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Release() })

	v, err := metrics.Read(openRO(t, path), time.Now())
	require.NoError(t, err)
	got := map[int]string{}
	for _, l := range v.Locks {
		if l.Kind == metrics.KindSpinlock {
			got[l.Index] = l.Label
		}
	}
	require.Equal(t, "3", got[named.Index()])
	require.Equal(t, "#3", got[3])
}

// Read of a segment with many slots, half of them claimed: labelling the
// unnamed half once searched every claim for each (quadratic in the
// table).
func BenchmarkReadManyClaims(b *testing.B) {
	const slots = 4096
	opts := sizes
	opts.Slots = slots
	path := newSegmentOf(b, opts)
	seg, err := shm.Open(path, shm.Options{})
	require.NoError(b, err)
	b.Cleanup(func() { _ = seg.Close() })
	for i := range slots/2 - 1 { // the segment has "queue" already
		l, err := spinlock.Named(seg, fmt.Sprintf("lock-%d", i), spinlock.PIDTID)
		require.NoError(b, err)
		b.Cleanup(func() { _ = l.Close() })
	}
	ro := openRO(b, path)
	for b.Loop() {
		if _, err := metrics.Read(ro, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}
