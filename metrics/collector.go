package metrics

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// namespace prefixes every series (Prometheus's convention: the exporter's
// name first).
const namespace = "shmlock"

// Collector is a prometheus.Collector of one segment's locks and tables.
// It reads the segment at every Collect (see the package comment for the
// series) and is safe for concurrent scrapes: the reads only load words.
type Collector struct {
	read  func(now time.Time) (*View, error) // the segment's View at a scrape
	label string
	now   func() time.Time

	held, holders, dead, waiters, inconsistent, holdAge *prometheus.Desc
	grants, releases, conflicts, expired, reclaimed     *prometheus.Desc
	holdSeconds, activeHolds, expiredHolds              *prometheus.Desc
	capacity, used                                      *prometheus.Desc
	contended, sleeps, wakeups, reclaims, timeouts      *prometheus.Desc
	wait                                                *prometheus.Desc
	dataSize, dataUsed, regions, segSize                *prometheus.Desc
	up                                                  *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// An Option changes a Collector's defaults.
type Option func(*Collector)

// SegmentLabel sets the value of the segment label (default: the
// segment's path), for a service that knows its segments by other names.
func SegmentLabel(name string) Option { return func(c *Collector) { c.label = name } }

// Clock sets the clock hold ages are measured with (default time.Now,
// also for a nil now), for tests.
func Clock(now func() time.Time) Option { return func(c *Collector) { c.now = now } }

// NewCollector returns a collector of seg, which should be open read-only
// and stay open while the collector is registered: a scrape after
// seg.Close reports shm.ErrClosed as the scrape's error.
func NewCollector(seg *shm.Segment, opts ...Option) *Collector {
	label := ""
	if seg != nil { // nil: every scrape fails with shm.ErrNoSegment (Read)
		label = seg.Path()
	}
	return newCollector(func(now time.Time) (*View, error) { return Read(seg, now) }, label, opts)
}

// NewFollowingCollector returns a collector of the segment f's path names
// at each scrape (Follower.Use): while it names none, the scrape reports
// shmlock_segment_up 0 and the error. A scrape that races the segment's
// replacement reads the old segment or the new one, whole. f stays the
// caller's to close.
func NewFollowingCollector(f *Follower, opts ...Option) *Collector {
	if f == nil { // every scrape fails with shm.ErrNoSegment
		return NewCollector(nil, opts...)
	}
	return newCollector(func(now time.Time) (v *View, err error) {
		err = f.Use(func(seg *shm.Segment) error {
			v, err = Read(seg, now)
			return err
		})
		return v, err
	}, f.Path(), opts)
}

func newCollector(read func(time.Time) (*View, error), label string, opts []Option) *Collector {
	c := &Collector{read: read, label: label}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.now == nil { // also Clock(nil): Collect, on the registry's goroutine, must not panic
		c.now = time.Now
	}
	c.label = validName(c.label) // a path, or a caller's string: any bytes
	// The segment is a constant label: collectors of two segments then
	// describe different series and may share a registry.
	seg1 := prometheus.Labels{"segment": c.label}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, seg1)
	}
	lock := []string{"kind", "lock"}
	c.held = desc("lock_held", "Whether the lock is held (1) or free (0).", lock...)
	c.holders = desc("lock_holders", "Holders of the lock: a spinlock's holder, an upgrade mutex's readers and unique or upgrade holder, a resource's holds.", lock...)
	c.dead = desc("lock_dead_holders", "Holders of the lock whose process is gone (shmctl reclaim frees them).", lock...)
	c.waiters = desc("lock_waiters", "Waiters asleep on the lock (not recorded for lockmgr resources).", lock...)
	c.inconsistent = desc("lock_inconsistent", "Whether a holder died holding the lock and nobody has marked its data consistent since (1) or not (0).", lock...)
	c.holdAge = desc("lock_hold_age_seconds", "Age of the lock's oldest hold (recorded for lockmgr resources only).", lock...)
	c.contended = desc("lock_contended_total", "Acquisitions of the lock that did not get it at the first try.", lock...)
	c.sleeps = desc("lock_sleeps_total", "Futex sleeps of the lock's waiters.", lock...)
	c.wakeups = desc("lock_wakeups_total", "Wakes by a release of the lock that woke a sleeper.", lock...)
	c.reclaims = desc("lock_reclaims_total", "Holds of the lock taken from, or ended for, dead processes.", lock...)
	c.timeouts = desc("lock_timeouts_total", "Waits for the lock that gave up (timeout, cancellation, close).", lock...)
	c.wait = desc("lock_wait_seconds", "Waits for the lock that did not get it at the first try, to the grant or the give-up; a wait granted while spinning counts in the first bucket with no time in the sum.", lock...)
	c.grants = desc("lockmgr_grants_total", "Lock-manager holds granted.")
	c.releases = desc("lockmgr_releases_total", "Lock-manager holds ended by their owner's release.")
	c.conflicts = desc("lockmgr_conflicts_total", "Lock-manager acquisitions that met a conflict (once each).")
	c.expired = desc("lockmgr_expired_total", "Lock-manager holds ended because their TTL passed.")
	c.reclaimed = desc("lockmgr_reclaimed_total", "Lock-manager holds ended because their processes died.")
	c.holdSeconds = desc("lockmgr_hold_seconds_total", "Total length of the released lock-manager holds.")
	c.activeHolds = desc("lockmgr_active_holds", "Lock-manager holds now, not expired.")
	c.expiredHolds = desc("lockmgr_expired_holds", "Lock-manager holds past their TTL that nobody has ended yet.")
	c.capacity = desc("table_capacity", "Entries the table has: owner slots, upgrade mutexes, resources, transaction records.", "kind")
	c.used = desc("table_used", "Entries of the table in use: claimed slots and mutexes, resources, live transactions.", "kind")
	c.dataSize = desc("data_size_bytes", "Size of the segment's data area.")
	c.dataUsed = desc("data_used_bytes", "Bytes of the data area its regions take.")
	c.regions = desc("data_regions", "Data regions claimed.")
	c.segSize = desc("segment_size_bytes", "Size of the segment file.")
	c.up = desc("segment_up", "Whether the segment could be read at this scrape (1) or not (0: removed, damaged, closed; its other series are absent).")
	return c
}

// Describe sends the descriptors of every series the collector may send.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.held, c.holders, c.dead, c.waiters, c.inconsistent, c.holdAge,
		c.grants, c.releases, c.conflicts, c.expired, c.reclaimed, c.holdSeconds, c.activeHolds, c.expiredHolds,
		c.contended, c.sleeps, c.wakeups, c.reclaims, c.timeouts, c.wait,
		c.capacity, c.used, c.dataSize, c.dataUsed, c.regions, c.segSize, c.up} {
		ch <- d
	}
}

// Collect reads the segment and sends its series and shmlock_segment_up
// 1; if the segment cannot be read, shmlock_segment_up 0 and one invalid
// metric carrying the error, which fails the scrape (or, with
// promhttp.ContinueOnError, is logged and left out). The 0 is what an
// alert can fire on: without it a segment that went unreadable only lost
// its series, which an alert on their values does not notice.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	// Not the Must constructors: Collect runs on the registry's goroutine,
	// where a panic kills the process. A metric that cannot be made fails
	// the scrape instead (the labels are valid UTF-8, validName).
	send := func(m prometheus.Metric, err error) {
		if err != nil {
			m = prometheus.NewInvalidMetric(c.segSize, err)
		}
		ch <- m
	}
	gauge := func(d *prometheus.Desc, x float64, labels ...string) {
		send(prometheus.NewConstMetric(d, prometheus.GaugeValue, x, labels...))
	}
	counter := func(d *prometheus.Desc, x float64, labels ...string) {
		send(prometheus.NewConstMetric(d, prometheus.CounterValue, x, labels...))
	}
	v, err := c.read(c.now())
	if err != nil {
		gauge(c.up, 0)
		send(nil, segmentError(c.label, err))
		return
	}
	for _, l := range v.Locks {
		k := string(l.Kind)
		gauge(c.held, bit(l.Held), k, l.Label)
		gauge(c.holders, float64(l.Holders), k, l.Label)
		gauge(c.dead, float64(l.DeadHolders), k, l.Label)
		gauge(c.inconsistent, bit(l.Inconsistent), k, l.Label)
		if l.Waiters >= 0 {
			gauge(c.waiters, float64(l.Waiters), k, l.Label)
		}
		if l.HoldAge >= 0 {
			gauge(c.holdAge, l.HoldAge.Seconds(), k, l.Label)
		}
		if ct := l.Contention; ct != nil {
			counter(c.contended, float64(ct.Contended), k, l.Label)
			counter(c.sleeps, float64(ct.Sleeps), k, l.Label)
			counter(c.wakeups, float64(ct.Wakeups), k, l.Label)
			counter(c.reclaims, float64(ct.Reclaims), k, l.Label)
			counter(c.timeouts, float64(ct.Timeouts), k, l.Label)
			count, buckets := cumulative(ct.WaitHist)
			send(prometheus.NewConstHistogram(c.wait, count, ct.Wait.Seconds(), buckets, k, l.Label))
		}
	}
	if st := v.LockMgr; st != nil {
		counter(c.grants, float64(st.TotalLocks))
		counter(c.releases, float64(st.Released))
		counter(c.conflicts, float64(st.ConflictsDetected))
		// ExpiredLocks counts the expired holds nobody has ended too,
		// which may yet end otherwise: left out, it only grows.
		counter(c.expired, float64(st.ExpiredLocks-uint64(st.ExpiredHolds)))
		counter(c.reclaimed, float64(st.Reclaimed))
		counter(c.holdSeconds, st.HoldTime.Seconds())
		gauge(c.activeHolds, float64(st.ActiveLocks))
		gauge(c.expiredHolds, float64(st.ExpiredHolds))
	}
	for _, t := range v.Tables {
		gauge(c.capacity, float64(t.Capacity), string(t.Kind))
		gauge(c.used, float64(t.Used), string(t.Kind))
	}
	gauge(c.dataSize, float64(v.DataBytes))
	gauge(c.dataUsed, float64(v.DataUsedBytes))
	gauge(c.regions, float64(v.Regions))
	gauge(c.segSize, float64(v.SizeBytes))
	gauge(c.up, 1)
}

// cumulative turns the segment's wait histogram (a count per bucket) into
// Prometheus's: the count of waits up to each bound, and the total. The
// total is the buckets' sum, not Contended, which a wait being recorded
// may already have bumped: the histogram stays consistent with itself.
func cumulative(hist [layout.StatsBucketCount]uint64) (uint64, map[float64]uint64) {
	buckets := make(map[float64]uint64, len(layout.StatsBuckets))
	var n uint64
	for i, count := range hist {
		n += count
		if i < len(layout.StatsBuckets) {
			buckets[layout.StatsBuckets[i].Seconds()] = n
		}
	}
	return n, buckets
}

// bit is a boolean as a gauge's value.
func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// segmentError is the error of reading the segment labelled label, naming
// it: a registry's scrape reports the errors of all its segments, and many
// of shm's (a closed segment, a damaged table) do not say which.
func segmentError(label string, err error) error {
	if strings.Contains(err.Error(), label) {
		return err
	}
	return fmt.Errorf("segment %s: %w", label, err)
}
