package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shmlock/shmlock/lockmgr"
)

// lostSignal is the Lost channel of a hold, closed once when the hold
// ends. The watch that notices a hold's end by others (its lease
// expired, an operator deleted it) starts at the first call of Lost only:
// a caller that never asks pays nothing.
type lostSignal struct {
	ch       chan struct{}
	once     sync.Once
	start    sync.Once
	stop     context.CancelFunc // the watch's, once started
	mu       sync.Mutex
	deadline atomic.Pointer[time.Time] // when a TTL hold must be taken as lost; nil: none
	// moved has a value when the deadline changed since the watch's
	// goroutine last looked: a Refresh may shorten it (or give a hold on
	// the session one), and the goroutine must not sleep on the old one.
	moved chan struct{}
}

func newLostSignal(deadline time.Time) *lostSignal {
	l := &lostSignal{ch: make(chan struct{}), moved: make(chan struct{}, 1)}
	l.setDeadline(deadline)
	return l
}

// setDeadline sets the time after which the hold must be taken as lost
// (zero: none). It keeps t itself, monotonic reading included: a deadline
// kept as wall-clock nanoseconds would move with a step of the wall clock
// (NTP, an operator), and a step back would let the hold outlive etcd's
// expiry, which etcd counts on a monotonic clock.
func (l *lostSignal) setDeadline(t time.Time) {
	if t.IsZero() {
		l.deadline.Store(nil)
	} else {
		l.deadline.Store(&t)
	}
	select {
	case l.moved <- struct{}{}:
	default: // a change is already waiting to be seen: it reads the latest
	}
}

func (l *lostSignal) fire() {
	l.once.Do(func() {
		close(l.ch)
		l.mu.Lock()
		if l.stop != nil {
			l.stop()
		}
		l.mu.Unlock()
	})
}

// Lost returns a channel that is closed when owner's hold of resource,
// granted by this Manager, ends: by Release, or without it, because its
// lease expired (its TTL passed without a Refresh, or the session was
// lost: Done), or because its key was deleted by someone else. A holder
// selects on it while it works, and stops writing when it closes.
//
// A TTL hold is taken as lost as soon as its TTL, less a margin (a
// tenth, at most a second), has passed on this host's monotonic clock
// since the last renewal was sent, which is never later than etcd's own
// expiry (etcd counts from when the renewal arrives). A hold on the
// session is lost with it (Done), which is noticed the same way. Once
// the channel has closed, the owner's Release or Refresh through this
// Manager ends the hold, if etcd has not yet, and returns
// lockmgr.ErrLockTimeout, its MarkConsistent returns
// lockmgr.ErrLockNotHeld, and its Acquire ends the hold and is granted
// the resource anew (told it is inconsistent). ErrLockNotHeld if this
// Manager holds no such hold.
func (m *Manager) Lost(resource, owner string) (<-chan struct{}, error) {
	if err := checkNames(resource, owner); err != nil {
		return nil, err
	}
	h := m.local(resource, owner)
	if h == nil {
		return nil, fmt.Errorf("%w: %q by %q (not granted by this Manager)", lockmgr.ErrLockNotHeld, resource, owner)
	}
	h.lost.start.Do(func() { m.watchLost(h) })
	return h.lost.ch, nil
}

// watchLost starts the goroutine that fires h's lost signal when its key
// is deleted or its deadline passes.
func (m *Manager) watchLost(h *hold) {
	ctx, cancel := context.WithCancel(context.Background())
	h.lost.mu.Lock()
	h.lost.stop = cancel
	h.lost.mu.Unlock()
	select {
	case <-h.lost.ch: // ended before the watch started
		cancel()
		return
	default:
	}
	wch := m.c.Watch(ctx, h.key, clientv3.WithRev(h.rev), clientv3.WithFilterPut())
	go func() {
		defer cancel()
		timer := time.NewTimer(time.Hour)
		timer.Stop() // armed below while there is a deadline
		defer timer.Stop()
		for {
			if dl := h.lost.deadline.Load(); dl != nil {
				left := time.Until(*dl)
				if left <= 0 {
					m.loseHold(h)
					return
				}
				timer.Reset(left)
			} else {
				timer.Stop()
			}
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			case <-h.lost.moved:
				// Look at the deadline again: a Refresh may have moved
				// it sooner.
			case wr, ok := <-wch:
				if !ok {
					return // cancelled: the hold ended
				}
				if err := wr.Err(); err != nil {
					if errors.Is(err, context.Canceled) {
						return
					}
					// Compacted past the hold's revision, or the watch
					// broke: look at the key itself, then watch on from
					// the revision it was seen at (a compacted answer's
					// header has no revision: watching from its 0+1 would
					// be compacted again, a loop of watches and reads).
					gone, rev := m.holdGone(ctx, h)
					if gone {
						m.loseHold(h)
						return
					}
					wch = m.c.Watch(ctx, h.key, clientv3.WithRev(rev+1), clientv3.WithFilterPut())
					continue
				}
				if len(wr.Events) > 0 {
					m.loseHold(h)
					return
				}
			}
		}
	}()
}

// holdGone reports whether h's key no longer exists as h (or the answer
// cannot be had: then it is not safe to go on writing), and the revision
// it was read at.
func (m *Manager) holdGone(ctx context.Context, h *hold) (bool, int64) {
	resp, err := m.c.Get(ctx, h.key)
	if err != nil {
		return true, 0
	}
	return len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != h.rev, resp.Header.Revision
}

// loseHold fires h's signal and drops this Manager's record of it, if it
// is still the record of that hold, keeping the news (told) for its
// owner's next Release or Refresh.
func (m *Manager) loseHold(h *hold) {
	m.mu.Lock()
	for id, x := range m.holds {
		if x == h {
			delete(m.holds, id)
			m.told[id] = h.rev
		}
	}
	m.mu.Unlock()
	h.lost.fire()
}

// toldLost reports whether the hold of resource by owner whose key was
// created at rev is one whose Lost this Manager closed (loseHold). A
// hold past its deadline whose Lost nobody asked for was told nothing:
// its Release or Refresh goes on while etcd has it.
func (m *Manager) toldLost(resource, owner string, rev int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	told, ok := m.told[holdID{resource, owner}]
	return ok && told == rev
}
