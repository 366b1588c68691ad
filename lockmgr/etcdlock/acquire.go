package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shmlock/shmlock/lockmgr"
)

// Acquire takes resource for owner in mode, as lockmgr.Manager.Acquire
// does, in one transaction when nothing conflicts. On a conflict it fails
// at once with ErrResourceLocked, unless opts ask for retries or a wait:
// then the acquisition takes its place in the resource's queue (FIFO by
// the create revision of its key) and waits, watching only the key just
// ahead of it, so a release wakes the next waiter alone (collaborative
// waiters behind one exclusive holder are woken together). The backoff
// schedule does not pace any polling: each of its waits that passes
// without a grant is one failed attempt (OnWait is called before it,
// Retries bounds their number, ErrAcquisitionFailed after the last).
// Leaving the queue (cancellation, timeout, retries exhausted) deletes the
// waiter's key, so nothing is left behind.
//
// Unlike the shm table, a collaborative acquisition queues behind an
// exclusive waiter that came first, even while collaborative holders are
// inside: no writer starves. A hold with a TTL lives on a lease of its own
// (one more request to grant it), of whole seconds (rounded up), at
// least MinTTL.
func (m *Manager) Acquire(ctx context.Context, resource, owner string, mode lockmgr.Mode, opts lockmgr.AcquireOptions) (lockmgr.LockInfo, error) {
	info := lockmgr.LockInfo{Resource: resource, Owner: owner, Mode: mode, State: lockmgr.Failed}
	err := checkNames(resource, owner)
	if err == nil && mode != lockmgr.Exclusive && mode != lockmgr.Collaborative {
		err = fmt.Errorf("%w: %d", lockmgr.ErrBadMode, mode)
	}
	if err == nil {
		err = opts.Check()
	}
	if err == nil && opts.TTL > 0 && opts.TTL < MinTTL {
		err = fmt.Errorf("%w: TTL %v is below etcd's minimum lease of %v", lockmgr.ErrBadOptions, opts.TTL, MinTTL)
	}
	if err == nil && opts.TTL > MaxTTL {
		err = fmt.Errorf("%w: TTL %v is above etcd's maximum lease of %v", lockmgr.ErrBadOptions, opts.TTL, MaxTTL)
	}
	if err == nil {
		err = m.usable()
	}
	if err != nil {
		return info, err
	}
	if err := ctx.Err(); err != nil {
		return info, err
	}
	a := &acquisition{m: m, k: m.keys(resource, owner), mode: mode, opts: opts, info: info, start: time.Now(), tag: rand.Uint64() | 1}
	return a.run(ctx)
}

// acquisition is the state of one Acquire.
type acquisition struct {
	m     *Manager
	k     *resKeys
	mode  lockmgr.Mode
	opts  lockmgr.AcquireOptions
	info  lockmgr.LockInfo
	start time.Time

	ttl      int64            // seconds; 0: the hold lives on the session
	lease    clientv3.LeaseID // the hold's lease: the session's or its own
	renewed  time.Time        // when the hold's own lease was last granted or renewed
	myRev    int64            // create revision of the queued key; 0 before
	reclaim  bool             // an orphan ended by this acquisition had no TTL
	attempts int

	// tag marks the values this acquisition writes; queuedVal and
	// grantVal are the last it sent, so that a request whose answer was
	// lost can be taken back without touching a key it did not write.
	tag                 uint64
	queuedVal, grantVal string
}

func (a *acquisition) run(ctx context.Context) (lockmgr.LockInfo, error) {
	m := a.m
	a.lease = m.session
	if a.opts.TTL > 0 {
		a.renewed = time.Now()
		id, secs, err := m.grant(ctx, a.opts.TTL)
		if err != nil {
			return a.info, err
		}
		a.lease, a.ttl = id, secs
	}
	info, err := a.enter(ctx)
	if err != nil && a.ttl > 0 {
		m.revoke(a.lease)
	}
	return info, err
}

// newLease replaces the acquisition's own lease, which ended, with a new
// one of its TTL.
func (a *acquisition) newLease(ctx context.Context) error {
	a.renewed = time.Now()
	id, _, err := a.m.grant(ctx, time.Duration(a.ttl)*time.Second)
	if err != nil {
		return err
	}
	a.lease = id
	return nil
}

// leaseGone reports whether err, a transaction's failure, is etcd's
// refusal of the acquisition's own lease (a TTL), which ended before
// the grant could put the hold on it: revoked by an operator, or ended
// by etcd sooner than its TTL. etcd refuses the whole transaction then,
// so nothing was written, and the acquisition goes on with a new lease,
// as the shm table, whose TTL starts at the grant, would grant it.
// Else (the session's lease) the error stays the session's loss.
func (a *acquisition) leaseGone(ctx context.Context, err error) (bool, error) {
	if a.ttl == 0 || !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return false, nil
	}
	resp, err := a.m.c.TimeToLive(ctx, a.lease)
	if err != nil {
		return false, a.m.rpcErr(ctx, err)
	}
	return resp.TTL <= 0, nil
}

// holdValue is the value of the hold's key and ledger at the grant.
func (a *acquisition) holdValue(granted bool) holdValue {
	hv := holdValue{Owner: a.k.owner, Mode: a.mode.String(), Host: a.m.host, PID: a.m.pid, TTL: a.ttl, Tag: a.tag}
	if granted {
		hv.Acquired = time.Now().UnixNano()
		hv.Lease = int64(a.lease)
	}
	return hv
}

// conflictFree is true when a key of mode could be granted at once: no
// key at all for an exclusive one, no exclusive key for a collaborative
// one (a comparison over an empty range compares a zero revision).
func (a *acquisition) conflictFree() clientv3.Cmp {
	if a.mode == lockmgr.Exclusive {
		return clientv3.Compare(clientv3.CreateRevision(a.k.hold), "=", 0).WithPrefix()
	}
	return clientv3.Compare(clientv3.CreateRevision(a.k.exclPrefix), "=", 0).WithPrefix()
}

// grantOps turn the owner's key into a granted hold: they read the
// ledgers first (to find holds that ended unnoticed), put the key (on the
// hold's lease, keeping its create revision if it was queued), the
// ledger, the version and the grant counter, and read the inconsistent
// mark and the queue. The ranges are of keys only: the owners and the
// create revisions are in the keys, and the rare ledger whose hold ended
// unnoticed is read again in full.
func (a *acquisition) grantOps() []clientv3.Op {
	a.grantVal = a.holdValue(true).encode()
	return []clientv3.Op{
		clientv3.OpGet(a.k.ledgerPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpPut(a.k.holdKey(a.mode), a.grantVal, clientv3.WithLease(a.lease)),
		clientv3.OpPut(a.k.ledger, a.grantVal),
		clientv3.OpPut(a.k.version, ""),
		clientv3.OpPut(a.m.counter(ctrGrants), ""),
		clientv3.OpGet(a.k.incons),
		clientv3.OpGet(a.k.hold, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		// The grant is the owner's news of an earlier hold of its that
		// ended unreleased: its tombstone goes, or the new hold's second
		// release would be told that hold expired (as the shared-memory
		// table does: lockertest's ExpiredOwnerAcquiresAgain).
		clientv3.OpDelete(a.k.tomb),
	}
}

const grantOpCount = 8

// declCmp holds while the resource may be acquired as the Manager last
// saw the declared-only switch: the switch is off, or the resource is
// declared. A transaction that fails it reads both keys and decides.
func (a *acquisition) declCmp() clientv3.Cmp {
	if a.m.declaredOnly.Load() {
		return clientv3.Compare(clientv3.CreateRevision(a.k.decl), ">", 0)
	}
	return clientv3.Compare(clientv3.CreateRevision(a.k.declaredOnly), "=", 0)
}

// enter is the first transaction: it grants at once if nothing
// conflicts, or else counts the conflict and, if the acquisition may
// wait, queues the owner's key, all in one request.
func (a *acquisition) enter(ctx context.Context) (lockmgr.LockInfo, error) {
	m, k := a.m, a.k
	for tries := 0; ; tries++ {
		declCmp := a.declCmp()
		refuse := []clientv3.Op{clientv3.OpPut(m.counter(ctrConflicts), "")}
		wait := a.opts.MaxRetries() != 0
		if wait {
			a.queuedVal = a.holdValue(false).encode()
			refuse = append(refuse, clientv3.OpPut(k.holdKey(a.mode), a.queuedVal, clientv3.WithLease(m.session)))
		}
		refuse = append(refuse, clientv3.OpGet(k.hold, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)))
		resp, err := m.c.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(k.excl), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(k.collab), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(k.ledger), "=", 0),
			declCmp,
		).Then(
			clientv3.OpTxn([]clientv3.Cmp{a.conflictFree()}, a.grantOps(), refuse),
		).Else(
			clientv3.OpGet(k.excl), clientv3.OpGet(k.collab), clientv3.OpGet(k.ledger),
			clientv3.OpGet(k.declaredOnly), clientv3.OpGet(k.decl),
		).Commit()
		if err != nil {
			if gone, gerr := a.leaseGone(ctx, err); gerr != nil || gone {
				if gerr == nil && tries > 8 {
					gerr = keptChanging(k)
				}
				if gerr == nil {
					gerr = a.newLease(ctx)
				}
				if gerr != nil {
					return a.info, gerr
				}
				continue // nothing was written: try again on the new lease
			}
			// The request may have queued the key, or granted it, before
			// it failed: take back what it did.
			a.myRev = -1
			a.leave()
			return a.info, m.rpcErr(ctx, err)
		}
		if resp.Succeeded {
			inner := resp.Responses[0].GetResponseTxn()
			if inner.Succeeded {
				a.attempts = 1
				return a.granted(ctx, resp.Header.Revision, resp.Header.Revision, inner.Responses)
			}
			ops := inner.Responses
			queue := ranged(ops[len(ops)-1])
			a.attempts = 1
			if !wait {
				a.info.Attempts = 1
				return a.info, fmt.Errorf("%w: %w", lockmgr.ErrResourceLocked, a.blockedBy(queue))
			}
			a.myRev = resp.Header.Revision
			return a.wait(ctx, queue, resp.Header.Revision)
		}
		held, ledger, dOnly, decl := ranged(resp.Responses[0]), ranged(resp.Responses[2]), ranged(resp.Responses[3]), ranged(resp.Responses[4])
		if len(held) == 0 {
			held = ranged(resp.Responses[1])
		}
		m.declaredOnly.Store(len(dOnly) > 0)
		switch {
		case len(held) > 0 && m.toldLost(k.res, k.owner, held[0].CreateRevision):
			// The owner's hold that this Manager told lost is over for
			// it, though etcd, which counts from later, may keep the key
			// a moment (see readLive): it ends, and the next try records
			// the end and tells this grant, as the shm table grants an
			// owner whose hold expired.
			hv, _ := decodeHold(held[0].Value)
			if err := m.endKey(ctx, held[0], clientv3.LeaseID(held[0].Lease), hv.TTL > 0); err != nil {
				return a.info, err
			}
		case len(held) > 0:
			return a.info, fmt.Errorf("%w: %q by %q", lockmgr.ErrAlreadyHeld, k.res, k.owner)
		case len(ledger) > 0:
			// The owner's own earlier hold ended without its release
			// (its lease expired) and nobody noticed yet: this grant is
			// told, as the shm table tells an expired owner that comes
			// back.
			if _, err := a.endOrphan(ctx, ledger[0], true); err != nil {
				return a.info, err
			}
		case len(dOnly) > 0 && len(decl) == 0:
			return a.info, fmt.Errorf("%w: %q", lockmgr.ErrResourceNotFound, k.res)
		}
		if tries > 8 {
			// Each try sees a change by someone else; so many in a row
			// means the switch flips faster than a request: give up.
			return a.info, keptChanging(k)
		}
	}
}

// keptChanging is the error of an acquisition that met a change by
// someone else at each of its tries.
func keptChanging(k *resKeys) error {
	return fmt.Errorf("%w: %q: the table kept changing", lockmgr.ErrUnavailable, k.res)
}

// granted finishes a grant made at revision rev by a transaction whose
// grant operations answered ops: it ends the holds that ended unnoticed
// (ledgers without a key), and records the hold.
func (a *acquisition) granted(ctx context.Context, rev, created int64, ops []*pb.ResponseOp) (lockmgr.LockInfo, error) {
	m, k := a.m, a.k
	ledgers, incons, queue := ranged(ops[0]), ranged(ops[5]), ranged(ops[6])
	version := rev
	inconsistent := len(incons) > 0
	live := make(map[string]bool, len(queue))
	for _, kv := range queue {
		live[ownerOfKey(kv.Key)] = true
	}
	recordedMeanwhile := false
	for _, l := range ledgers {
		if live[ownerOfKey(l.Key)] {
			continue
		}
		v, err := a.endOrphan(ctx, l, false)
		if err != nil {
			// The hold is granted, but the grant cannot be reported
			// without what it must say: give it back.
			a.myRev = created
			a.leave()
			return a.info, err
		}
		recordedMeanwhile = recordedMeanwhile || v == 0
		version = max(version, v)
		inconsistent = true
	}
	if recordedMeanwhile {
		v, err := a.catchUpVersion(ctx, created, version)
		if err != nil {
			a.myRev = created
			a.leave()
			return a.info, err
		}
		version = max(version, v)
	}
	h := &hold{key: k.holdKey(a.mode), rev: created, mode: a.mode, lease: a.lease, ttl: a.ttl, acquired: time.Now()}
	var deadline time.Time
	if a.ttl > 0 {
		// a.renewed was taken before the lease's grant or renewal was
		// sent: the deadline cannot be after etcd's expiry.
		deadline = expiresBy(a.renewed, time.Duration(a.ttl)*time.Second)
	}
	h.lost = newLostSignal(deadline)
	if !m.remember(k.res, k.owner, h) {
		// The session ended while the grant was on its way: the hold
		// may already be another's (see remember).
		a.myRev = created
		a.leave()
		return a.info, m.usable()
	}
	a.info.State = lockmgr.Acquired
	a.info.AcquiredAt = h.acquired
	a.info.Version = uint64(version)
	a.info.Inconsistent = inconsistent
	a.info.Reclaimed = a.reclaim
	a.info.Attempts = a.attempts
	if a.ttl > 0 {
		a.info.Timeout = time.Duration(a.ttl) * time.Second
		a.info.ExpiresAt = a.renewed.Add(a.info.Timeout)
	}
	return a.info, nil
}

// catchUpVersion moves the resource's version past version, under the
// hold created at created, if it is there already: someone else recorded
// the end of a hold that this grant found unrecorded (its owner's late
// Release, another grant), after this grant's transaction, and that
// moved the version past the grant's. The grant's version must be the
// resource's current one (CheckVersion), and no other grant's: so a
// revision of its own, made while the hold stands. 0 if there was
// nothing to move or the hold is gone.
func (a *acquisition) catchUpVersion(ctx context.Context, created, version int64) (int64, error) {
	k := a.k
	resp, err := a.m.c.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(k.holdKey(a.mode)), "=", created),
		clientv3.Compare(clientv3.ModRevision(k.version), ">", version),
	).Then(clientv3.OpPut(k.version, "")).Commit()
	if err != nil {
		return 0, a.m.rpcErr(ctx, err)
	}
	if !resp.Succeeded {
		return 0, nil
	}
	return resp.Header.Revision, nil
}

// blockedBy describes the first hold of the queue, for a conflict's error.
func (a *acquisition) blockedBy(queue []*mvccpb.KeyValue) error {
	for _, kv := range queue {
		if a.myRev > 0 && kv.CreateRevision >= a.myRev {
			break
		}
		return fmt.Errorf("%q is held by %q (%v)", a.k.res, ownerOfKey(kv.Key), modeOfKey(kv.Key))
	}
	return fmt.Errorf("%q is held", a.k.res)
}

// predecessor is the key the queued key of mode waits for: the last key
// created before it that conflicts (any key for an exclusive waiter, an
// exclusive key for a collaborative one); nil if none is left.
func (a *acquisition) predecessor(queue []*mvccpb.KeyValue) *mvccpb.KeyValue {
	var pred *mvccpb.KeyValue
	for _, kv := range queue {
		if kv.CreateRevision >= a.myRev {
			break
		}
		if a.mode == lockmgr.Exclusive || modeOfKey(kv.Key) == lockmgr.Exclusive {
			pred = kv
		}
	}
	return pred
}

// wait waits in the queue: queue is the queue as read at revision rev.
func (a *acquisition) wait(ctx context.Context, queue []*mvccpb.KeyValue, rev int64) (lockmgr.LockInfo, error) {
	retries := a.opts.MaxRetries()
	var deadline time.Time
	if a.opts.Wait > 0 {
		deadline = a.start.Add(a.opts.Wait)
	}
	if dl, ok := ctx.Deadline(); ok && (deadline.IsZero() || dl.Before(deadline)) {
		deadline = dl
	}
	for {
		pred := a.predecessor(queue)
		if pred == nil {
			info, done, q, r, err := a.grantQueued(ctx)
			if err != nil || done {
				if err != nil {
					a.leave()
				}
				return info, err
			}
			queue, rev = q, r
			continue
		}
		woke, err := a.watchDelete(ctx, pred, rev, deadline, retries)
		if err != nil {
			a.leave()
			return a.info, err
		}
		if !woke {
			continue // a watch that broke: read the queue again
		}
		info, done, q, r, err := a.grantQueued(ctx)
		if err != nil || done {
			if err != nil {
				a.leave()
			}
			return info, err
		}
		queue, rev = q, r
	}
}

// watchDelete waits until pred is deleted (true), or the watch broke
// (false: the caller reads again), counting an attempt at each backoff
// wait that passes; an error ends the acquisition.
func (a *acquisition) watchDelete(ctx context.Context, pred *mvccpb.KeyValue, rev int64, deadline time.Time, retries int) (bool, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The watch starts at the server's current revision, not at rev+1: a
	// watch from a past revision is served by etcd's catch-up loop, every
	// 100 ms, which would be the wake-up latency of every busy queue. A
	// deletion between rev and the watch's start is found by a read once
	// the watch is in place.
	wch := a.m.c.Watch(wctx, string(pred.Key), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	created := false
	timer := time.NewTimer(time.Hour) // Reset before each wait
	defer timer.Stop()
	met := fmt.Errorf("%q is held by %q (%v)", a.k.res, ownerOfKey(pred.Key), modeOfKey(pred.Key))
	for {
		d := a.opts.Backoff.Jittered(a.attempts - 1)
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return false, a.timeout(ctx, met)
			}
			d = min(d, left)
		}
		if a.opts.OnWait != nil {
			a.info.State, a.info.Attempts = lockmgr.Waiting, a.attempts
			a.onWait(d)
			a.info.State = lockmgr.Failed
		}
		timer.Reset(d)
		woke, broken, err := a.slice(ctx, wch, timer, pred, rev, &created, met)
		if woke || broken || err != nil {
			return woke, err // broken: the caller reads the queue again
		}
		a.attempts++
		a.info.Attempts = a.attempts
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return false, a.timeout(ctx, met)
		}
		if retries != lockmgr.RetryForever && a.attempts > retries {
			return false, fmt.Errorf("%w after %d attempts: %w", lockmgr.ErrAcquisitionFailed, a.attempts, met)
		}
	}
}

// slice waits for one backoff wait (timer) on the watch: woke when pred
// was deleted, broken when the watch ended, neither when the wait passed.
func (a *acquisition) slice(ctx context.Context, wch clientv3.WatchChan, timer *time.Timer, pred *mvccpb.KeyValue, rev int64, created *bool, met error) (woke, broken bool, err error) {
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				timer.Stop() // no stale tick after Stop (Go 1.23 timers)
				if err := ctx.Err(); err != nil {
					return false, false, a.ctxErr(err, met)
				}
				if err := a.m.usable(); err != nil {
					return false, false, err
				}
				return false, true, nil
			}
			if len(wr.Events) > 0 {
				return true, false, nil
			}
			if wr.Created && !*created {
				*created = true
				if wr.Header.Revision > rev {
					gone, err := a.gone(ctx, pred)
					if err != nil || gone {
						return gone, false, err
					}
				}
			}
			// Not a deletion: the wait goes on.
		case <-ctx.Done():
			return false, false, a.ctxErr(ctx.Err(), met)
		case <-a.m.done:
			return false, false, a.m.usable()
		case <-timer.C:
			return false, false, nil
		}
	}
}

// gone reports whether pred was deleted (or replaced) since it was read.
func (a *acquisition) gone(ctx context.Context, pred *mvccpb.KeyValue) (bool, error) {
	resp, err := a.m.c.Get(ctx, string(pred.Key))
	if err != nil {
		return false, a.m.rpcErr(ctx, err)
	}
	return len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != pred.CreateRevision, nil
}

// timeout is the error of a wait whose deadline passed: opts.Wait's or
// the context's.
func (a *acquisition) timeout(ctx context.Context, met error) error {
	if a.opts.Wait > 0 && !time.Now().Before(a.start.Add(a.opts.Wait)) {
		return fmt.Errorf("%w after %v: %w", lockmgr.ErrTimeout, a.opts.Wait, met)
	}
	<-ctx.Done() // the context's deadline, a moment away
	return a.ctxErr(ctx.Err(), met)
}

func (a *acquisition) ctxErr(err, met error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w (%w)", lockmgr.ErrTimeout, err, met)
	}
	return err
}

// grantQueued tries to grant the queued key: in one transaction, if the
// key is still there and nothing conflicting was created before it. It
// returns the acquisition's result once done, else the queue as read.
func (a *acquisition) grantQueued(ctx context.Context) (lockmgr.LockInfo, bool, []*mvccpb.KeyValue, int64, error) {
	m, k := a.m, a.k
	if a.ttl > 0 {
		// The lease has run since the acquisition began: renew it for a
		// full TTL from the grant, or grant a new one if it ran out.
		a.renewed = time.Now()
		if _, err := m.c.KeepAliveOnce(ctx, a.lease); err != nil {
			if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return a.info, false, nil, 0, m.rpcErr(ctx, err)
			}
			if err := a.newLease(ctx); err != nil {
				return a.info, false, nil, 0, err
			}
		}
	}
	mine := clientv3.Compare(clientv3.CreateRevision(k.holdKey(a.mode)), "=", a.myRev)
	notGranted := []clientv3.Op{
		clientv3.OpGet(k.holdKey(a.mode)),
		clientv3.OpGet(k.hold, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
	}
	var then clientv3.Op
	// One set of grant operations for either branch: they write one value
	// (a.grantVal), which leave recognises.
	grant := a.grantOps()
	if a.mode == lockmgr.Exclusive {
		// Every key left was created no earlier than mine.
		first := clientv3.Compare(clientv3.CreateRevision(k.hold), ">", a.myRev-1).WithPrefix()
		then = clientv3.OpTxn([]clientv3.Cmp{first}, grant, notGranted)
	} else {
		// No exclusive key at all, or none created before mine: two
		// comparisons, for one over an empty range compares a zero.
		none := clientv3.Compare(clientv3.CreateRevision(k.exclPrefix), "=", 0).WithPrefix()
		later := clientv3.Compare(clientv3.CreateRevision(k.exclPrefix), ">", a.myRev-1).WithPrefix()
		then = clientv3.OpTxn([]clientv3.Cmp{none}, grant,
			[]clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{later}, grant, notGranted)})
	}
	// The grant checks the declared-only switch too, as the shm table's
	// every attempt does: a waiter queued before the switch went on, or
	// before its resource was undeclared, is refused, not granted.
	resp, err := m.c.Txn(ctx).If(mine, a.declCmp()).Then(then).
		Else(append(notGranted, clientv3.OpGet(k.declaredOnly), clientv3.OpGet(k.decl))...).Commit()
	if err != nil {
		if gone, gerr := a.leaseGone(ctx, err); gerr != nil || gone {
			// Nothing was written; the next try renews the lease, or
			// grants a new one.
			return a.info, false, nil, 0, gerr
		}
		return a.info, false, nil, 0, m.rpcErr(ctx, err)
	}
	ops := resp.Responses
	if !resp.Succeeded {
		if kvs := ranged(ops[0]); len(kvs) == 0 || kvs[0].CreateRevision != a.myRev {
			return a.info, false, nil, 0, a.vanished(ctx, kvs)
		}
		dOnly := len(ranged(ops[2])) > 0
		m.declaredOnly.Store(dOnly)
		if dOnly && len(ranged(ops[3])) == 0 {
			return a.info, false, nil, 0, fmt.Errorf("%w: %q", lockmgr.ErrResourceNotFound, k.res)
		}
		// The switch was seen stale: the next try compares it anew.
		return a.info, false, ranged(ops[1]), resp.Header.Revision, nil
	}
	for len(ops) == 1 && ops[0].GetResponseTxn() != nil {
		ops = ops[0].GetResponseTxn().Responses
	}
	if len(ops) == grantOpCount {
		info, err := a.granted(ctx, resp.Header.Revision, a.myRev, ops)
		return info, true, nil, 0, err
	}
	if kvs := ranged(ops[0]); len(kvs) == 0 || kvs[0].CreateRevision != a.myRev {
		return a.info, false, nil, 0, a.vanished(ctx, kvs)
	}
	return a.info, false, ranged(ops[1]), resp.Header.Revision, nil
}

// vanished is the error of an acquisition whose queued key is gone; kvs
// is the owner's key of the mode as read since, if there is one. Only if
// the session's lease ended under the key is the session lost
// (ErrSessionLost says the Manager must be replaced). Else the key was
// deleted by someone else: the acquisition lost its place in the queue
// (ErrAcquisitionFailed: the caller may try again), or another
// acquisition of the owner took it, which is not this one's to take
// (ErrAlreadyHeld, as that acquisition would have got had it come while
// this one was queued).
func (a *acquisition) vanished(ctx context.Context, kvs []*mvccpb.KeyValue) error {
	m, k := a.m, a.k
	if err := m.usable(); err != nil {
		return err
	}
	// Done closes when keepSession hears, which may be a renewal away.
	ttl, err := m.c.TimeToLive(ctx, m.session)
	if err != nil {
		return m.rpcErr(ctx, err)
	}
	switch {
	case ttl.TTL <= 0:
		return fmt.Errorf("%w: lease %x ended in etcd", lockmgr.ErrSessionLost, int64(m.session))
	case len(kvs) > 0:
		return fmt.Errorf("%w: %q by %q: another acquisition took the queued key's place", lockmgr.ErrAlreadyHeld, k.res, k.owner)
	}
	return fmt.Errorf("%w: %q by %q: the queued key was deleted by someone else", lockmgr.ErrAcquisitionFailed, k.res, k.owner)
}

// leave deletes the queued key (if it is still the one queued), so that a
// failed acquisition leaves the queue as it found it. myRev -1: a request
// failed without saying whether it queued or granted the key.
//
// If etcd does not answer the deletion either, the key may still be
// there, on the session's lease: a queued key keeps every later waiter of
// the resource waiting, a grant whose answer was lost holds the resource
// for nobody, until the Manager ends. So the deletion is tried again in
// the background (Close waits for it) until etcd answers it or the
// session ends, which takes the key with it. A key on the acquisition's
// own lease (a TTL) would run out with it; the retries delete it sooner.
func (a *acquisition) leave() {
	if a.myRev == 0 {
		return
	}
	l := &leaving{m: a.m, k: a.k, key: a.k.holdKey(a.mode), ledger: a.k.ledger, rev: a.myRev, queuedVal: a.queuedVal, grantVal: a.grantVal}
	a.myRev = 0
	if !l.try(context.Background()) {
		a.m.background(l.retry)
	}
}

// onWait calls OnWait. If it panics, the acquisition leaves the queue on
// its way out, as a failed one does, and the panic goes on: else its
// queued key, on the session's lease, kept every later waiter of the
// resource waiting until the session ended.
func (a *acquisition) onWait(d time.Duration) {
	returned := false
	defer func() {
		if !returned {
			a.leave()
		}
	}()
	a.opts.OnWait(a.info, d)
	returned = true
}

// leaving is what leave deletes: the key of an acquisition that failed.
type leaving struct {
	m                   *Manager
	k                   *resKeys
	key, ledger         string
	rev                 int64 // the key's create revision; -1 if unknown
	queuedVal, grantVal string
}

// leaveRetryMax is the longest pause between leave's retries.
const leaveRetryMax = 2 * time.Second

// try makes the deletion once, within parent, and then deletes the
// resource's version if nothing else keeps the resource (tidy); false if
// etcd did not answer.
func (l *leaving) try(parent context.Context) bool {
	ctx, cancel := l.m.reqCtxIn(parent)
	defer cancel()
	return l.delete(ctx) && l.tidy(ctx)
}

// tidy deletes the version of a resource left with no hold, as the
// release of its last hold does (the next grant's revision is higher
// anyway): the grant taken back wrote it. Else the resource stayed
// listed, empty, for good, if nobody else came; and waiters queued
// meanwhile do not keep it, for they may leave with their session's
// lease, which nobody tidies after.
func (l *leaving) tidy(ctx context.Context) bool {
	_, err := l.m.c.Txn(ctx).If(append(l.k.unusedCmps(), clientv3.Compare(clientv3.CreateRevision(l.k.decl), "=", 0))...).
		Then(clientv3.OpDelete(l.k.version)).Commit()
	return err == nil
}

// delete deletes what the acquisition wrote; false if etcd did not
// answer.
func (l *leaving) delete(ctx context.Context) bool {
	c := l.m.c
	// A ledger that holds the value this acquisition's grant wrote goes
	// even when the key is gone: the acquisition's lease, revoked as it
	// gave up, took the key and left the ledger (on no lease), which
	// would pass for a hold that ended unreleased.
	//
	// A grant taken back was counted as one: its end is counted as a
	// release (of a hold of no time, by the Manager that made it), or
	// the statistics kept a hold that never ended. The ledger says
	// whether there was a grant (a queued key has none), as it stood
	// before the deletion: comparisons see the state before the
	// transaction. If the end was recorded otherwise (an expiry, by
	// another Manager), the ledger is gone and nothing is counted here.
	var ended, orphan []clientv3.Op
	if l.grantVal != "" {
		granted := clientv3.Compare(clientv3.Value(l.ledger), "=", l.grantVal)
		count := clientv3.OpPut(l.m.counter(ctrReleases), "")
		ended = []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{granted}, []clientv3.Op{count}, nil)}
		orphan = []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{granted}, []clientv3.Op{clientv3.OpDelete(l.ledger), count}, nil)}
	}
	if l.rev > 0 {
		// A grant whose answer was lost wrote a ledger beside the key:
		// it goes too (the owner is unique, so the ledger is this one's).
		_, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)).
			Then(append([]clientv3.Op{clientv3.OpDelete(l.key), clientv3.OpDelete(l.ledger)}, ended...)...).Else(orphan...).Commit()
		return err == nil
	}
	// The key is this acquisition's only if it holds a value this
	// acquisition wrote (its tag): being on its Manager's session does not
	// say so, for the owner's hold that the request found there
	// (ErrAlreadyHeld) may be on it too. The ledger goes with a granted
	// key (the grant wrote both).
	answered := true
	if l.queuedVal != "" {
		_, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Value(l.key), "=", l.queuedVal)).
			Then(clientv3.OpDelete(l.key)).Commit()
		answered = err == nil
	}
	if l.grantVal != "" {
		_, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Value(l.key), "=", l.grantVal)).
			Then(append([]clientv3.Op{clientv3.OpDelete(l.key), clientv3.OpDelete(l.ledger)}, ended...)...).Else(orphan...).Commit()
		answered = answered && err == nil
	}
	return answered
}

// retry makes the deletion until etcd answers it or the session ends (or
// the Manager closes: done closes then too), within ctx.
func (l *leaving) retry(ctx context.Context) {
	pause := 50 * time.Millisecond
	for {
		t := time.NewTimer(pause)
		select {
		case <-l.m.done:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if l.try(ctx) {
			return
		}
		pause = min(2*pause, leaveRetryMax)
	}
}

// ranged is the key-values of a range response (none for another kind).
func ranged(op *pb.ResponseOp) []*mvccpb.KeyValue {
	if r := op.GetResponseRange(); r != nil {
		return r.Kvs
	}
	return nil
}

// ownerOfKey is the owner a hold key or a ledger names: its last segment.
func ownerOfKey(key []byte) string {
	s := string(key)
	return unescape(s[strings.LastIndexByte(s, '/')+1:])
}

// modeOfKey is the mode of a hold key (…/h/x/O or …/h/c/O).
func modeOfKey(key []byte) lockmgr.Mode {
	s := string(key)
	s = s[:strings.LastIndexByte(s, '/')]
	if strings.HasSuffix(s, "/x") {
		return lockmgr.Exclusive
	}
	return lockmgr.Collaborative
}
