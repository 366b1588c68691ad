package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shmlock/shmlock/lockmgr"
)

// Limits and defaults.
const (
	// MinTTL is the shortest TTL a hold or a session may have: etcd
	// counts leases in whole seconds. A server may raise its minimum
	// above this (it grants at least 1.5 election timeouts); a TTL below
	// the server's minimum is refused too (ErrBadOptions), never silently
	// lengthened.
	MinTTL = time.Second
	// MaxTTL is the longest TTL a hold may have: etcd refuses a lease of
	// more than 9e9 seconds (about 285 years), which would otherwise come
	// back as the server's error, ErrUnavailable. Longer is ErrBadOptions.
	MaxTTL = 9_000_000_000 * time.Second
	// DefaultSessionTTL is the lease of a Manager's session: how long
	// its holds without a TTL outlive a holder that died or lost etcd.
	DefaultSessionTTL = 10 * time.Second
	// DefaultPrefix is where a Manager's keys live.
	DefaultPrefix = "shmlock/"
	// DefaultRequestTimeout bounds the requests of the calls that take no
	// context (Release, Refresh, Inspect, ...).
	DefaultRequestTimeout = 5 * time.Second
	// tombstoneTTL is how long the news of a hold that ended without its
	// release waits for its owner's late Release (ErrLockTimeout): the
	// shm table keeps it until the room is needed; etcd has room, but
	// not forever.
	tombstoneTTL = time.Hour
)

// Options configure a Manager.
type Options struct {
	// Prefix is the key prefix of the lock table; Managers with the same
	// prefix on the same cluster share their locks. "" means
	// DefaultPrefix; a missing trailing "/" is added.
	Prefix string
	// SessionTTL is the lease of the Manager's session, rounded up to
	// whole seconds; 0 means DefaultSessionTTL, at least MinTTL, at most
	// MaxTTL.
	SessionTTL time.Duration
	// RequestTimeout bounds each request of a call that takes no
	// context, and Close as a whole; 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger receives the warning for the release of a lock that does not
	// exist; nil means slog.Default().
	Logger *slog.Logger
}

// Manager is a lock table kept in etcd: every Manager on the same
// cluster and prefix, in any process on any host, sees the same named
// locks. It satisfies lockmgr.Locker. A Manager may be used by any number
// of goroutines; it owns a session (a lease it keeps alive) on which its
// holds without a TTL live, so they end when the process dies or loses
// etcd for longer than the session's TTL.
type Manager struct {
	c          *clientv3.Client
	prefix     string
	session    clientv3.LeaseID
	sessionTTL int64 // seconds
	timeout    time.Duration
	log        *slog.Logger
	host       string
	pid        int

	stopKeepAlive context.CancelFunc
	done          chan struct{} // closed when the session ends (keepSession)
	stopped       chan struct{} // closed when keepSession has returned
	closed        atomic.Bool
	declaredOnly  atomic.Bool // as last seen: picks the acquisition's comparison

	mu    sync.Mutex
	holds map[holdID]*hold // this Manager's holds
	// told has the create revisions of the holds this Manager took as
	// lost (loseHold, endSessionHolds) before their owners heard of it
	// from a Release or Refresh: an entry lasts until the owner's next
	// Release, Refresh or grant by this Manager.
	told map[holdID]int64

	held heldStats
	// bg counts the background revocations, which Close waits for. A
	// WaitGroup's Add from zero must happen before its Wait, and none may
	// come while Wait runs; but Release (allowed during and after Close:
	// a TTL hold outlives the session) adds to it. So every Add is made
	// under bgMu while bgClosed is false, and Close sets bgClosed under
	// bgMu before it waits: no Add follows the Wait.
	bgMu     sync.Mutex
	bgClosed bool
	bg       sync.WaitGroup
	// bgCtx is the context of the background work; Close cancels it at
	// its deadline, so that Close waits for it no longer than that.
	bgCtx    context.Context
	bgCancel context.CancelFunc
}

type holdID struct{ resource, owner string }

// hold is a hold this Manager granted.
type hold struct {
	key      string
	rev      int64 // the key's create revision
	mode     lockmgr.Mode
	lease    clientv3.LeaseID // the session's, or the hold's own (TTL)
	ttl      int64            // seconds; 0 on the session's lease
	acquired time.Time
	lost     *lostSignal
}

// New starts a Manager on client: it grants the session's lease and keeps
// it alive until Close. ctx bounds only the start.
func New(ctx context.Context, client *clientv3.Client, opts Options) (*Manager, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: no etcd client", lockmgr.ErrBadOptions)
	}
	if opts.SessionTTL < 0 || (opts.SessionTTL > 0 && opts.SessionTTL < MinTTL) || opts.SessionTTL > MaxTTL || opts.RequestTimeout < 0 {
		return nil, fmt.Errorf("%w: session TTL %v (%v to %v), request timeout %v",
			lockmgr.ErrBadOptions, opts.SessionTTL, MinTTL, MaxTTL, opts.RequestTimeout)
	}
	m := &Manager{c: client, prefix: opts.Prefix, timeout: opts.RequestTimeout, log: opts.Logger,
		pid: os.Getpid(), done: make(chan struct{}), stopped: make(chan struct{}), holds: make(map[holdID]*hold), told: make(map[holdID]int64)}
	if m.prefix == "" {
		m.prefix = DefaultPrefix
	}
	if !strings.HasSuffix(m.prefix, "/") {
		m.prefix += "/"
	}
	if m.timeout == 0 {
		m.timeout = DefaultRequestTimeout
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.bgCtx, m.bgCancel = context.WithCancel(context.Background())
	m.host, _ = os.Hostname()
	ttl := opts.SessionTTL
	if ttl == 0 {
		ttl = DefaultSessionTTL
	}
	granted := time.Now() // before the request: etcd counts from later
	id, secs, err := m.grant(ctx, ttl)
	if err != nil {
		m.bgCancel()
		return nil, err
	}
	m.session, m.sessionTTL = id, secs
	// The keep-alive runs on a context of its own: ctx bounds the start
	// only, the session lasts until Close.
	kctx, cancel := context.WithCancel(context.Background())
	m.stopKeepAlive = cancel
	go m.keepSession(kctx, granted)
	return m, nil
}

// Done is closed when the Manager's session ends: by Close, or because
// etcd says its lease is gone, or because it could not be renewed in time
// (etcd unreachable). In the last case it closes when the session's TTL
// (less a margin) has passed on this host's monotonic clock since the
// last renewal that etcd acknowledged was sent: never after etcd expires
// the lease and grants its holds to others, for etcd counts from the
// renewal's arrival. Its holds without a TTL are then lost, and every
// call returns lockmgr.ErrSessionLost; the Manager revokes the lease (if
// etcd answers), so that a new Manager of the same owners may take their
// locks at once.
func (m *Manager) Done() <-chan struct{} { return m.done }

// Close ends the session: it revokes the session's lease, which ends every
// hold of this Manager without a TTL at once (its waiters are woken), and
// stops keeping it alive. Holds with a TTL run out on their own. The
// client stays open: it is the caller's. Close takes at most
// Options.RequestTimeout in all, etcd reachable or not. After it, Acquire
// and Refresh return lockmgr.ErrSessionLost; a hold with a TTL is still
// given back by Release and marked repaired by MarkConsistent.
func (m *Manager) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	// One deadline for every step: each waits for etcd, and with etcd
	// unreachable each would wait a timeout of its own (the revocation
	// and the fold of the hold time took two, a giveUp under way and the
	// background revocations more).
	ctx, cancel := m.reqCtx()
	defer cancel()
	m.stopKeepAlive() // ends a giveUp under way too: the revocation is below
	<-m.stopped
	var err error
	// The revocation first: it ends the holds and wakes their waiters,
	// while a total not folded stays readable where it is.
	if _, rerr := m.c.Revoke(ctx, m.session); rerr != nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
		err = unavailable(rerr)
	}
	m.bgMu.Lock()
	m.bgClosed = true
	m.bgMu.Unlock()
	stop := context.AfterFunc(ctx, m.bgCancel)
	m.bg.Wait()
	stop()
	m.bgCancel()
	return errors.Join(err, m.foldHeld(ctx))
}

// usable is nil while the Manager may take and change holds.
func (m *Manager) usable() error {
	if m.closed.Load() {
		return fmt.Errorf("%w: the Manager is closed", lockmgr.ErrSessionLost)
	}
	select {
	case <-m.done:
		return fmt.Errorf("%w: lease %x", lockmgr.ErrSessionLost, int64(m.session))
	default:
		return nil
	}
}

// reqCtx is the context of a request of a call that takes none.
func (m *Manager) reqCtx() (context.Context, context.CancelFunc) {
	return m.reqCtxIn(context.Background())
}

// reqCtxIn is reqCtx within parent: the background work's requests end
// at Close's deadline.
func (m *Manager) reqCtxIn(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, m.timeout)
}

// seconds is d in whole seconds, rounded up: the unit of etcd's leases.
func seconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}

// grant grants a lease of ttl (rounded up to seconds); ErrBadOptions if
// the server would grant a longer one (its minimum is higher).
func (m *Manager) grant(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, int64, error) {
	secs := seconds(ttl)
	resp, err := m.c.Grant(ctx, secs)
	if err != nil {
		return 0, 0, m.rpcErr(ctx, err)
	}
	if resp.TTL != secs {
		m.revoke(resp.ID)
		return 0, 0, fmt.Errorf("%w: TTL %v is below the etcd server's minimum lease of %ds",
			lockmgr.ErrBadOptions, ttl, resp.TTL)
	}
	return resp.ID, secs, nil
}

// background runs f in a goroutine that Close waits for, until Close's
// deadline (f's context ends then); once Close has begun to wait, in the
// caller, on a context that does not end (see bg): the work is not left
// running after Close, when the caller may close the client.
func (m *Manager) background(f func(ctx context.Context)) {
	m.bgMu.Lock()
	if !m.bgClosed {
		m.bg.Go(func() { f(m.bgCtx) })
		m.bgMu.Unlock()
		return
	}
	m.bgMu.Unlock()
	f(context.Background())
}

// revoke revokes a lease the Manager no longer needs; a failure only
// leaves it to expire.
func (m *Manager) revoke(id clientv3.LeaseID) { m.revokeIn(context.Background(), id) }

// revokeIn is revoke within parent.
func (m *Manager) revokeIn(parent context.Context, id clientv3.LeaseID) {
	ctx, cancel := m.reqCtxIn(parent)
	defer cancel()
	_, _ = m.c.Revoke(ctx, id)
}

// rpcErr is the error of a failed request: ctx's own error if ctx ended,
// ErrSessionLost if the session's lease is gone, else ErrUnavailable.
func (m *Manager) rpcErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return cerr
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("%w: %w", lockmgr.ErrSessionLost, err)
	}
	return unavailable(err)
}

func unavailable(err error) error { return fmt.Errorf("%w: %w", lockmgr.ErrUnavailable, err) }

// checkNames checks a resource and an owner as every backend does.
func checkNames(resource, owner string) error {
	if err := lockmgr.CheckResource(resource); err != nil {
		return err
	}
	return lockmgr.CheckOwner(owner)
}

// local returns this Manager's hold of resource by owner, if any.
func (m *Manager) local(resource, owner string) *hold {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.holds[holdID{resource, owner}]
}

// remember records a hold this Manager granted; false, recording
// nothing, if the hold is on the session and the session has ended. Done
// closes before endSessionHolds takes m.mu, so a hold on the session is
// either recorded before endSessionHolds looks (and told by it) or
// refused here: none is taken as live after Done.
func (m *Manager) remember(resource, owner string, h *hold) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h.lease == m.session {
		select {
		case <-m.done:
			return false
		default:
		}
	}
	m.holds[holdID{resource, owner}] = h
	delete(m.told, holdID{resource, owner})
	return true
}

// forget drops this Manager's record of a hold that ended, and tells its
// Lost channel.
func (m *Manager) forget(resource, owner string) {
	m.mu.Lock()
	h := m.holds[holdID{resource, owner}]
	delete(m.holds, holdID{resource, owner})
	delete(m.told, holdID{resource, owner})
	m.mu.Unlock()
	if h != nil {
		h.lost.fire()
	}
}

// endSessionHolds tells the Lost channels of the holds on the session's
// lease, which ended with it, and keeps the news for their owners (told),
// as loseHold does: etcd may keep a key a while after Done (renewals whose
// answers were lost, a revocation that did not reach it), and the owner's
// Release must not then end as released a hold its holder was told to
// stop using.
func (m *Manager) endSessionHolds() {
	m.mu.Lock()
	var ended []*hold
	for id, h := range m.holds {
		if h.lease == m.session {
			ended = append(ended, h)
			delete(m.holds, id)
			m.told[id] = h.rev
		}
	}
	m.mu.Unlock()
	for _, h := range ended {
		h.lost.fire()
	}
}

var _ lockmgr.Locker = (*Manager)(nil)
