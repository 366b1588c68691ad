package etcdlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// expiryMargin is how much sooner than a lease's TTL after a renewal's
// sending this host takes the lease as gone: room for a timer that fires
// late on a busy host and for the goroutines that act on it, and for a
// small difference between this host's clock rate and etcd's leader's.
// A tenth of the TTL, at most a second: a renewal every third of the TTL
// still has more than half the TTL to be answered.
func expiryMargin(ttl time.Duration) time.Duration {
	return min(ttl/10, time.Second)
}

// expiresBy is the time, on this host's monotonic clock (sent must carry
// its monotonic reading: time.Now()), by which a lease renewed or granted
// for ttl by a request sent at sent must be taken as gone. etcd counts a
// lease's TTL from the request's arrival at its leader (and expires it
// at its next check after that, every 500 ms), which cannot be before
// the request was sent: so this is never after etcd's expiry, as long as
// the two clocks run at about the same rate.
func expiresBy(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - expiryMargin(ttl))
}

// renewal is the outcome of one keep-alive of the session's lease.
type renewal struct {
	sent time.Time // when the request was sent (before any retry)
	resp *clientv3.LeaseKeepAliveResponse
	err  error
}

// keepSession keeps the session's lease alive, granted by a request sent
// at granted, until ctx ends (Close) or the lease can no longer be known
// to be alive; then it closes done, tells the session's holds, and
// returns once its last request has ended (stopped).
//
// It does not use clientv3's KeepAlive: that one counts the TTL from
// when an answer arrives and looks about once a second, so its channel
// closes up to a second after etcd expired the lease, and meanwhile
// granted the session's holds to others. The invariant here: done closes
// no later than expiresBy(the sending of the last request whose answer
// renewed the lease, the TTL it granted), which is never after etcd's
// own expiry; at once if etcd answers that the lease is gone.
func (m *Manager) keepSession(ctx context.Context, granted time.Time) {
	ttl := time.Duration(m.sessionTTL) * time.Second
	every := ttl / 3
	expiry := expiresBy(granted, ttl)
	rctx, cancel := context.WithCancel(ctx)
	answers := make(chan renewal, 1) // one request at a time: never blocks
	var inflight sync.WaitGroup
	expire := time.NewTimer(time.Until(expiry))
	next := time.NewTimer(every)
	defer func() {
		expire.Stop()
		next.Stop()
		close(m.done)
		m.endSessionHolds()
		cancel()
		inflight.Wait()
		if ctx.Err() == nil {
			m.giveUp(ctx)
		}
		close(m.stopped)
	}()
	for {
		select {
		case <-ctx.Done():
			return // Close: it revokes the lease
		case <-expire.C:
			// Not renewed in time: etcd may expire the lease at any
			// moment now, if it has not yet.
			return
		case <-next.C:
			inflight.Go(func() {
				// A request that hangs (a partition that drops packets)
				// gives way to the next one; the deadline does not wait
				// for it either way.
				qctx, qcancel := context.WithTimeout(rctx, every)
				defer qcancel()
				sent := time.Now()
				resp, err := m.c.KeepAliveOnce(qctx, m.session)
				answers <- renewal{sent: sent, resp: resp, err: err}
			})
		case r := <-answers:
			switch {
			case r.err == nil && r.resp.TTL > 0:
				if dl := expiresBy(r.sent, time.Duration(r.resp.TTL)*time.Second); dl.After(expiry) {
					expiry = dl
					expire.Reset(time.Until(expiry))
				}
				next.Reset(time.Until(r.sent.Add(every)))
			case r.err == nil, errors.Is(r.err, rpctypes.ErrLeaseNotFound):
				// etcd says the lease is gone (KeepAliveOnce reports a TTL
				// of 0 as ErrLeaseNotFound; a TTL <= 0 is the same news).
				return
			default:
				// Unavailable, timed out, or ctx ended (then the loop ends
				// above): try again soon, within the time left.
				next.Reset(min(every, 100*time.Millisecond))
			}
		}
	}
}

// giveUp revokes the session's lease once keepSession has given it up
// (Close revokes it itself). The lease may live on in etcd: renewals
// whose answers were lost still renewed it, for up to a TTL, and with it
// the keys of this Manager's holds and waits, which it no longer counts
// as its own. A new Manager of the same owner (a restarted service)
// would be refused them (ErrAlreadyHeld) until etcd expired the lease.
// One try: if etcd cannot be reached, the lease runs out on its own. ctx
// is the keep-alive's: Close, which revokes the lease itself within its
// own deadline, ends the try rather than wait for it.
func (m *Manager) giveUp(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, min(m.timeout, time.Duration(m.sessionTTL)*time.Second))
	defer cancel()
	_, _ = m.c.Revoke(ctx, m.session)
}
