package lockmgr_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/lockmgr"
)

// Goroutines of one process, each an owner of its own, guard plain Go
// counters with resources of the table: exclusive holders write, and in
// one mix collaborative holders read between them; in another there are
// more resources than the table has entries, so resources are recycled
// and come back in other entries between holds. The totals must be exact,
// and -race must report nothing: the race detector does not see the
// table's atomics (the segment is outside Go's memory), only the entry
// locks' annotations (internal/racesync).
func TestPlainCountersAcrossGoroutines(t *testing.T) {
	t.Parallel()
	goroutines, iters := 6, 300
	if long() {
		iters = 3000
	}
	mixes := []struct {
		name      string
		entries   int // the table's, the header included
		resources int
		readers   bool // odd goroutines read under collaborative holds
	}{
		{"exclusive", 8, 1, false},
		{"exclusive-collaborative", 8, 1, true},
		{"recycled", 3, 4, false},
	}
	for _, mix := range mixes {
		t.Run(mix.name, func(t *testing.T) {
			t.Parallel()
			m, _ := newManager(t, mix.entries, lockmgr.Options{})
			counters := make([]int, mix.resources) // counters[r] is resource r's
			tallies := make([]int, goroutines)     // each goroutine's writes
			ctx := context.Background()
			opts := lockmgr.AcquireOptions{Wait: testTimeout}
			var wg sync.WaitGroup
			start := make(chan struct{}) // all at once: alone, each would finish within its time slice
			for g := range goroutines {
				owner := fmt.Sprintf("owner-%d", g)
				reader := mix.readers && g%2 == 1
				wg.Go(func() {
					<-start
					for i := range iters {
						r := (g + i) % mix.resources
						res := fmt.Sprintf("counter-%d", r)
						mode := lockmgr.Exclusive
						if reader {
							mode = lockmgr.Collaborative
						}
						_, err := m.Acquire(ctx, res, owner, mode, opts)
						for errors.Is(err, lockmgr.ErrTableFull) { // every entry held: wait for one to be free
							runtime.Gosched()
							_, err = m.Acquire(ctx, res, owner, mode, opts)
						}
						if err != nil {
							t.Errorf("%s: acquire %s: %v", owner, res, err)
							return
						}
						if reader {
							_ = counters[r]
						} else {
							counters[r]++
							tallies[g]++
						}
						if err := m.Release(res, owner); err != nil {
							t.Errorf("%s: release %s: %v", owner, res, err)
							return
						}
					}
				})
			}
			close(start)
			wg.Wait()
			var want, got int
			for _, n := range tallies {
				want += n
			}
			for _, n := range counters {
				got += n
			}
			require.Positive(t, want)
			require.Equal(t, want, got, "every exclusive hold's increment")
		})
	}
}
