package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/txn"
	"github.com/shmlock/shmlock/upgrade"
)

// Kind is the kind of a lock or table, as the label kind carries it.
type Kind string

// The kinds of locks and tables.
const (
	KindSpinlock Kind = "spinlock" // owner slots (package spinlock)
	KindUpgrade  Kind = "upgrade"  // upgrade mutexes (package upgrade)
	KindLockMgr  Kind = "lockmgr"  // named resources (package lockmgr)
	KindTxn      Kind = "txn"      // transaction records (package txn); a table only
)

// Lock is one lock in use.
type Lock struct {
	Kind Kind
	// Label is the lock's name (a spinlock's or upgrade mutex's claimed
	// name, a resource), or the entry index of an unnamed one.
	Label string
	Index int // the entry index; -1 for a resource
	Held  bool
	// Holders: 0 or 1 for a spinlock; an upgrade mutex's reader records
	// with holds plus its unique or upgrade holder; a resource's holds
	// (expired ones that nobody has ended included).
	Holders     int
	DeadHolders int // of Holders, those whose process (and companion) is gone
	// Processes are the holders whose process the segment records (all
	// of Holders but a token-mode spinlock's holder), read with them.
	Processes []Process
	// Waiters are the sleepers on the lock; -1 where the segment does not
	// record them (lock-manager resources).
	Waiters      int
	Inconsistent bool
	// HoldAge is the age of the oldest hold; -1 where the segment does not
	// record when a lock was taken (spinlocks, upgrade mutexes).
	HoldAge time.Duration
	// Contention is what waiting for the lock cost, over every process;
	// nil if the segment has no contention counters (before format
	// version 4).
	Contention *Contention
}

// Process is one holder of a lock whose process is recorded.
type Process struct {
	PID   int
	Alive bool   // the process (or a resource holder's companion) lives
	Mode  string // upgrade: shared, upgrade or unique; lockmgr: its mode; "" for a spinlock
	Owner string // a resource holder's owner name; "" otherwise
}

// addHolder counts the holder of packed identity w (0: one whose process
// is not recorded) in mode.
func (l *Lock) addHolder(seg *shm.Segment, w uint64, mode string) {
	l.Holders++
	if w == 0 {
		return
	}
	id, _ := proc.Unpack(w)
	alive := seg.OwnerAlive(w)
	if !alive {
		l.DeadHolders++
	}
	l.Processes = append(l.Processes, Process{PID: int(id.PID), Alive: alive, Mode: mode})
}

// Contention is a copy of a lock's contention counters (layout.LockStats).
// They are bumped without a lock, so one copy may fall between the words
// of one wait's record; and they wrap around (Reclaims, Timeouts and each
// bucket of WaitHist at 2^32, the others at 2^64), which Prometheus takes
// for a counter reset. WaitHist's first bucket counts every wait granted
// while it spun, so a busy lock wraps it first: the histogram's count may
// then fall below Contended by a multiple of 2^32.
type Contention struct {
	Contended uint64        // acquisitions that did not get the lock at the first try
	Sleeps    uint64        // futex sleeps of waiters
	Wakeups   uint64        // futex wakes that woke a sleeper
	Wait      time.Duration // total time of the waits that yielded or slept (layout.LockStats: a wait granted while spinning is not timed)
	Reclaims  uint64        // holds taken from, or ended for, dead processes
	Timeouts  uint64        // waits that gave up
	// WaitHist counts the waits by length: bucket i holds those up to
	// layout.StatsBuckets[i] (and above the bucket before), the last one
	// the longer ones.
	WaitHist [layout.StatsBucketCount]uint64
}

// contention copies the counters of entry i of table k; nil if none.
func contention(seg *shm.Segment, k layout.Kind, i int) *Contention {
	st := seg.LockStats(k, i)
	if st == nil {
		return nil
	}
	c := &Contention{Contended: st.Contended.Load(), Sleeps: st.Sleeps.Load(), Wakeups: st.Wakeups.Load(),
		Wait: time.Duration(st.WaitNanos.Load()), Reclaims: uint64(st.Reclaims.Load()), Timeouts: uint64(st.Timeouts.Load())}
	for b := range c.WaitHist {
		c.WaitHist[b] = uint64(st.WaitHist[b].Load())
	}
	return c
}

// Table is how full one table is.
type Table struct {
	Kind     Kind
	Capacity int
	Used     int
}

// View is the state of a segment's locks at one moment (as near one as
// reading word by word without a lock allows).
type View struct {
	Path      string
	SizeBytes uint64
	Locks     []Lock  // spinlocks, then upgrade mutexes, by index; then resources in table order
	Tables    []Table // the tables the segment has, of the kinds above
	// LockMgr is the lock manager's statistics; nil without its table.
	LockMgr *lockmgr.Stats
	// The data area: its size, the bytes its regions take, the regions.
	DataBytes, DataUsedBytes, Regions int
}

// Read reads the locks and tables of seg, which may be read-only; now is
// the time hold ages are measured to. shm.ErrClosed once seg is closed.
func Read(seg *shm.Segment, now time.Time) (*View, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	if seg.Closed() {
		return nil, shm.ErrClosed
	}
	// A monitor reads on goroutines of its own (a scrape, a dashboard's
	// request), where the SIGBUS of a file cut short under the mapping
	// would kill the process: shm.CatchFault makes it shm.ErrFault.
	v := &View{Path: seg.Path(), SizeBytes: seg.Header().TotalSize}
	err := shm.CatchFault(func() error {
		for _, read := range []func(*shm.Segment, *View, time.Time) error{readSlots, readUpgrades, readLockMgr, readTxns, readData} {
			if err := read(seg, v, now); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, shm.ErrFault) {
		return nil, fmt.Errorf("reading %s: %w", seg.Path(), err)
	}
	if err != nil {
		return nil, err
	}
	if seg.Closed() {
		return nil, shm.ErrClosed // closed while read: part of it was zeros
	}
	uniqueLabels(v.Locks)
	return v, nil
}

// uniqueLabels makes each lock's label unique within its kind. The tables
// give each name to one entry, but a damaged one may give two entries the
// same name (FuzzRead found it), and a Prometheus scrape with two series
// of the same labels fails whole: the monitor would go blind on the
// damaged segment it is there to show. A repeated label gets "#" and the
// entry's index (and more "#" while that is taken too).
func uniqueLabels(locks []Lock) {
	type key struct {
		kind  Kind
		label string
	}
	seen := make(map[key]bool, len(locks))
	for i := range locks {
		l := &locks[i]
		k := key{l.Kind, l.Label}
		if seen[k] {
			k.label += "#" + strconv.Itoa(l.Index)
			for seen[k] {
				k.label += "#"
			}
			l.Label = k.label
		}
		seen[k] = true
	}
}

// labels names the entries of a claimable table: a claimed name, else the
// index. An unnamed entry whose index is also another entry's name is
// "#index", so that no two locks of a kind share a label.
//
// The names are a set beside the claims, so that labelling every entry
// costs a lookup each: a search of the claims for each unnamed entry made
// a scrape quadratic in the table (a million slots, a scrape of hours).
type labels struct {
	byIndex map[int]shm.Claim
	names   map[string]struct{}
}

func claims(seg *shm.Segment, k layout.Kind) (labels, error) {
	cs, err := seg.Claims(k)
	if err != nil {
		return labels{}, fmt.Errorf("reading the %v directory: %w", k, err)
	}
	l := labels{byIndex: make(map[int]shm.Claim, len(cs)), names: make(map[string]struct{}, len(cs))}
	for _, c := range cs {
		l.byIndex[c.Index] = c
		l.names[c.Name] = struct{}{}
	}
	return l, nil
}

func (l labels) label(i int) string {
	if c, ok := l.byIndex[i]; ok && c.Name != "" {
		return validName(c.Name)
	}
	s := strconv.Itoa(i)
	if _, taken := l.names[s]; taken {
		return "#" + s
	}
	return s
}

func readSlots(seg *shm.Segment, v *View, _ time.Time) error {
	n := seg.Len(layout.KindOwnerSlots)
	if n == 0 {
		return nil
	}
	byIndex, err := claims(seg, layout.KindOwnerSlots)
	if err != nil {
		return err
	}
	v.Tables = append(v.Tables, Table{Kind: KindSpinlock, Capacity: n, Used: len(byIndex.byIndex)})
	for i := range n {
		s, err := seg.Slot(i)
		if err != nil {
			return err
		}
		pid, token, rc := s.PID.Load(), s.Token.Load(), s.RecursionCount.Load()
		c, claimed := byIndex.byIndex[i]
		// The token word is a token-mode holder's token but a pid/tid
		// slot's generation, which stays after the release: the mode
		// recorded at the claim says which; without one, a slot with a pid
		// is pid/tid and one with only a token is guessed held in token
		// mode, as 'shmctl slots' guesses.
		mode, said := spinlock.ModeOfClaimUse(c.Use)
		held := pid != 0 || (token != 0 && (!said || mode == spinlock.Token))
		l := Lock{Kind: KindSpinlock, Label: byIndex.label(i), Index: i, Held: held,
			Waiters: int(s.Sleepers()), Inconsistent: rc&layout.SlotInconsistent != 0, HoldAge: -1,
			Contention: contention(seg, layout.KindOwnerSlots, i)}
		if held {
			l.addHolder(seg, pid, "") // pid 0: a token holder has no process to judge
		}
		if claimed || held || l.Waiters != 0 || l.Inconsistent {
			v.Locks = append(v.Locks, l)
		}
	}
	return nil
}

func readUpgrades(seg *shm.Segment, v *View, _ time.Time) error {
	n := seg.Len(layout.KindUpgrades)
	if n == 0 {
		return nil
	}
	byIndex, err := claims(seg, layout.KindUpgrades)
	if err != nil {
		return err
	}
	v.Tables = append(v.Tables, Table{Kind: KindUpgrade, Capacity: n, Used: len(byIndex.byIndex)})
	for i := range n {
		st, err := upgrade.Inspect(seg, i)
		if err != nil {
			return err
		}
		l := Lock{Kind: KindUpgrade, Label: byIndex.label(i), Index: i, Inconsistent: st.Inconsistent,
			Waiters: int(st.SharedWaiters + st.UniqueWaiters + st.WriterWaiters), HoldAge: -1,
			Contention: contention(seg, layout.KindUpgrades, i)}
		for _, r := range st.Readers {
			if r.Count > 0 {
				l.addHolder(seg, r.Owner, "shared")
			}
		}
		// The unique lock's holder is the upgrade holder after
		// UpgradeToUnique, else the writer; the Writer word alone may be a
		// writer still draining readers, which holds nothing yet.
		switch {
		case st.UpgradeLocked && st.Upgrader != 0:
			mode := "upgrade"
			if st.Unique() {
				mode = "unique"
			}
			l.addHolder(seg, st.Upgrader, mode)
		case st.UpgradeLocked:
		case st.WriteLocked && l.Holders == 0 && st.Writer != 0:
			l.addHolder(seg, st.Writer, "unique")
		}
		l.Held = l.Holders > 0
		_, claimed := byIndex.byIndex[i]
		if claimed || st.State != 0 || l.Held || l.Waiters != 0 || l.Inconsistent || st.Writer != 0 {
			v.Locks = append(v.Locks, l)
		}
	}
	return nil
}

func readLockMgr(seg *shm.Segment, v *View, now time.Time) error {
	if seg.Len(layout.KindLockMgr) == 0 {
		return nil
	}
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	if err != nil {
		return err
	}
	ov, err := m.Overview()
	if err != nil {
		return err
	}
	v.LockMgr = &ov.Stats
	v.Tables = append(v.Tables, Table{Kind: KindLockMgr, Capacity: m.Capacity(), Used: ov.Stats.Resources})
	for _, r := range ov.Resources {
		l := Lock{Kind: KindLockMgr, Label: validName(r.Resource), Index: -1, Held: len(r.Holders) > 0,
			Holders: len(r.Holders), Waiters: -1, Inconsistent: r.Inconsistent, HoldAge: -1}
		if r.Entry > 0 {
			l.Contention = contention(seg, layout.KindLockMgr, r.Entry)
		}
		for _, h := range r.Holders {
			if !h.Alive {
				l.DeadHolders++
			}
			l.Processes = append(l.Processes, Process{PID: h.PID, Alive: h.Alive, Mode: r.Mode.String(), Owner: h.Owner})
			// A hold newer than now (taken while the tables before this
			// one were read, or stamped by the lock manager's clock, which
			// may run a little ahead of time.Now) is 0 old: a negative age
			// would read as none recorded, and the held resource would
			// lose its age series.
			l.HoldAge = max(l.HoldAge, now.Sub(h.AcquiredAt), 0)
		}
		// Resources nobody holds stay in the table until recycled: only
		// those worth a look are listed, as 'shmctl locks' lists them.
		if l.Held || r.Declared || l.Inconsistent {
			v.Locks = append(v.Locks, l)
		}
	}
	return nil
}

func readTxns(seg *shm.Segment, v *View, _ time.Time) error {
	if seg.Len(layout.KindTxnRecords) == 0 || seg.Len(layout.KindTxnArena) == 0 {
		return nil
	}
	snap, err := txn.Inspect(seg, false)
	if errors.Is(err, txn.ErrNoSpace) { // an arena too small for transactions: none can run
		return nil
	}
	if err != nil {
		return err
	}
	v.Tables = append(v.Tables, Table{Kind: KindTxn, Capacity: snap.Records, Used: len(snap.Txns)})
	return nil
}

func readData(seg *shm.Segment, v *View, _ time.Time) error {
	size, used, err := seg.DataArea()
	if err != nil {
		return err
	}
	regions, err := seg.Regions()
	if err != nil {
		return err
	}
	v.DataBytes, v.DataUsedBytes, v.Regions = size, used, len(regions)
	return nil
}

// validName is a name read from the segment as text: the packages write
// only valid UTF-8 names, but the file is shared memory, and a damaged byte
// must not reach a consumer that requires UTF-8 (a Prometheus label value
// that is not valid UTF-8 makes the collector's metric fail, and
// client_golang's Must constructors panic on the scraping goroutine). Each
// invalid byte sequence becomes U+FFFD.
func validName(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
