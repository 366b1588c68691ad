package txn

import (
	"time"

	"github.com/shmlock/shmlock/internal/mono"
	"github.com/shmlock/shmlock/layout"
)

// Contention counters (layout.LockStats) of transaction records: a closer
// waiting for pins to drain, and a pinner waiting for a closing
// transaction to end, count against the record they wait on. Only those
// slow paths touch them.

// recordStats returns the counters of record col, or nil for the global
// column (the barrier's wait, which is no record's) and for a segment
// without counters.
func (s *Space) recordStats(col int) *layout.LockStats {
	if col < 0 || col >= len(s.recs) {
		return nil
	}
	return s.seg.LockStats(layout.KindTxnRecords, col)
}

// waited records a wait that began at start (0: it never slept, nothing
// to record) and ends with err, and returns err.
func (s *Space) waited(st *layout.LockStats, start int64, err error) error {
	if start != 0 {
		st.RecordWait(time.Duration(mono.Now()-start), err != nil)
	}
	return err
}
