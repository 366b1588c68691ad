package txn_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/txn"
)

// Readers guard plain Go data with pins: each adds to a tally of its own
// while it holds a pin, and the owner reads every tally as soon as its
// close returns. A close returns only once every pin is released, and the
// race detector must see that too: it does not see the pin counters (they
// are in the segment, outside Go's memory), only the pins' annotations
// (internal/racesync). Per-transaction pins and global ones (a barrier
// close).
func TestPinsSynchronizeBeforeClose(t *testing.T) {
	t.Parallel()
	const (
		readers = 4
		// pins is the most pins a reader takes. Few enough that the race
		// detector keeps their history: it forgets the accesses of a
		// goroutine that went on for long (hundreds of thousands of calls)
		// and, without the annotations, this test would then pass anyway.
		pins = 300
	)
	for _, barrier := range []bool{false, true} {
		name := "per-transaction"
		if barrier {
			name = "barrier"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			seg, _ := newSegment(t, layout.Options{})
			sp := newSpace(t, seg)
			tx, err := sp.Begin(txn.BeginOptions{Barrier: barrier})
			require.NoError(t, err)
			ref, err := tx.Alloc(pattern(0, 64))
			require.NoError(t, err)

			tallies := make([]int, readers) // tallies[i]: reader i's reads, counted under its pins
			pinned := make(chan struct{}, readers)
			var wg sync.WaitGroup
			defer wg.Wait()
			// The readers live until the tallies are read: the race
			// detector may miss a race with a goroutine that has ended.
			done := make(chan struct{})
			defer close(done)
			for i := range readers {
				wg.Go(func() {
					defer func() { <-done }()
					for n := range pins {
						// Not ctx: its mutex would order the readers before the close.
						b, err := sp.Borrow(context.Background(), ref)
						if errors.Is(err, txn.ErrClosing) || errors.Is(err, txn.ErrClosed) {
							return
						}
						if err != nil {
							t.Errorf("reader %d: %v", i, err)
							return
						}
						if err := checkBytes(b.Bytes(), 0); err != nil {
							t.Errorf("reader %d: %v", i, err)
						}
						tallies[i]++
						b.Release()
						if n == 0 {
							pinned <- struct{}{} // orders the first tally only
						}
					}
				})
			}
			for range readers {
				<-pinned
			}
			if barrier {
				b, err := txn.NewBarrier(sp)
				require.NoError(t, err)
				require.NoError(t, b.Close(ctx, tx))
			} else {
				require.NoError(t, tx.RequestCloseAndWait(ctx))
			}
			total := 0
			for i, n := range tallies { // ordered by the pins' releases alone
				require.Positive(t, n, "reader %d", i)
				total += n
			}
			t.Logf("%d reads under pins before the close", total)
		})
	}
}
