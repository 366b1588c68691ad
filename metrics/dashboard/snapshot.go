package dashboard

import (
	"time"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/metrics"
	"github.com/shmlock/shmlock/shm"
)

// Snapshot is what /view.json answers and each event of /events carries,
// as JSON: the segments' locks at one moment.
type Snapshot struct {
	Time     time.Time `json:"time"`
	Segments []Segment `json:"segments"`
}

// Segment is one segment of a Snapshot.
type Segment struct {
	Path string `json:"path"`
	// Error says why the segment could not be read (then Locks and Tables
	// are empty); "" if it was.
	Error string `json:"error,omitempty"`
	// Contention: the segment has contention counters (a lock_stats
	// table), so each Lock has them.
	Contention bool    `json:"contention"`
	Tables     []Table `json:"tables"`
	Locks      []Lock  `json:"locks"`
}

// Table is how full one table is (metrics.Table).
type Table struct {
	Kind     string `json:"kind"`
	Capacity int    `json:"capacity"`
	Used     int    `json:"used"`
}

// Lock is one lock in use (metrics.Lock) with its holders' processes.
type Lock struct {
	Kind  string `json:"kind"`  // spinlock, upgrade or lockmgr
	Label string `json:"label"` // its name, resource or entry index
	Index int    `json:"index"` // its entry index; -1 for a resource
	Held  bool   `json:"held"`
	// HolderCount is metrics.Lock.Holders; Holders lists those whose
	// process is recorded (a token-mode spinlock's holder is not), read
	// with them (metrics.Lock.Processes).
	HolderCount  int      `json:"holderCount"`
	Holders      []Holder `json:"holders"`
	DeadHolders  int      `json:"deadHolders"`
	Waiters      int      `json:"waiters"` // -1 where not recorded (resources)
	Inconsistent bool     `json:"inconsistent"`
	// HoldAge is the age of the oldest hold in seconds; -1 where not
	// recorded (spinlocks, upgrade mutexes).
	HoldAge    float64     `json:"holdAgeSeconds"`
	Contention *Contention `json:"contention,omitempty"` // nil without contention counters
}

// Holder is one holding process.
type Holder struct {
	PID   int    `json:"pid"`
	Alive bool   `json:"alive"`
	Mode  string `json:"mode,omitempty"`  // upgrade: shared, upgrade or unique; lockmgr: its mode
	Owner string `json:"owner,omitempty"` // a resource's owner name
}

// Contention is a lock's contention counters (metrics.Contention), over
// every process since the segment was made.
type Contention struct {
	Contended   uint64  `json:"contended"`
	Sleeps      uint64  `json:"sleeps"`
	Wakeups     uint64  `json:"wakeups"`
	Reclaims    uint64  `json:"reclaims"`
	Timeouts    uint64  `json:"timeouts"`
	WaitSeconds float64 `json:"waitSeconds"`
}

// Read reads a Snapshot of segs at now. A segment that cannot be read has
// its Error set; the others are read all the same.
func Read(segs []*shm.Segment, now time.Time) Snapshot {
	return readSources(fixed(segs), now)
}

// source is a segment of a Handler: its path, and how to read the segment
// (use calls read with it, or fails with why there is none).
type source struct {
	path string
	use  func(read func(*shm.Segment) error) error
}

// fixed are the sources of segs, each its own segment for ever.
func fixed(segs []*shm.Segment) []source {
	srcs := make([]source, len(segs))
	for i, seg := range segs {
		if seg == nil {
			srcs[i] = noSegment
			continue
		}
		srcs[i] = source{path: seg.Path(), use: func(read func(*shm.Segment) error) error { return read(seg) }}
	}
	return srcs
}

// noSegment is the source of a nil segment or follower: shown with
// shm.ErrNoSegment, as metrics.NewCollector(nil) reports it.
var noSegment = source{use: func(func(*shm.Segment) error) error { return shm.ErrNoSegment }}

func readSources(srcs []source, now time.Time) Snapshot {
	s := Snapshot{Time: now, Segments: make([]Segment, 0, len(srcs))}
	for _, src := range srcs {
		s.Segments = append(s.Segments, readSegment(src, now))
	}
	return s
}

func readSegment(src source, now time.Time) Segment {
	out := Segment{Path: src.path, Tables: []Table{}, Locks: []Lock{}}
	var v *metrics.View
	err := src.use(func(seg *shm.Segment) (err error) {
		out.Contention = seg.Len(layout.KindLockStats) > 0
		v, err = metrics.Read(seg, now)
		return err
	})
	if err != nil {
		out.Contention = false
		out.Error = err.Error()
		return out
	}
	for _, t := range v.Tables {
		out.Tables = append(out.Tables, Table{Kind: string(t.Kind), Capacity: t.Capacity, Used: t.Used})
	}
	for _, l := range v.Locks {
		lk := Lock{Kind: string(l.Kind), Label: l.Label, Index: l.Index, Held: l.Held, HolderCount: l.Holders,
			Holders: []Holder{}, DeadHolders: l.DeadHolders, Waiters: l.Waiters, Inconsistent: l.Inconsistent, HoldAge: -1}
		if l.HoldAge >= 0 {
			lk.HoldAge = l.HoldAge.Seconds()
		}
		if c := l.Contention; c != nil {
			lk.Contention = &Contention{Contended: c.Contended, Sleeps: c.Sleeps, Wakeups: c.Wakeups,
				Reclaims: c.Reclaims, Timeouts: c.Timeouts, WaitSeconds: c.Wait.Seconds()}
		}
		for _, p := range l.Processes {
			lk.Holders = append(lk.Holders, Holder{PID: p.PID, Alive: p.Alive, Mode: p.Mode, Owner: p.Owner})
		}
		out.Locks = append(out.Locks, lk)
	}
	return out
}
