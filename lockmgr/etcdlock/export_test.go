package etcdlock

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// EndOrphanLosing records the end of owner's hold of resource as
// endOrphanKV does, from a ledger read at a revision that is not the
// ledger's (it has none): the transaction loses, as when another Manager
// recorded the end first. It reports whether it won.
func EndOrphanLosing(ctx context.Context, m *Manager, resource, owner string) (bool, error) {
	k := m.keys(resource, owner)
	rev, err := m.endOrphanKV(ctx, k, &mvccpb.KeyValue{Key: []byte(k.ledger), ModRevision: 1}, false)
	return rev != 0, err
}

// TombstoneTTL is tombstoneTTL, for tests that look for its leases.
const TombstoneTTL = tombstoneTTL

// Stopped is closed once m's keep-alive has ended and done what it does
// on its way out.
func Stopped(m *Manager) <-chan struct{} { return m.stopped }
