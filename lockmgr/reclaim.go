package lockmgr

import (
	"context"
	"fmt"
	"slices"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/layout"
)

// Why a hold was ended by Reclaim.
const (
	EndedExpired = "expired" // its TTL passed
	EndedDead    = "dead"    // its process (and companion) died
	EndedForced  = "forced"  // an operator ended it (ForceRelease)
)

// EndedHold is a hold that Reclaim ended (or, in a dry run, would end).
type EndedHold struct {
	Resource string
	Owner    string
	PID      int
	Process  uint64 // the holding process's packed identity (see HolderInfo.Process)
	Why      string // EndedExpired, EndedDead or EndedForced
}

// Reclaim ends every hold whose TTL has passed or whose processes died,
// as a conflicting acquisition would, and reports them; each marks its
// resource inconsistent (see MarkConsistent) and wakes its waiters. With
// dryRun it only reports (the table may be read-only then). It also frees
// the overflow entries that no resource's chain reaches (a process died
// in the middle of linking or unlinking one), and clears the mode of a
// resource that no hold is left to have (a process died in the middle of
// the last release). For repair
// tools (shmctl reclaim) and for callers that never conflict with a dead
// holder themselves. ErrClosed once the segment is closed.
func (m *Manager) Reclaim(dryRun bool) ([]EndedHold, error) {
	if dryRun {
		if m.closed() {
			return nil, ErrClosed
		}
	} else if err := m.writable(); err != nil {
		return nil, err
	}
	var ended []EndedHold
	for _, e := range m.t.entries[1:] {
		if kindOf(e.Ctl.Load()) != kindResource {
			continue
		}
		if dryRun {
			ended = append(ended, m.wouldEnd(e)...)
			continue
		}
		if !m.t.lockEntry(e) {
			return ended, ErrClosed
		}
		now := m.clock.now()
		left, woke := 0, false
		name := unpack(e.Name[:])
		if kindOf(e.Ctl.Load()) == kindResource {
			for h := range m.t.holders(e) {
				p := h.Process.Load()
				if p == 0 {
					continue
				}
				why := m.endReason(p, h.Companion.Load(), h.Expires.Load(), now)
				if why == "" {
					left++
					continue
				}
				ended = append(ended, EndedHold{Resource: name, Owner: unpack(h.Owner[:]), PID: pidOf(p), Process: p, Why: why})
				ending := endReclaimed
				if why == EndedExpired {
					ending = endExpired
				}
				m.endHold(e, h, ending, now)
				woke = true
			}
			if c := e.Ctl.Load(); left == 0 && modeOf(c) != 0 {
				// No holder left: the ones just ended, or a process
				// killed in a release (or ForceRelease) between the end of
				// the last hold and this same clear left the mode behind.
				memview.StoreOwned32(&e.Ctl, withMode(c, 0))
			}
		}
		m.t.unlockEntry(e)
		if woke {
			m.t.wakeAll(e)
		}
	}
	if !dryRun {
		// Overflow entries a process left unreachable when it died in the
		// middle of a chain's change (freeOrphans; taking the insert lock
		// over from it frees them too, but a segment may carry them from
		// a build before that).
		if !m.t.lockEntry(m.t.head) {
			return ended, ErrClosed
		}
		m.t.freeOrphans()
		m.t.unlockEntry(m.t.head)
	}
	return ended, nil
}

// wouldEnd is Reclaim's dry run on resource entry e: the holds a Reclaim
// would end now. They are judged from a snapshot, outside e's lock (the
// liveness checks read /proc); the verdict is on a hold's process, and the
// process may have released the hold and exited after the snapshot, so a
// hold is reported only if a snapshot read after the verdict still has it
// (a dead process's hold is final).
func (m *Manager) wouldEnd(e *layout.LockMgrEntry) []EndedHold {
	now := m.clock.now()
	s := m.t.read(e)
	if testHookStep != nil {
		testHookStep("reclaim:snapshot")
	}
	var ended []EndedHold
	var judged []holderSnap
	for _, h := range s.holders {
		if why := m.endReason(h.process, h.companion, h.expires, now); why != "" {
			ended = append(ended, EndedHold{Resource: s.name, Owner: h.owner, PID: pidOf(h.process), Process: h.process, Why: why})
			judged = append(judged, h)
		}
	}
	if len(ended) == 0 {
		return nil
	}
	again := m.t.read(e)
	kept := ended[:0]
	for i, h := range judged {
		if again.name == s.name && slices.ContainsFunc(again.holders, h.sameHold) {
			kept = append(kept, ended[i])
		}
	}
	return kept
}

// sameHold reports whether o is the hold h in another snapshot: the same
// process's acquisition, under the same owner (a Refresh may have moved
// its expiry).
func (h holderSnap) sameHold(o holderSnap) bool {
	return o.process == h.process && o.acquired == h.acquired && o.owner == h.owner
}

// endReason says why a hold of process p (with companion c, expiring at
// expires) should end now: EndedExpired, EndedDead, or "" if it lives on.
func (m *Manager) endReason(p, c, expires uint64, now int64) string {
	switch {
	case expiredAt(expires, now):
		return EndedExpired
	case !m.t.isAlive(p, now) && !m.t.isAlive(c, now):
		return EndedDead
	}
	return ""
}

// ForceRelease ends every hold of resource, whoever has it, alive or not,
// and returns them: for an operator who knows a holder is stuck (shmctl
// unlock --force). Each end bumps the version, so the holders' fencing
// tokens are stale, and marks the resource inconsistent; a holder's own
// late Release gets ErrLockNotHeld. Waiters are woken. Nothing to end is
// no error (an empty list).
//
// It needs no operator lock (shm.Segment.TryLockOperator), unlike the
// forces of a spinlock and of an upgrade mutex: it reads and ends the
// holds under the resource's entry lock, as every release, grant, Reclaim
// and conflicting acquisition's end of a dead holder does, Go's and C's,
// so a second force finds the holds ended (an empty list) and a release
// that comes after it finds its hold gone; the entry lock is taken over
// only from a dead process, whose partial change leaves a valid entry
// (see entry.go). It waits for the entry lock for as long as its holder
// lives: a holder of the resource holds it for a few instructions of each
// call only, so only a process stopped inside such a call (not one
// stopped while it holds the resource) can keep a force waiting, and
// ForceRelease then waits as long as it stays stopped. ForceReleaseContext
// bounds that wait.
func (m *Manager) ForceRelease(resource string) ([]EndedHold, error) {
	return m.ForceReleaseContext(context.Background(), resource)
}

// ForceReleaseContext is ForceRelease, waiting for the resource's entry
// lock until ctx is done: then it fails, having changed nothing, with an
// error that wraps ctx.Err() (errors.Is finds context.DeadlineExceeded or
// context.Canceled) and names the pid of the process that holds the entry
// lock, a process that lives but does not let go (stopped by SIGSTOP or a
// debugger inside a call into the manager). A free entry lock is taken
// even if ctx is done already, as the others' forces do.
func (m *Manager) ForceReleaseContext(ctx context.Context, resource string) ([]EndedHold, error) {
	var res resKey
	if err := res.setResource(resource); err != nil {
		return nil, err
	}
	if err := m.writable(); err != nil {
		return nil, err
	}
	w := entryWait{done: ctx.Done()}
	e, err := m.t.lookupUntil(&res, &w)
	if w.ended {
		return nil, fmt.Errorf("lockmgr: force release of %q: waiting for its entry lock, held by pid %d inside a call into the lock manager (stopped?): %w",
			resource, pidOf(w.holder), ctx.Err())
	}
	if err != nil || e == nil {
		return nil, err
	}
	now := m.clock.now()
	var ended []EndedHold
	for h := range m.t.holders(e) {
		if p := h.Process.Load(); p != 0 {
			ended = append(ended, EndedHold{Resource: resource, Owner: unpack(h.Owner[:]), PID: pidOf(p), Process: p, Why: EndedForced})
			m.endHold(e, h, endForced, now)
		}
	}
	if len(ended) > 0 {
		memview.StoreOwned32(&e.Ctl, withMode(e.Ctl.Load(), 0))
	}
	m.t.unlockEntry(e)
	if len(ended) > 0 {
		m.t.wakeAll(e)
	}
	return ended, nil
}
