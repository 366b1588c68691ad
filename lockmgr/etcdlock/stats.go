package etcdlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Statistics live in etcd beside the locks, written by the transactions
// that make the events, so every Manager reads the same numbers:
//
//   - each counter (grants, releases, conflicts, expired, reclaimed) is a
//     key that the event's transaction puts, unconditionally: etcd counts
//     the puts of a key in its Version, so the count is exact, and
//     concurrent transactions never conflict over it; a grant that its
//     acquisition took back (its answer was lost, say) counts as a
//     release, so every grant ends once in the counts;
//   - the total hold time cannot be counted so; each Manager keeps its
//     own total (its releases' hold times), written by each release under
//     a comparison of sequence numbers, so that of two releases in flight
//     the later total wins. Close folds it into the shared total
//     (stats/held/all), so the keys do not pile up; a Release after
//     Close starts the Manager's key anew, with its own time only.
type heldStats struct {
	mu         sync.Mutex
	seq, total uint64
}

func (h *heldStats) add(d time.Duration) (seq, total uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.total += uint64(d)
	return h.seq, h.total
}

// undo takes back the time of a release that did not happen; a later
// release's total carries the correction.
func (h *heldStats) undo(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total -= uint64(d)
}

// folded takes out of the running total what Close folded into the
// shared one: a Release after Close (a TTL hold outlives the session)
// writes the Manager's key anew, and the total it writes there must not
// count that time a second time.
func (h *heldStats) folded(total uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total -= total
}

const heldAll = "all" // not a lease's hex: it has an 'l'

func (m *Manager) heldKey() string { return fmt.Sprintf("%s%s%x", m.prefix, heldSeg, int64(m.session)) }

// heldOp writes this Manager's hold-time total, unless a later one of its
// releases wrote first.
func (m *Manager) heldOp(seq, total uint64) clientv3.Op {
	k := m.heldKey()
	put := clientv3.OpPut(k, heldValue(seq, total))
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
		[]clientv3.Op{put},
		[]clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k), "<", seqBytes(seq))},
			[]clientv3.Op{put}, nil)})
}

// foldHeld adds this Manager's hold-time total to the shared one and
// deletes its own key, within ctx (Close's).
func (m *Manager) foldHeld(ctx context.Context) error {
	mine, all := m.heldKey(), m.prefix+heldSeg+heldAll
	for range 16 {
		resp, err := m.c.Txn(ctx).Then(clientv3.OpGet(mine), clientv3.OpGet(all)).Commit()
		if err != nil {
			return unavailable(err)
		}
		my, al := ranged(resp.Responses[0]), ranged(resp.Responses[1])
		if len(my) == 0 {
			return nil
		}
		var allRev int64
		mineTotal := heldTotal(my[0].Value)
		total := mineTotal
		if len(al) > 0 {
			allRev = al[0].ModRevision
			total += heldTotal(al[0].Value)
		}
		resp, err = m.c.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(mine), "=", my[0].ModRevision),
			clientv3.Compare(clientv3.ModRevision(all), "=", allRev),
		).Then(clientv3.OpPut(all, heldValue(0, uint64(total))), clientv3.OpDelete(mine)).Commit()
		if err != nil {
			return unavailable(err)
		}
		if resp.Succeeded {
			m.held.folded(uint64(mineTotal))
			return nil
		}
	}
	return nil // others kept folding: this total stays readable where it is
}
