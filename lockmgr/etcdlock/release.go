package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shmlock/shmlock/lockmgr"
)

// state is what etcd holds about one owner of one resource.
type state struct {
	key    *mvccpb.KeyValue // the owner's h key (held or queued); nil if none
	ledger *mvccpb.KeyValue // nil if no granted hold is recorded
	tomb   *mvccpb.KeyValue // nil if no ended hold waits to be told
	others int              // h keys of other owners
	rev    int64            // the revision read at
}

// read reads the owner's keys of k.
func (m *Manager) read(ctx context.Context, k *resKeys) (state, error) {
	resp, err := m.c.Txn(ctx).Then(
		clientv3.OpGet(k.excl), clientv3.OpGet(k.collab), clientv3.OpGet(k.ledger), clientv3.OpGet(k.tomb),
		clientv3.OpGet(k.hold, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return state{}, m.rpcErr(ctx, err)
	}
	var st state
	st.rev = resp.Header.Revision
	if kvs := ranged(resp.Responses[0]); len(kvs) > 0 {
		st.key = kvs[0]
	} else if kvs := ranged(resp.Responses[1]); len(kvs) > 0 {
		st.key = kvs[0]
	}
	if kvs := ranged(resp.Responses[2]); len(kvs) > 0 {
		st.ledger = kvs[0]
	}
	if kvs := ranged(resp.Responses[3]); len(kvs) > 0 {
		st.tomb = kvs[0]
	}
	st.others = len(ranged(resp.Responses[4]))
	if st.key != nil {
		st.others--
	}
	return st, nil
}

// notHeld is the error of a Release or Refresh by an owner without a live
// hold, as st shows; nil (with a warning, for a Release) if nobody holds.
func (m *Manager) notHeld(ctx context.Context, k *resKeys, st state, releasing bool) error {
	switch {
	case st.key == nil && st.ledger != nil:
		// The hold's lease expired; nobody noticed before its owner.
		if _, err := m.endOrphanKV(ctx, k, st.ledger, true); err != nil {
			return err
		}
		return fmt.Errorf("%w: %q by %q", lockmgr.ErrLockTimeout, k.res, k.owner)
	case st.tomb != nil:
		// Told now: the tombstone has served.
		_, _ = m.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k.tomb), "=", st.tomb.ModRevision)).
			Then(clientv3.OpDelete(k.tomb)).Commit()
		if string(st.tomb.Value) == tombForced {
			return fmt.Errorf("%w: %q by %q: an operator ended the hold", lockmgr.ErrLockNotHeld, k.res, k.owner)
		}
		return fmt.Errorf("%w: %q by %q", lockmgr.ErrLockTimeout, k.res, k.owner)
	case st.key != nil || st.others > 0 || !releasing:
		// A queued key is no hold either.
		return fmt.Errorf("%w: %q by %q", lockmgr.ErrLockNotHeld, k.res, k.owner)
	}
	m.log.Warn("lockmgr: release of a lock that does not exist", "resource", k.res, "owner", k.owner)
	return nil
}

// readLive reads the owner's keys for a Release (releasing) or a
// Refresh: live if the owner holds the resource, else the call's answer
// (nil: a release of nothing). A hold that this Manager told lost (its
// Lost closed: its TTL, less the margin, passed) is over for its owner,
// though etcd, which counts from later, may still keep its key a
// moment: it is ended first, and the owner told that it expired, as the
// shm table tells it once the TTL has passed. Else a Refresh would renew
// a hold whose holder was told to stop writing. (The Release of a hold
// not granted by this Manager, or whose Lost was never asked for, is
// not held to the deadline: nobody was told.)
func (m *Manager) readLive(ctx context.Context, k *resKeys, releasing bool) (state, bool, error) {
	for {
		st, err := m.read(ctx, k)
		if err != nil {
			return st, false, err
		}
		if st.key == nil || st.ledger == nil {
			m.forget(k.res, k.owner)
			return st, false, m.notHeld(ctx, k, st, releasing)
		}
		if !m.toldLost(k.res, k.owner, st.key.CreateRevision) {
			return st, true, nil
		}
		// Once its key is gone, the next read finds the ledger alone:
		// notHeld records the end and tells the owner.
		hv, _ := decodeHold(st.key.Value)
		if err := m.endKey(ctx, st.key, clientv3.LeaseID(st.key.Lease), hv.TTL > 0); err != nil {
			return st, false, err
		}
	}
}

// endKey deletes the hold key kv, if it is still kv, and gives back
// lease, the one it lives on, if it is the hold's own.
func (m *Manager) endKey(ctx context.Context, kv *mvccpb.KeyValue, lease clientv3.LeaseID, own bool) error {
	_, err := m.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
		Then(clientv3.OpDelete(string(kv.Key))).Commit()
	if err != nil {
		return m.rpcErr(ctx, err)
	}
	if own && lease != m.session {
		m.background(func(ctx context.Context) { m.revokeIn(ctx, lease) })
	}
	return nil
}

// Release ends owner's hold of resource in one transaction, which also
// counts it and, if it was the resource's last hold, deletes its version
// (the next grant's revision is higher anyway), waiters or not. Like the shm Manager's:
// ErrLockNotHeld if owner holds it not but someone else does;
// ErrLockTimeout if the hold ended without this release (its lease
// expired); a warning and nil if nobody holds it. Any Manager may release
// any owner's hold; the one that granted it needs no read first.
func (m *Manager) Release(resource, owner string) error {
	if err := checkNames(resource, owner); err != nil {
		return err
	}
	// No usable check: a hold with a TTL outlives the session, and its
	// owner may still give it back (as the shm Manager's Release works
	// after its segment's Close).
	ctx, cancel := m.reqCtx()
	defer cancel()
	k := m.keys(resource, owner)
	h := m.local(resource, owner)
	var key string
	var rev int64
	var acquired time.Time
	if h != nil {
		key, rev, acquired = h.key, h.rev, h.acquired
	}
	for tries := 0; ; tries++ {
		if key == "" {
			st, live, err := m.readLive(ctx, k, true)
			if !live {
				return err
			}
			key, rev = string(st.key.Key), st.key.CreateRevision
			if hv, err := decodeHold(st.key.Value); err == nil && hv.Acquired != 0 {
				acquired = time.Unix(0, hv.Acquired)
			}
		}
		d := max(time.Since(acquired), 0)
		seq, total := m.held.add(d)
		resp, err := m.c.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(key), "=", rev),
			clientv3.Compare(clientv3.CreateRevision(k.ledger), ">", 0),
		).Then(
			clientv3.OpDelete(key),
			clientv3.OpDelete(k.ledger),
			clientv3.OpPut(m.counter(ctrReleases), ""),
			m.heldOp(seq, total),
			// The version: deleted with the resource's last hold (unless
			// the resource is declared or inconsistent), else bumped.
			clientv3.OpTxn(append(k.otherLedgersCmps(),
				clientv3.Compare(clientv3.CreateRevision(k.incons), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(k.decl), "=", 0),
			), []clientv3.Op{clientv3.OpDelete(k.version)}, []clientv3.Op{clientv3.OpPut(k.version, "")}),
		).Commit()
		if err != nil {
			return m.rpcErr(ctx, err)
		}
		if resp.Succeeded {
			m.forget(resource, owner)
			if h != nil && h.ttl > 0 {
				// The key is gone; its lease only costs the server
				// memory until it expires: give it back, but not on the
				// release's time (unless the Manager is closing).
				m.background(func(ctx context.Context) { m.revokeIn(ctx, h.lease) })
			}
			return nil
		}
		m.held.undo(d)
		if tries > 0 || h == nil {
			// Read afresh and decide from what is there.
			st, live, err := m.readLive(ctx, k, true)
			if !live {
				return err
			}
			if tries > 2 {
				m.forget(resource, owner)
				return m.notHeld(ctx, k, st, true)
			}
			key, rev = string(st.key.Key), st.key.CreateRevision
			continue
		}
		key, h = "", nil // this Manager's record is stale: read
	}
}

// Refresh extends owner's live hold of resource to ttl from now: a
// keep-alive of the hold's lease when ttl is its TTL, else the hold moves
// to a new lease of ttl (0: this Manager's session, so it lasts while this
// Manager does; a hold that had no TTL stays on the session of the Manager
// that granted it). ErrLockTimeout if it had expired already,
// ErrLockNotHeld if owner does not hold it; ttl is whole seconds (rounded
// up), at least MinTTL.
func (m *Manager) Refresh(resource, owner string, ttl time.Duration) (lockmgr.LockInfo, error) {
	info := lockmgr.LockInfo{Resource: resource, Owner: owner, State: lockmgr.Failed}
	err := checkNames(resource, owner)
	if err == nil && (ttl < 0 || (ttl > 0 && ttl < MinTTL) || ttl > MaxTTL) {
		err = fmt.Errorf("%w: ttl %v (0, or %v to %v)", lockmgr.ErrBadOptions, ttl, MinTTL, MaxTTL)
	}
	if err == nil {
		err = m.usable()
	}
	if err != nil {
		return info, err
	}
	ctx, cancel := m.reqCtx()
	defer cancel()
	k := m.keys(resource, owner)
	secs := seconds(ttl)
	var st state
	var hv holdValue
	var lease clientv3.LeaseID
	var sent time.Time
	for tries := 0; ; tries++ {
		var live bool
		if st, live, err = m.readLive(ctx, k, false); !live {
			return info, err
		}
		if hv, err = decodeHold(st.key.Value); err != nil {
			return info, err
		}
		sent = time.Now()
		var gone bool
		lease, gone, err = m.extend(ctx, k, st.key, &hv, secs, ttl)
		if err != nil {
			return info, err
		}
		if !gone && !m.toldLost(resource, owner, st.key.CreateRevision) {
			break
		}
		if !gone {
			// Its Lost closed while this Refresh ran: it stays lost,
			// whatever the renewal did. The next read tells.
			if err := m.endKey(ctx, st.key, lease, secs > 0); err != nil {
				return info, err
			}
			continue
		}
		if tries >= 2 {
			return info, fmt.Errorf("%w: %q by %q: the hold kept changing", lockmgr.ErrUnavailable, resource, owner)
		}
		// The hold read is gone (its lease expired between the read and
		// the request, or it was released and granted again): read
		// again and decide from what is there, as a Refresh that came
		// after would.
	}
	var deadline time.Time
	if secs > 0 {
		info.Timeout = time.Duration(secs) * time.Second
		info.ExpiresAt = sent.Add(info.Timeout)
		deadline = expiresBy(sent, info.Timeout)
	}
	if h := m.local(resource, owner); h != nil && h.rev == st.key.CreateRevision {
		m.mu.Lock()
		h.lease, h.ttl = lease, secs
		m.mu.Unlock()
		h.lost.setDeadline(deadline)
		if lease == m.session && m.usable() != nil {
			// Moved onto a session that ended meanwhile, perhaps after
			// endSessionHolds looked (Done closes before it does).
			m.loseHold(h)
			return info, m.usable()
		}
	}
	info.Mode = hv.mode()
	info.AcquiredAt = time.Unix(0, hv.Acquired)
	info.State = lockmgr.Acquired
	ver, err := m.version(ctx, k)
	if err != nil {
		return info, err
	}
	info.Version = uint64(ver)
	return info, nil
}

// extend gives the hold whose key is kv (hv, its value) a life of secs
// (ttl) from now, as Refresh describes: it returns the lease the hold
// now lives on, or gone if the hold was no longer there (kv's lease
// expired, or the key was replaced), having changed nothing.
func (m *Manager) extend(ctx context.Context, k *resKeys, kv *mvccpb.KeyValue, hv *holdValue, secs int64, ttl time.Duration) (clientv3.LeaseID, bool, error) {
	lease := clientv3.LeaseID(kv.Lease)
	switch {
	case secs == 0 && hv.TTL == 0:
		// No expiry asked of a hold that has none: it stays on the
		// session of the Manager that granted it, which lives as long as
		// the owner's process does. Moving it onto this Manager's session
		// would tie the hold to this one (a shmctl refresh, whose Close
		// would end it under its owner).
	case secs > 0 && secs == hv.TTL && lease != m.session:
		if _, err := m.c.KeepAliveOnce(ctx, lease); err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				// Expired between the read and the keep-alive.
				return 0, true, nil
			}
			return 0, false, m.rpcErr(ctx, err)
		}
	default:
		// The old lease is the hold's own only if it had a TTL: else it
		// is the session of the Manager that granted it, perhaps not this
		// one, on which that Manager's other holds live.
		own := hv.TTL > 0
		newLease := m.session
		if secs > 0 {
			var err error
			if newLease, _, err = m.grant(ctx, ttl); err != nil {
				return 0, false, err
			}
		}
		hv.TTL, hv.Lease = secs, int64(newLease)
		resp, err := m.c.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision),
			clientv3.Compare(clientv3.CreateRevision(k.ledger), ">", 0),
		).Then(
			clientv3.OpPut(string(kv.Key), hv.encode(), clientv3.WithLease(newLease)),
			clientv3.OpPut(k.ledger, hv.encode()),
		).Commit()
		if err != nil && newLease != m.session && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The new lease ended before the transaction (an operator
			// revoked it): etcd refused the whole transaction, so
			// nothing was written. The caller reads again and tries
			// again, as when the hold changed; the session is not lost.
			return 0, true, nil
		}
		if err != nil {
			// The transaction may have moved the hold onto the new lease
			// before its answer was lost: revoking that lease would end
			// the hold. It goes only once the hold is seen elsewhere;
			// if that cannot be seen, it runs out with its TTL.
			if newLease != m.session && m.leaseOf(kv) == clientv3.LeaseID(kv.Lease) {
				m.revoke(newLease)
			}
			return 0, false, m.rpcErr(ctx, err)
		}
		if !resp.Succeeded {
			// Nothing was written on the new lease.
			if newLease != m.session {
				m.revoke(newLease)
			}
			return 0, true, nil
		}
		if own && lease != m.session && lease != newLease {
			m.revoke(lease)
		}
		lease = newLease
	}
	return lease, false, nil
}

// leaseOf is the lease that the key kv's hold lives on now, read with a
// request of its own (the caller's context may be what failed); -1 if it
// cannot be read or the hold is gone (kv's key no longer exists as kv).
func (m *Manager) leaseOf(kv *mvccpb.KeyValue) clientv3.LeaseID {
	ctx, cancel := m.reqCtx()
	defer cancel()
	resp, err := m.c.Get(ctx, string(kv.Key))
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != kv.CreateRevision {
		return -1
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// version is the resource's current version: its version key's revision.
func (m *Manager) version(ctx context.Context, k *resKeys) (int64, error) {
	resp, err := m.c.Get(ctx, k.version)
	if err != nil {
		return 0, m.rpcErr(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].ModRevision, nil
}

// MarkConsistent says that the data the resource protects is whole again:
// later grants are no longer told (LockInfo.Inconsistent). ErrLockNotHeld
// if owner holds no live hold of resource. Like Release (and like the shm
// Manager's MarkConsistent after its segment's Close), it works after
// Close and once the session is lost: a hold with a TTL outlives the
// session, and its holder that repaired the data as it unwinds says so
// before its release, else every later grant is told of damage that is
// no more. A hold on the session has ended with it (ErrLockNotHeld).
func (m *Manager) MarkConsistent(resource, owner string) error {
	if err := checkNames(resource, owner); err != nil {
		return err
	}
	// No usable check, as in Release: the transaction below marks the
	// resource only while owner's hold key is there.
	ctx, cancel := m.reqCtx()
	defer cancel()
	k := m.keys(resource, owner)
	st, err := m.read(ctx, k)
	if err != nil {
		return err
	}
	// A hold told lost is no live hold for its owner, though etcd, which
	// counts from later, may keep its key a moment (as the shm table
	// refuses an expired hold's mark): the holder was told to stop, and
	// the next holder must still be told of what it may have left.
	if st.key == nil || st.ledger == nil || m.toldLost(resource, owner, st.key.CreateRevision) {
		return fmt.Errorf("%w: %q by %q", lockmgr.ErrLockNotHeld, resource, owner)
	}
	resp, err := m.c.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(string(st.key.Key)), "=", st.key.CreateRevision),
		clientv3.Compare(clientv3.CreateRevision(k.ledger), ">", 0),
	).Then(clientv3.OpDelete(k.incons)).Commit()
	if err != nil {
		return m.rpcErr(ctx, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %q by %q", lockmgr.ErrLockNotHeld, resource, owner)
	}
	return nil
}

// endOrphan ends the hold that ledger l records, whose key is gone (its
// lease expired): see endOrphanKV. It notes for the acquisition whether
// the hold had no TTL (its Manager's session ended: reclaimed).
func (a *acquisition) endOrphan(ctx context.Context, l *mvccpb.KeyValue, told bool) (int64, error) {
	if len(l.Value) == 0 {
		// Read keys only: read the ledger itself.
		resp, err := a.m.c.Get(ctx, string(l.Key))
		if err != nil {
			return 0, a.m.rpcErr(ctx, err)
		}
		if len(resp.Kvs) == 0 {
			return 0, nil // recorded by someone else meanwhile
		}
		l = resp.Kvs[0]
	}
	if hv, err := decodeHold(l.Value); err == nil && hv.TTL == 0 {
		a.reclaim = true
	}
	return a.m.endOrphanKV(ctx, a.m.keys(a.k.res, ownerOfKey(l.Key)), l, told)
}

// endOrphanKV records the end of a hold that ended without its release:
// in one transaction, if nobody did it first, the ledger gives way to a
// tombstone (unless its owner is being told now: told), the resource
// becomes inconsistent, its version moves, and the expiry is counted
// (reclaimed if the hold lived on its Manager's session). It returns the
// new version, or 0 if someone else recorded the end first.
func (m *Manager) endOrphanKV(ctx context.Context, k *resKeys, l *mvccpb.KeyValue, told bool) (int64, error) {
	ctr := ctrExpired
	if hv, err := decodeHold(l.Value); err == nil && hv.TTL == 0 {
		ctr = ctrReclaimed
	}
	ops := []clientv3.Op{
		clientv3.OpDelete(k.ledger),
		clientv3.OpPut(k.incons, ""),
		clientv3.OpPut(k.version, ""),
		clientv3.OpPut(m.counter(ctr), ""),
	}
	var tombLease clientv3.LeaseID
	if !told {
		lease, err := m.c.Grant(ctx, int64(tombstoneTTL/time.Second))
		if err != nil {
			return 0, m.rpcErr(ctx, err)
		}
		tombLease = lease.ID
		ops = append(ops, clientv3.OpPut(k.tomb, tombExpired, clientv3.WithLease(lease.ID)))
	}
	resp, err := m.c.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(k.ledger), "=", l.ModRevision),
		clientv3.Compare(clientv3.CreateRevision(k.excl), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(k.collab), "=", 0),
	).Then(ops...).Commit()
	if err != nil {
		// Whether the transaction was applied is unknown: the lease may
		// carry the tombstone, and expires with it.
		return 0, m.rpcErr(ctx, err)
	}
	if !resp.Succeeded {
		if tombLease != 0 {
			// Someone recorded the end first: the tombstone was not
			// written, and its lease, with nothing on it, would stay in
			// the cluster for tombstoneTTL.
			m.revokeUnused(tombLease)
		}
		return 0, nil
	}
	return resp.Header.Revision, nil
}

// revokeUnused revokes a lease this Manager granted and did not use,
// best effort: an error leaves it to expire.
func (m *Manager) revokeUnused(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	_, _ = m.c.Revoke(ctx, id)
}
