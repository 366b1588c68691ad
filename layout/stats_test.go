package layout_test

import (
	"testing"
	"time"

	"github.com/shmlock/shmlock/layout"
)

func TestRecordWait(t *testing.T) {
	t.Parallel()
	var s layout.LockStats
	waits := []time.Duration{0, 10 * time.Microsecond, 11 * time.Microsecond, time.Millisecond,
		5 * time.Millisecond, 100 * time.Millisecond, time.Second, -time.Second}
	for i, d := range waits {
		s.RecordWait(d, i%2 == 1)
	}
	if got, want := s.Contended.Load(), uint64(len(waits)); got != want {
		t.Errorf("Contended: got %d, want %d", got, want)
	}
	if got, want := s.Timeouts.Load(), uint32(len(waits)/2); got != want {
		t.Errorf("Timeouts: got %d, want %d", got, want)
	}
	want := [layout.StatsBucketCount]uint32{3, 1, 1, 1, 1, 1}
	for i := range want {
		if got := s.WaitHist[i].Load(); got != want[i] {
			t.Errorf("WaitHist[%d]: got %d, want %d", i, got, want[i])
		}
	}
	if got, want := s.WaitNanos.Load(), uint64(1106021*time.Microsecond); got != want {
		t.Errorf("WaitNanos: got %d, want %d", got, want)
	}
	s.RecordSpunWait() // counted in the first bucket, with no time
	if got, want := s.Contended.Load(), uint64(len(waits)+1); got != want {
		t.Errorf("Contended after a spun wait: got %d, want %d", got, want)
	}
	if got := s.WaitHist[0].Load(); got != want[0]+1 {
		t.Errorf("WaitHist[0] after a spun wait: got %d, want %d", got, want[0]+1)
	}
	if got, want := s.WaitNanos.Load(), uint64(1106021*time.Microsecond); got != want {
		t.Errorf("WaitNanos after a spun wait: got %d, want %d (unchanged)", got, want)
	}
	var none *layout.LockStats
	none.RecordWait(time.Second, true) // a segment without stats: no panic
	none.RecordSpunWait()
	none.AddSleep()
	none.AddWakeup()
	none.AddReclaim()
}

func TestStatsIndex(t *testing.T) {
	t.Parallel()
	h := smallHeader(t) // 4 slots, 2 upgrades, 2 lockmgr entries, 1 txn record
	tests := []struct {
		kind  layout.Kind
		index int
		want  int
	}{
		{layout.KindOwnerSlots, 0, 0}, {layout.KindOwnerSlots, 3, 3}, {layout.KindOwnerSlots, 4, -1},
		{layout.KindUpgrades, 0, 4}, {layout.KindUpgrades, 1, 5}, {layout.KindUpgrades, 2, -1},
		{layout.KindLockMgr, 0, 6}, {layout.KindLockMgr, 1, 7},
		{layout.KindTxnRecords, 0, 8}, {layout.KindTxnRecords, 1, -1},
		{layout.KindData, 0, -1}, {layout.KindOwnerSlots, -1, -1},
	}
	for _, tc := range tests {
		if got := h.StatsIndex(tc.kind, tc.index); got != tc.want {
			t.Errorf("StatsIndex(%v, %d): got %d, want %d", tc.kind, tc.index, got, tc.want)
		}
	}
	empty, err := layout.Plan(layout.Options{DataBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	if got := empty.StatsIndex(layout.KindOwnerSlots, 0); got != -1 {
		t.Errorf("StatsIndex without locks: got %d, want -1", got)
	}
}
