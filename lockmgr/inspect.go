package lockmgr

import (
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// ResourceInfo describes one resource of the table, as Inspect and List
// report it.
type ResourceInfo struct {
	Resource string
	Mode     Mode  // of the current holders; 0 if none
	State    State // Unlocked, Acquired, or Expired (every remaining hold expired)
	Version  uint64
	Declared bool
	// Inconsistent: a hold ended without its owner's release and no holder
	// has called MarkConsistent since (see LockInfo.Inconsistent).
	Inconsistent bool
	Holders      []HolderInfo
	// Entry is the resource's entry in the segment's table, which names
	// its contention counters (shm.Segment.LockStats with
	// layout.KindLockMgr); 0, the table's header, where there is none
	// (etcd). A resource recycled out of the table and added again may
	// get another entry.
	Entry int
}

// HolderInfo describes one hold.
type HolderInfo struct {
	Owner      string
	PID        int    // the holding process
	Host       string // the holding process's host; "" on the shm backend (this host)
	Companion  int    // the companion process (SetCompanion); 0 if none
	AcquiredAt time.Time
	ExpiresAt  time.Time // zero if the hold does not expire
	State      State     // Acquired or Expired
	// Alive says whether the holding process or its companion lives; a
	// dead holder's hold ends when someone conflicts with it.
	Alive bool
	// Process and CompanionProcess are the packed identities (pid and
	// start time, as in upgrade.Status.Writer) of the holding process and
	// the companion; 0 if none. With them a tool tells a pid's process
	// from a later one that reuses the pid, and judges each on its own
	// (shm.Segment.OwnerAlive), where Alive answers for the pair.
	Process, CompanionProcess uint64
}

// readers: Inspect, List and Stats take no lock (they work on a read-only
// segment, and must not stall behind a dead process's entry lock). They
// read an entry until its lock word was free and its version unchanged
// around the read, at most snapshotTries times, and then report what they
// read.
const snapshotTries = 100

type snapshot struct {
	ctl                                    uint32
	name                                   string
	version                                uint64
	holders                                []holderSnap
	grants, releases, holdNanos, conflicts uint64
	expired, reclaimed                     uint64
}

type holderSnap struct {
	process, companion, acquired, expires uint64
	owner                                 string
}

func (t *table) read(e *layout.LockMgrEntry) snapshot {
	var s snapshot
	for try := 0; try < snapshotTries; try++ {
		if try > 0 {
			runtime.Gosched()
		}
		l0, v0 := e.Lock.Load(), e.Version.Load()
		s = snapshot{ctl: e.Ctl.Load(), version: v0, holders: s.holders[:0],
			grants: e.Grants.Load(), releases: e.Releases.Load(), holdNanos: e.HoldNanos.Load(),
			conflicts: e.Conflicts.Load(), expired: uint64(e.Expired.Load()), reclaimed: uint64(e.Reclaimed.Load())}
		if kindOf(s.ctl) == kindResource {
			s.name = unpack(e.Name[:])
			for h := range t.holders(e) {
				if p := h.Process.Load(); p != 0 {
					s.holders = append(s.holders, holderSnap{process: p, companion: h.Companion.Load(),
						acquired: h.Acquired.Load(), expires: h.Expires.Load(), owner: unpack(h.Owner[:])})
				}
			}
		}
		if l0 == 0 && e.Lock.Load() == 0 && e.Version.Load() == v0 {
			break
		}
	}
	return s
}

func expiredAt(expires uint64, now int64) bool { return expires != 0 && now >= int64(expires) }

// expiry is the Expires word of a hold that runs for ttl from now (0: it
// does not expire). A ttl so long that now+ttl overflows (math.MaxInt64, a
// natural way to say "for ever") is the latest time there is: wrapped, it
// would be a time long past, the hold expired the moment it was granted,
// and a second owner let in at once. A clock that says a time before its
// epoch (now <= 0) cannot overflow.
func expiry(now int64, ttl time.Duration) uint64 {
	switch {
	case ttl <= 0:
		return 0
	case now > 0 && int64(ttl) > math.MaxInt64-now:
		return math.MaxInt64
	}
	return uint64(now + int64(ttl))
}

func (m *Manager) info(s snapshot, now int64) ResourceInfo {
	ri := ResourceInfo{Resource: s.name, Mode: modeOf(s.ctl), Version: s.version, Declared: s.ctl&ctlDeclared != 0,
		Inconsistent: s.ctl&ctlInconsistent != 0,
		Holders:      make([]HolderInfo, 0, len(s.holders))}
	live := 0
	for _, h := range s.holders {
		hi := HolderInfo{Owner: h.owner, PID: pidOf(h.process), Companion: pidOf(h.companion),
			Process: h.process, CompanionProcess: h.companion,
			AcquiredAt: m.clock.time(int64(h.acquired)), State: Acquired,
			Alive: m.t.isAlive(h.process, now) || m.t.isAlive(h.companion, now)}
		if h.expires != 0 {
			hi.ExpiresAt = m.clock.time(int64(h.expires))
		}
		if expiredAt(h.expires, now) {
			hi.State = Expired
		} else {
			live++
		}
		ri.Holders = append(ri.Holders, hi)
	}
	switch {
	case len(ri.Holders) == 0:
		ri.State = Unlocked
	case live == 0:
		ri.State = Expired
	default:
		ri.State = Acquired
	}
	return ri
}

func pidOf(w uint64) int {
	if w == 0 {
		return 0
	}
	id, _ := proc.Unpack(w)
	return int(id.PID)
}

// Inspect describes resource; a resource not in the table is Unlocked.
// ErrClosed once the segment is closed.
func (m *Manager) Inspect(resource string) (ResourceInfo, error) {
	var res resKey
	if err := res.setResource(resource); err != nil {
		return ResourceInfo{}, err
	}
	if m.closed() {
		return ResourceInfo{}, ErrClosed
	}
	ri := ResourceInfo{Resource: resource, State: Unlocked}
	if i := m.t.search(&res, false); i >= 0 {
		if s := m.t.read(m.t.entries[i]); kindOf(s.ctl) == kindResource && s.name == resource {
			ri = m.info(s, m.clock.now())
			ri.Entry = i
		}
	}
	if m.closed() {
		return ResourceInfo{}, ErrClosed // closed while read: part of it was zeros
	}
	return ri, nil
}

// List describes every resource in the table, held or not, in table order;
// none once the segment is closed.
func (m *Manager) List() []ResourceInfo {
	if m.closed() {
		return nil
	}
	now := m.clock.now()
	var out []ResourceInfo
	for i, e := range m.t.entries[1:] {
		if kindOf(e.Ctl.Load()) != kindResource {
			continue
		}
		if s := m.t.read(e); kindOf(s.ctl) == kindResource {
			ri := m.info(s, now)
			ri.Entry = 1 + i // entries[0] is the header
			out = append(out, ri)
		}
	}
	if m.closed() {
		return nil // closed while read: part of it was zeros
	}
	return out
}

// Stats are the table's statistics, over every process that used it since
// it was created. Each entry keeps its own counters, written under its own
// lock, and Stats sums them, so no counter is shared by the acquisitions of
// different resources.
type Stats struct {
	TotalLocks  uint64 // holds ever granted
	ActiveLocks int    // holds now, not expired
	// ExpiredLocks counts holds that expired: those ended by their TTL and
	// those past it that nobody has ended yet.
	ExpiredLocks uint64
	// ExpiredHolds are the holds now past their TTL that nobody has ended
	// yet, counted in ExpiredLocks too: ExpiredLocks less ExpiredHolds only
	// grows, as a Prometheus counter must (package metrics).
	ExpiredHolds      int
	ConflictsDetected uint64 // acquisitions that met a conflict (once each)
	// AverageHoldTime is the mean length of the released holds.
	AverageHoldTime time.Duration
	// HoldTime is the total length of the released holds: with Released,
	// the mean over any interval, not only since the table was made.
	HoldTime  time.Duration
	Released  uint64 // holds ended by Release
	Reclaimed uint64 // holds ended because their processes died
	Resources int    // resources in the table
	Capacity  int    // resources the table can hold
}

// Stats sums the statistics of the table; all zero once the segment is
// closed.
//
// A resource recycled meanwhile moves its counters into the header (retire,
// under the insert lock) before its entry is freed: a sum that read the
// header before that and the entry after would miss them, and one that read
// the header after the move and the entry before it would count them twice.
// So the header's counters are read, then the insert lock must be free (no
// move under way), and the sum counts only if, after the entries, the lock
// is free and the header's counters are as they were (no move happened). It
// reads again otherwise, and while the insert lock is held only looks
// again at it, for as long as statsPatience allows (see there).
func (m *Manager) Stats() Stats {
	if m.closed() {
		return Stats{}
	}
	var st Stats
	start := time.Now()
	for try := 1; ; try++ {
		c := m.t.headCounters()
		if m.t.head.Lock.Load() != 0 && m.t.patient(try, start) {
			continue
		}
		st = m.sum(c)
		if m.t.head.Lock.Load() == 0 && m.t.headCounters() == c || !m.t.patient(try, start) {
			break
		}
	}
	if m.closed() {
		return Stats{} // closed while read: part of it was zeros
	}
	return st
}

// statsPatience bounds how long Stats reads again for a consistent sum.
// An insert holds the insert lock for microseconds, but on a busy machine
// its process may lose the CPU in the middle of a recycle for far longer
// than a few yields: a sum taken then counts the recycled resource's
// statistics twice (in the header and still in its entry), and the next
// Stats takes them back, which a Prometheus counter must never do
// (package metrics; a fixed count of yields gave up under load, and
// TestScrapeUnderChurn saw grants go back). So Stats yields snapshotTries
// times, then sleeps statsPause at a time while the lock's holder lives,
// up to statsPatience, and only then sums as it finds: the holder may be
// stopped (SIGSTOP), and a dead one keeps the lock until the next insert
// takes it over.
//
// The holder's liveness (a read of /proc) is asked at the first pause and
// then every statsAliveEvery pauses (10 ms), not at each: a wait of a
// second would otherwise read /proc ten thousand times.
const (
	statsPatience   = time.Second
	statsPause      = 100 * time.Microsecond
	statsAliveEvery = 100
)

// patient reports whether Stats should read again at its try-th try,
// begun at start, after it yielded or slept a while.
func (t *table) patient(try int, start time.Time) bool {
	if try < snapshotTries {
		runtime.Gosched()
		return true
	}
	if w := t.head.Lock.Load(); w != 0 && (try-snapshotTries)%statsAliveEvery == 0 && !t.seg.OwnerAlive(w) ||
		time.Since(start) >= statsPatience {
		return false
	}
	if testHookStep != nil {
		testHookStep("stats:wait")
	}
	time.Sleep(statsPause)
	return true
}

// counters are the statistics words of an entry (in the header: those of
// the recycled resources).
type counters struct {
	grants, releases, holdNanos, conflicts, expired, reclaimed uint64
}

func (t *table) headCounters() counters {
	h := t.head
	return counters{grants: h.Grants.Load(), releases: h.Releases.Load(), holdNanos: h.HoldNanos.Load(),
		conflicts: h.Conflicts.Load(), expired: uint64(h.Expired.Load()), reclaimed: uint64(h.Reclaimed.Load())}
}

// sum is Stats from the header's counters c and the entries as they are.
func (m *Manager) sum(c counters) Stats {
	now := m.clock.now()
	st := Stats{TotalLocks: c.grants, ExpiredLocks: c.expired, ConflictsDetected: c.conflicts,
		Released: c.releases, Reclaimed: c.reclaimed, Capacity: int(m.t.n)}
	holdNanos := c.holdNanos
	if testHookStep != nil {
		testHookStep("stats:head")
	}
	for _, e := range m.t.entries[1:] {
		if kindOf(e.Ctl.Load()) != kindResource {
			continue
		}
		s := m.t.read(e)
		if kindOf(s.ctl) != kindResource {
			continue
		}
		st.Resources++
		st.TotalLocks += s.grants
		st.Released += s.releases
		st.ConflictsDetected += s.conflicts
		st.ExpiredLocks += s.expired
		st.Reclaimed += s.reclaimed
		holdNanos += s.holdNanos
		for _, hs := range s.holders {
			if expiredAt(hs.expires, now) {
				st.ExpiredLocks++
				st.ExpiredHolds++
			} else {
				st.ActiveLocks++
			}
		}
	}
	st.HoldTime = time.Duration(holdNanos)
	if st.Released > 0 {
		st.AverageHoldTime = time.Duration(holdNanos / st.Released)
	}
	return st
}

// CheckVersion reports whether version is still resource's current
// version: nil if so, ErrVersionConflict if any hold began or ended since;
// ErrClosed once the segment is closed.
func (m *Manager) CheckVersion(resource string, version uint64) error {
	var res resKey
	if err := res.setResource(resource); err != nil {
		return err
	}
	if m.closed() {
		return ErrClosed
	}
	i := m.t.search(&res, false)
	var cur uint64
	if i >= 0 {
		cur = m.t.entries[i].Version.Load()
	}
	if m.closed() {
		return ErrClosed // closed while read: the version read may be a zero
	}
	if i < 0 || cur != version {
		return fmt.Errorf("%w: %q is at version %d, not %d", ErrVersionConflict, resource, cur, version)
	}
	return nil
}

// Declare adds resources to the table as declared: they are never
// recycled, and while the table accepts declared resources only
// (SetDeclaredOnly) they are the only ones that can be acquired. Every name
// is checked before any is added.
func (m *Manager) Declare(resources ...string) error {
	keys := make([]resKey, len(resources))
	for i, r := range resources {
		if err := keys[i].setResource(r); err != nil {
			return err
		}
	}
	if err := m.writable(); err != nil {
		return err
	}
	for i := range keys {
		e, err := m.t.findOrInsert(&keys[i], true)
		if err != nil {
			return m.closedErr(fmt.Errorf("%w: declaring %q", err, keys[i].s))
		}
		e.Ctl.Store(e.Ctl.Load() | ctlDeclared)
		m.t.unlockEntry(e)
	}
	return nil
}

// Undeclare makes resource an ordinary resource again; nothing if it is not
// in the table.
func (m *Manager) Undeclare(resource string) error {
	var k resKey
	if err := k.setResource(resource); err != nil {
		return err
	}
	if err := m.writable(); err != nil {
		return err
	}
	if e := m.t.find(&k); e != nil {
		e.Ctl.Store(e.Ctl.Load() &^ ctlDeclared)
		m.t.unlockEntry(e)
		return nil
	}
	if m.closed() {
		return ErrClosed // see table.closed
	}
	return nil
}

// SetDeclaredOnly switches the whole table (every process) into or out of
// declared-resources mode, in which acquiring a name that was not declared
// fails with ErrResourceNotFound.
func (m *Manager) SetDeclaredOnly(on bool) error {
	if err := m.writable(); err != nil {
		return err
	}
	if on {
		m.t.head.Ctl.Or(ctlDeclaredOnly)
	} else {
		m.t.head.Ctl.And(^ctlDeclaredOnly)
	}
	return nil
}

// DeclaredOnly reports whether the table is in declared-resources mode;
// false once the segment is closed.
func (m *Manager) DeclaredOnly() bool {
	return !m.closed() && m.t.head.Ctl.Load()&ctlDeclaredOnly != 0
}
