// Package lockmgr is a lock manager: named resource locks
// whose table lives in a shmlock segment, so every process on the machine
// that opens the segment sees the same locks.
//
// A resource is a name (at most MaxResourceLen bytes); a hold is taken by
// an owner (a name of at most MaxOwnerLen bytes, chosen by the caller, for
// instance "agent-1") in one of two modes: Exclusive, one holder at a time,
// or Collaborative, up to MaxHolders holders at once whose every arrival
// and departure bumps the resource's version. A conflict fails at once with
// ErrResourceLocked unless the caller asks for retries, which follow an
// exponential backoff (100, 200, 400, 800, 1000 ms by default) and are
// woken early by any release of the resource. Waiters are not served in
// order: a holder that acquires again at once usually gets the resource
// back, and a waiter whose attempt failed keeps off it for a few
// microseconds (eight times what its failed attempts cost), which lets a
// busy resource's holders run series of holds (keepoff.go says what that
// buys and costs); AcquireOptions.Eager turns it off for a waiter that
// needs the resource the moment it is free. A hold may have a TTL after
// which it expires; a hold whose process died is ended (reclaimed) by the
// next acquisition that conflicts with it, which learns it from
// LockInfo.Reclaimed. A hold that ends without its owner's release (its
// process died, or its TTL passed) marks the resource inconsistent: every
// grant reports LockInfo.Inconsistent until a holder repairs the data and
// calls MarkConsistent (an inconsistent resource is never recycled). Its
// owner's late Release (or Refresh) gets ErrLockTimeout, every such owner
// and not only the last: the ended hold's record keeps the owner's name (a
// tombstone) until a grant needs the room and the chain of records cannot
// grow, so the memory for this is the resource's holder records. The version only grows, across expiry, reclaim and
// the recycling of table entries, so it serves as a fencing token.
//
// Locker is the part of this API that the etcd backend
// (lockmgr/etcdlock) honours too: a caller written against it moves from
// one host to many by constructing the other backend.
//
// Acquisitions follow a state machine (Unlocked, Waiting,
// Acquired, Failed, Released, Expired; see State), which LockInfo and
// ResourceInfo report. Errors wrap sentinels that carry the design's codes
// (see Code).
//
// Times in the table are CLOCK_MONOTONIC readings (to within a
// microsecond: between clock reads, a Manager extrapolates by the CPU's
// time-stamp counter, at a third of a read's cost), which every process of
// the boot shares and which no change of the wall clock moves, so a TTL
// means the same to every process. A hold's liveness is its process's,
// and, after SetCompanion, also a second process's: shmctl lock names the
// command it runs, so its lock stays held while either lives.
//
// The table's capacity is fixed when the segment is created
// (layout.Options.LockMgrEntries, one entry of which is the table's
// header). A resource stays in the table after its last release, so that
// using it again costs one probe; when the table has no free entry, an
// insert (or a collaborative resource that needs an overflow entry for
// more holders) recycles a resource that nobody holds or declared. Lookups hash
// the name and take no table-wide lock.
//
// Every change of a resource happens under its entry's lock, held for a
// few instructions of one call; a process that died holding it has it
// taken over, but one stopped inside a call (SIGSTOP, a debugger) keeps it
// while stopped, and every call on that resource waits for it. Reclaim and
// ForceRelease, an operator's repairs, wait as long; ForceReleaseContext
// bounds the wait, and its error names the stopped process's pid.
//
// Once the segment is closed (shm.Segment.Close), every method of its
// Managers that acquires, reads or changes the table returns ErrClosed
// (code CLOSED; errors.Is finds shm.ErrClosed in it too), List, Stats and
// DeclaredOnly report an empty table, and nothing changes in the
// segment's file; an acquisition waiting between attempts returns
// ErrClosed at its next wake (within maxSleepSlice, 100 ms); one in
// flight either completes, its hold real in the file, or returns
// ErrClosed having left nothing there. Release and MarkConsistent still
// work after Close, as in packages spinlock and upgrade, so a holder that
// unwinds says what it repaired and gives its hold back.
//
//	seg, _ := shm.OpenOrCreate("jobs", shm.Options{})
//	m, _ := lockmgr.Open(seg, lockmgr.Options{})
//	info, err := m.Acquire(ctx, "task:123", "agent-1", lockmgr.Exclusive,
//		lockmgr.AcquireOptions{TTL: 30 * time.Second})
//	if err != nil { ... }
//	defer m.Release("task:123", "agent-1")
//	// info.Version is this hold's fencing token.
package lockmgr
