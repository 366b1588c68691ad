package etcdlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shmlock/shmlock/lockmgr"
)

// resource gathers the keys of one resource as read.
type resource struct {
	name             string
	holds            map[string]*mvccpb.KeyValue // by owner: the h keys
	ledgers          []*mvccpb.KeyValue
	version          int64
	declared, incons bool
}

// parse groups the keys under P r/ by resource, in key order.
func (m *Manager) parse(kvs []*mvccpb.KeyValue) []*resource {
	root := m.prefix + "r/"
	var out []*resource
	var cur *resource
	for _, kv := range kvs {
		rest, ok := strings.CutPrefix(string(kv.Key), root)
		if !ok {
			continue
		}
		esc, sub, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		name := unescape(esc)
		if cur == nil || cur.name != name {
			cur = &resource{name: name, holds: map[string]*mvccpb.KeyValue{}}
			out = append(out, cur)
		}
		switch {
		case sub == versionKey:
			cur.version = kv.ModRevision
		case sub == inconsKey:
			cur.incons = true
		case sub == declKey:
			cur.declared = true
		case strings.HasPrefix(sub, holdSeg):
			cur.holds[ownerOfKey(kv.Key)] = kv
		case strings.HasPrefix(sub, ledgerSeg):
			cur.ledgers = append(cur.ledgers, kv)
		}
	}
	return out
}

// info describes r as the shm Manager's Inspect does. A hold is a ledger:
// Acquired while its key lives, Expired once its lease took the key and
// nobody recorded the end yet (which marks the resource inconsistent at
// once). Queued keys are waiters, not holders.
func (m *Manager) info(ctx context.Context, r *resource) (lockmgr.ResourceInfo, error) {
	ri := lockmgr.ResourceInfo{Resource: r.name, Version: uint64(r.version), Declared: r.declared,
		Inconsistent: r.incons, Holders: []lockmgr.HolderInfo{}}
	live := 0
	for _, l := range r.ledgers {
		hv, err := decodeHold(l.Value)
		if err != nil {
			return ri, err
		}
		hi := lockmgr.HolderInfo{Owner: hv.Owner, PID: hv.PID, Host: hv.Host, State: lockmgr.Expired}
		if hv.Acquired != 0 {
			hi.AcquiredAt = time.Unix(0, hv.Acquired)
		}
		if kv := r.holds[ownerOfKey(l.Key)]; kv != nil {
			hi.State, hi.Alive = lockmgr.Acquired, true
			live++
			if ri.Mode == 0 {
				ri.Mode = modeOfKey(kv.Key)
			}
			if kv.Lease != 0 && clientv3.LeaseID(kv.Lease) != m.session && hv.TTL > 0 {
				ttl, err := m.c.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
				if err != nil {
					return ri, m.rpcErr(ctx, err)
				}
				if ttl.TTL > 0 {
					hi.ExpiresAt = time.Now().Add(time.Duration(ttl.TTL) * time.Second)
				}
			}
		} else {
			ri.Inconsistent = true
		}
		ri.Holders = append(ri.Holders, hi)
	}
	switch {
	case len(ri.Holders) == 0:
		ri.State = lockmgr.Unlocked
	case live == 0:
		ri.State = lockmgr.Expired
	default:
		ri.State = lockmgr.Acquired
	}
	return ri, nil
}

// Inspect describes resource; a resource without keys is Unlocked.
func (m *Manager) Inspect(name string) (lockmgr.ResourceInfo, error) {
	if err := lockmgr.CheckResource(name); err != nil {
		return lockmgr.ResourceInfo{}, err
	}
	ctx, cancel := m.reqCtx()
	defer cancel()
	k := m.keys(name, "")
	resp, err := m.c.Get(ctx, k.base, clientv3.WithPrefix())
	if err != nil {
		return lockmgr.ResourceInfo{}, m.rpcErr(ctx, err)
	}
	rs := m.parse(resp.Kvs)
	if len(rs) == 0 {
		return lockmgr.ResourceInfo{Resource: name, State: lockmgr.Unlocked, Holders: []lockmgr.HolderInfo{}}, nil
	}
	return m.info(ctx, rs[0])
}

// Overview reads every resource, the statistics and the declared-only
// switch in one transaction, so they agree with each other. A resource
// is listed while it has keys: from its first grant to its last
// release, and for as long as it is declared or inconsistent. Capacity is
// 0: etcd has no fixed table.
func (m *Manager) Overview() (lockmgr.Overview, error) {
	ctx, cancel := m.reqCtx()
	defer cancel()
	resp, err := m.c.Txn(ctx).Then(
		clientv3.OpGet(m.prefix+"r/", clientv3.WithPrefix()),
		clientv3.OpGet(m.prefix+statsSeg, clientv3.WithPrefix()),
		clientv3.OpGet(m.prefix+declaredOnlyKey),
	).Commit()
	if err != nil {
		return lockmgr.Overview{}, m.rpcErr(ctx, err)
	}
	var o lockmgr.Overview
	o.DeclaredOnly = len(ranged(resp.Responses[2])) > 0
	o.Resources = []lockmgr.ResourceInfo{}
	for _, r := range m.parse(ranged(resp.Responses[0])) {
		ri, err := m.info(ctx, r)
		if err != nil {
			return lockmgr.Overview{}, err
		}
		o.Resources = append(o.Resources, ri)
		for _, h := range ri.Holders {
			if h.State == lockmgr.Acquired {
				o.Stats.ActiveLocks++
			}
		}
		for _, l := range r.ledgers {
			if r.holds[ownerOfKey(l.Key)] == nil {
				if hv, err := decodeHold(l.Value); err == nil && hv.TTL > 0 {
					o.Stats.ExpiredLocks++ // past its TTL, not yet recorded
					o.Stats.ExpiredHolds++
				}
			}
		}
	}
	o.Stats.Resources = len(o.Resources)
	var held time.Duration
	for _, kv := range ranged(resp.Responses[1]) {
		name := strings.TrimPrefix(string(kv.Key), m.prefix+statsSeg)
		if strings.HasPrefix(name, "held/") {
			held += heldTotal(kv.Value)
			continue
		}
		n := uint64(kv.Version)
		switch name {
		case ctrGrants:
			o.Stats.TotalLocks = n
		case ctrReleases:
			o.Stats.Released = n
		case ctrConflicts:
			o.Stats.ConflictsDetected = n
		case ctrExpired:
			o.Stats.ExpiredLocks += n
		case ctrReclaimed:
			o.Stats.Reclaimed = n
		}
	}
	o.Stats.HoldTime = held
	if o.Stats.Released > 0 {
		o.Stats.AverageHoldTime = held / time.Duration(o.Stats.Released)
	}
	return o, nil
}

// CheckVersion reports whether version is still resource's current
// version: nil if so, ErrVersionConflict if any hold began or ended since
// (an end that etcd made, a lease's expiry, counts as soon as it
// happened, recorded or not).
func (m *Manager) CheckVersion(name string, version uint64) error {
	if err := lockmgr.CheckResource(name); err != nil {
		return err
	}
	ctx, cancel := m.reqCtx()
	defer cancel()
	k := m.keys(name, "")
	resp, err := m.c.Get(ctx, k.base, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return m.rpcErr(ctx, err)
	}
	var cur int64
	stale := false
	for _, r := range m.parse(resp.Kvs) {
		cur = r.version
		for _, l := range r.ledgers {
			if r.holds[ownerOfKey(l.Key)] == nil {
				stale = true // ended by its lease, not yet recorded
			}
		}
	}
	if stale || cur == 0 || uint64(cur) != version {
		return fmt.Errorf("%w: %q is at version %d, not %d", lockmgr.ErrVersionConflict, name, cur, version)
	}
	return nil
}

// maxTxnOps is how many operations Declare puts in one transaction:
// etcd's default limit is 128.
const maxTxnOps = 100

// Declare marks resources as declared: while the table accepts declared
// resources only (SetDeclaredOnly) they are the only ones that can be
// acquired, and they stay listed. Every name is checked before any is
// declared.
func (m *Manager) Declare(resources ...string) error {
	for _, r := range resources {
		if err := lockmgr.CheckResource(r); err != nil {
			return err
		}
	}
	ctx, cancel := m.reqCtx()
	defer cancel()
	for len(resources) > 0 {
		n := min(len(resources), maxTxnOps)
		ops := make([]clientv3.Op, 0, n)
		seen := map[string]bool{}
		for _, r := range resources[:n] {
			if !seen[r] {
				seen[r] = true
				ops = append(ops, clientv3.OpPut(m.keys(r, "").decl, ""))
			}
		}
		if _, err := m.c.Txn(ctx).Then(ops...).Commit(); err != nil {
			return m.rpcErr(ctx, err)
		}
		resources = resources[n:]
	}
	return nil
}

// Undeclare makes resource an ordinary resource again.
func (m *Manager) Undeclare(name string) error {
	if err := lockmgr.CheckResource(name); err != nil {
		return err
	}
	ctx, cancel := m.reqCtx()
	defer cancel()
	k := m.keys(name, "")
	// The version goes with the declaration if nothing else keeps the
	// resource: as a release of its last hold would have done.
	_, err := m.c.Txn(ctx).Then(
		clientv3.OpDelete(k.decl),
		clientv3.OpTxn(k.unusedCmps(), []clientv3.Op{clientv3.OpDelete(k.version)}, nil),
	).Commit()
	if err != nil {
		return m.rpcErr(ctx, err)
	}
	return nil
}

// SetDeclaredOnly switches the whole table (every Manager on the prefix)
// into or out of declared-resources mode.
func (m *Manager) SetDeclaredOnly(on bool) error {
	ctx, cancel := m.reqCtx()
	defer cancel()
	var err error
	if on {
		_, err = m.c.Put(ctx, m.prefix+declaredOnlyKey, "")
	} else {
		_, err = m.c.Delete(ctx, m.prefix+declaredOnlyKey)
	}
	if err != nil {
		return m.rpcErr(ctx, err)
	}
	m.declaredOnly.Store(on)
	return nil
}
