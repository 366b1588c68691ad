package metrics_test

import (
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/metrics"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

// fuzzedKinds are the tables FuzzRead damages, in the order its input
// fills them: what a monitor reads of every lock. Of the txn arena only
// its control area and pin table (fuzzedArenaBytes): the objects are not
// read.
var fuzzedKinds = []layout.Kind{
	layout.KindSlotDirectory, layout.KindUpgradeDirectory, layout.KindOwnerSlots,
	layout.KindUpgrades, layout.KindUpgradeReaders, layout.KindLockMgr, layout.KindLockStats,
	layout.KindClaimRefs, layout.KindRegionDirectory, layout.KindTxnRecords, layout.KindTxnArena,
}

// fuzzSizes are FuzzRead's tables: the test segments' (sizes), and two
// transaction records in a small arena, so that the txn table is read
// too.
var fuzzSizes = func() layout.Options {
	o := sizes
	o.TxnRecords, o.TxnArenaBytes = 2, 4096
	return o
}()

// fuzzedArenaBytes is the part of fuzzSizes' txn arena that FuzzRead
// damages: the control area and the pin table.
func fuzzedArenaBytes() int {
	rows, rowSize := layout.TxnPinRows(fuzzSizes.TxnRecords, uint64(fuzzSizes.TxnArenaBytes))
	return layout.TxnCtlAreaSize + rows*int(rowSize)
}

// FuzzRead: whatever words the tables hold (a damaged or hostile segment;
// the header stays valid, or Open would refuse it), a monitor's read
// returns, with an error or not, and never panics; every label of a scrape
// is valid UTF-8 (Prometheus refuses others), and the scrape of a segment
// that could be read succeeds.
func FuzzRead(f *testing.F) {
	path := newSegmentOf(f, fuzzSizes)
	raw, err := shm.Open(path, shm.Options{})
	require.NoError(f, err)
	f.Cleanup(func() { _ = raw.Close() })
	// An open transaction with a pin, for the seeds.
	sp, err := txn.Open(raw)
	require.NoError(f, err)
	f.Cleanup(func() { _ = sp.Close() })
	tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 512})
	require.NoError(f, err)
	pin, err := tx.TryPin()
	require.NoError(f, err)
	f.Cleanup(pin.Release)
	regions := make([][]byte, len(fuzzedKinds))
	for j, k := range fuzzedKinds {
		regions[j], err = raw.Region(k)
		require.NoError(f, err)
		if k == layout.KindTxnArena {
			regions[j] = regions[j][:fuzzedArenaBytes()]
		}
	}
	var seed []byte
	for _, r := range regions {
		seed = append(seed, r...)
	}
	f.Add(seed)
	f.Add([]byte{})
	bad := append([]byte(nil), seed...)
	for i := range bad {
		if bad[i] >= 'a' && bad[i] <= 'z' {
			bad[i] = 0xff // every name's letters
		}
	}
	f.Add(bad)
	ro := openRO(f, path)
	reg := prometheus.NewRegistry()
	require.NoError(f, reg.Register(metrics.NewCollector(ro)))
	lockmgrAt := -1
	for j, k := range fuzzedKinds {
		if k == layout.KindLockMgr {
			lockmgrAt = j
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, r := range regions {
			clear(r)
			data = data[copy(r, data):]
		}
		// No entry lock held by garbage: a reader would wait out its
		// liveness checks (FuzzTable in lockmgr does the same).
		mgr := regions[lockmgrAt]
		for off := 0; off+8 <= len(mgr); off += layout.LockMgrEntrySize {
			clear(mgr[off : off+8])
		}
		_, rerr := metrics.Read(ro, time.Now())
		mfs, err := reg.Gather()
		if rerr == nil {
			require.NoError(t, err, "a segment Read could read scrapes")
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					require.True(t, utf8.ValidString(lp.GetValue()), "%s %s=%q", mf.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	})
}
