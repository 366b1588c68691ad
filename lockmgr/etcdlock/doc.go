// Package etcdlock is lockmgr's named resource locks kept in etcd v3, for
// agents on many hosts: the same lockmgr.Locker API as the shared-memory
// table of one host, so a caller switches backends by construction only.
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: []string{"10.0.0.1:2379"}})
//	m, _ := etcdlock.New(ctx, cli, etcdlock.Options{})
//	defer m.Close()
//	var locks lockmgr.Locker = m
//	info, err := locks.Acquire(ctx, "task:123", "agent-1", lockmgr.Exclusive,
//		lockmgr.AcquireOptions{Wait: time.Minute})
//
// # Model
//
// A hold is a key in the resource's queue attached to a lease: the
// Manager's session (a lease it keeps alive, Options.SessionTTL) for a
// hold without a TTL, which therefore ends when its process dies (kill -9
// included) or loses etcd for longer than the session's TTL; or a lease of
// its own for a hold with a TTL, which Refresh renews. The queue is
// ordered by the keys' create revisions: an exclusive key is granted once
// no key created before it remains, a collaborative one once no exclusive
// key created before it remains, so collaborative holders coexist, an
// exclusive waiter waits for them all, and nobody starves. A waiter
// watches only the key ahead of it, so a release wakes one waiter (or the
// collaborative waiters it let in), not every waiter.
//
// An uncontended Acquire is one transaction (with a TTL, one more request
// grants the hold's lease first), and Release is one (a TTL hold's lease
// is revoked after it, in the background, or in the Release itself once
// Close has begun): each checks, writes the hold and its ledger, bumps
// the version and counts the event at once. A grant after a wait is one
// more transaction, made when the watch reports the predecessor's
// deletion.
//
// # Keys
//
// Under Options.Prefix (P), with R a resource and O an owner, each with
// '%' and '/' escaped as %25 and %2F:
//
//	P r/R/h/x/O      O's exclusive hold or queued wait, on its lease
//	P r/R/h/c/O      O's collaborative hold or queued wait, on its lease
//	P r/R/l/O        the ledger of O's granted hold, on no lease
//	P r/R/t/O        news of O's hold that ended without its release (1 h lease;
//	                 O's next release, refresh or grant takes it)
//	P r/R/v          the version: its mod revision; deleted with the last hold
//	P r/R/i          present while R is inconsistent
//	P r/R/d          present while R is declared
//	P declared-only  present while undeclared resources are refused
//	P stats/NAME     a counter (grants, releases, conflicts, expired,
//	                 reclaimed): the count is the key's Version
//	P stats/held/ID  a Manager's total hold time; .../all, the closed ones'
//
// The ledger is what lets etcd's own ending of a hold (a lease that
// expired: the key is gone) be noticed: a ledger without its key is a
// hold that ended without its release. The next acquisition, Release or
// Refresh that meets it records the end in one transaction (the resource
// becomes inconsistent, its version moves, the end is counted as expired,
// or reclaimed for a hold on a session) and the next grant reports
// LockInfo.Inconsistent (and Reclaimed if its holder's session ended), as
// the shm table does for a dead process; the owner's late Release gets
// ErrLockTimeout.
//
// # Fencing
//
// LockInfo.Version is the etcd revision of the transaction that granted
// the hold (or recorded the end of a hold that preceded it): it is
// strictly greater than the version of every earlier grant of the
// resource, and of every grant of any resource that happened before, on
// every member of the cluster. Pass it to what the lock protects with each
// write, and have that store refuse a write whose version is lower than
// one it has seen: this is what a fencing token protects against, a
// holder that lost its hold (paused by a GC, a stopped VM, a partition
// that let its lease expire) and writes afterwards, not knowing.
//
// It does not protect a store that does not check it, and it does not
// make two holders impossible: a holder that learns of its loss only
// after a write has left (a pause between its check of Lost and the
// write's arrival) may reach a store after the next holder, which then
// sees its older version and refuses it. Lost closes when the hold's
// TTL, less a margin (a tenth, at most a second, for a late timer), has
// passed on the holder's monotonic clock since its last renewal was
// sent, which is never later than etcd's expiry (etcd counts from the
// renewal's arrival), as long as the two clocks run at about the same
// rate. So does Done for the session, which the Manager keeps alive
// itself for this reason (a renewal every third of its TTL; Done closes
// at the TTL, less the margin, after the sending of the last renewal
// etcd acknowledged), and with it the Lost of every hold on the session:
// clientv3's own keep-alive counts from the answer's arrival and would
// tell up to a second after etcd granted the hold to another. No
// wall-clock time is compared across hosts, nor relied on here (a step
// of the wall clock does not move a lease: etcd counts leases on its
// leader's monotonic clock, restarted in full at a leader's election).
// The times that Inspect reports (AcquiredAt, ExpiresAt) are the
// acquiring host's wall clock and are for people, not for decisions.
//
// # Differences from the shm table
//
// A dead holder is noticed when its lease expires (its session's TTL),
// not at the next conflict. Collaborative arrivals queue behind an
// exclusive waiter that came first. A TTL is whole seconds (a fraction
// is rounded up: a lease never ends before the TTL asked for); one below
// MinTTL (or the server's minimum lease) or above MaxTTL, etcd's longest
// lease, is ErrBadOptions.
// There is no fixed capacity (Stats.Capacity is 0), no companion process,
// and no holder limit per resource. Calls that take no context
// (Release, Refresh, Inspect, ...) bound each request by
// Options.RequestTimeout; a request that fails returns
// lockmgr.ErrUnavailable (the outcome of a Release is then unknown: the
// hold ends with its lease if it was not released). Once the session is
// lost, or the Manager closed, Acquire and Refresh return
// lockmgr.ErrSessionLost; the other calls go on with the client, which is
// the caller's: Release and MarkConsistent because a hold with a TTL
// outlives the session and its holder still gives it back and says what
// it repaired (as the shm Manager's work after its segment's Close), the
// reads and declarations because they take no hold.
package etcdlock
