package lockmgr

import (
	"context"
	"fmt"
	"time"
)

// Locker is the named-lock API that every backend honours: the
// shared-memory table of one machine (*Manager) and etcd across machines
// (package lockmgr/etcdlock). A caller picks the backend by construction
// and uses only this interface afterwards; the behaviours and the sentinel
// errors (errors.Is) are the same on both, and where a backend differs in
// a detail (how soon a dead holder is noticed, FIFO order of waiters,
// name and TTL limits) its package documentation says so.
//
// Left out on purpose, because only one machine can honour them:
// SetCompanion (a process identity means nothing on another host),
// Reclaim and ForceRelease (operator repairs of the shm table; etcd ends a
// dead holder's hold itself when its lease expires), and Capacity (etcd
// has no fixed table). They stay methods of *Manager.
type Locker interface {
	// Acquire takes resource for owner in mode; see Manager.Acquire.
	Acquire(ctx context.Context, resource, owner string, mode Mode, opts AcquireOptions) (LockInfo, error)
	// Release ends owner's hold; see Manager.Release.
	Release(resource, owner string) error
	// Refresh extends owner's live hold to ttl from now; see
	// Manager.Refresh.
	Refresh(resource, owner string, ttl time.Duration) (LockInfo, error)
	// MarkConsistent clears the resource's inconsistent mark; see
	// Manager.MarkConsistent.
	MarkConsistent(resource, owner string) error
	// Inspect describes one resource; see Manager.Inspect.
	Inspect(resource string) (ResourceInfo, error)
	// Overview reads every resource, the statistics and the
	// declared-only switch at once.
	Overview() (Overview, error)
	// CheckVersion is nil if version is still resource's current one;
	// see Manager.CheckVersion.
	CheckVersion(resource string, version uint64) error
	// Declare, Undeclare and SetDeclaredOnly manage declared resources;
	// see Manager.Declare.
	Declare(resources ...string) error
	Undeclare(resource string) error
	SetDeclaredOnly(on bool) error
}

// Overview is everything a lock table reports about itself, read
// together: a networked backend reads it in one request, at one revision.
type Overview struct {
	Resources    []ResourceInfo
	Stats        Stats
	DeclaredOnly bool
}

var _ Locker = (*Manager)(nil)

// Overview returns List, Stats and DeclaredOnly together (Locker's form of
// them, which can report an error); ErrClosed once the segment is
// closed.
func (m *Manager) Overview() (Overview, error) {
	if m.closed() {
		return Overview{}, ErrClosed
	}
	o := Overview{Resources: m.List(), Stats: m.Stats(), DeclaredOnly: m.DeclaredOnly()}
	if m.closed() {
		return Overview{}, ErrClosed // closed while read: the parts read as empty
	}
	return o, nil
}

// CheckResource reports whether name can be a resource name of every
// backend: ErrBadResource if not.
func CheckResource(name string) error {
	var k resKey
	return k.setResource(name)
}

// CheckOwner reports whether name can be an owner name of every backend:
// ErrBadOwner if not.
func CheckOwner(name string) error {
	var k ownKey
	return k.setOwner(name)
}

// Check reports whether o is usable: ErrBadOptions if not (a negative TTL
// or Wait, Retries below RetryForever, a Backoff that does not grow or
// whose jitter exceeds 1).
func (o AcquireOptions) Check() error { return o.check() }

// check is Check without copying o, its common case (the default Backoff)
// inlined.
func (o *AcquireOptions) check() error {
	if o.TTL|o.Wait >= 0 && o.Retries >= RetryForever && o.Backoff == (Backoff{}) {
		return nil
	}
	return o.checkSlow()
}

func (o *AcquireOptions) checkSlow() error {
	if o.TTL < 0 || o.Wait < 0 || o.Retries < RetryForever || (o.Backoff != Backoff{} && !o.Backoff.valid()) {
		return fmt.Errorf("%w: %+v", ErrBadOptions, *o)
	}
	return nil
}

// MaxRetries is how many attempts may follow a conflict: Retries, or
// RetryForever when only Wait bounds the acquisition.
func (o AcquireOptions) MaxRetries() int { return o.retries() }

// Jittered is the wait after the n'th failed attempt (n from 0), Delay(n)
// shortened by a random fraction of up to the jitter.
func (b Backoff) Jittered(n int) time.Duration { return b.jittered(n) }
