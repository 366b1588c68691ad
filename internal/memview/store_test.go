package memview_test

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/memview"
)

// A concurrent atomic load sees a 64-bit word's old or new value, never
// half of each, whatever store wrote it: readers of a lock word or an
// entry's version rely on it. A plain 64-bit store is two 32-bit ones on
// 32-bit platforms; run with GOARCH=386 to test those (where a
// goroutine tears such a store within some thousands of loads). Each value
// stored has equal halves, so a torn one shows as unequal halves.
func TestStoresOf64BitsAreNotTorn(t *testing.T) {
	stores := []struct {
		name  string
		store func(w *atomic.Uint64, v uint64)
	}{
		{"StoreRelease64", memview.StoreRelease64},
		{"StoreOwned", memview.StoreOwned},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			var w atomic.Uint64
			var stop atomic.Bool
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := uint64(1); !stop.Load(); i++ {
					s.store(&w, i&0xffffffff*0x1_0000_0001)
				}
			}()
			// Count the loads that saw a new value, so that the stores
			// looked at are as many however the goroutines are scheduled.
			torn, last := 0, uint64(0)
			for seen := 0; seen < 200_000; {
				v := w.Load()
				if v != last {
					seen, last = seen+1, v
				}
				if uint32(v) != uint32(v>>32) {
					torn++
				}
			}
			stop.Store(true)
			<-done
			require.Zero(t, torn, "loads that saw half of one store and half of another")
		})
	}
}
