// Package metrics exports the state of a shmlock segment to Prometheus:
// which locks are held and by how many holders, who waits for them, which
// are marked inconsistent, the lock manager's statistics and how full each
// table is.
//
// A Collector reads the segment when it is scraped, and only then: it
// starts no goroutine and keeps nothing between scrapes, so a scrape shows
// the segment as it is. It only loads words, so the segment may (and
// should) be opened read-only. A service registers one per segment in its
// own registry; the series carry the segment in a constant label, so
// collectors of several segments share a registry:
//
//	seg, err := shm.Open("jobs", shm.Options{ReadOnly: true})
//	...
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewCollector(seg))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// A Segment shows the file it opened for ever: removed and made again
// under its path (an application's restart), it freezes, and a collector
// of it would serve frozen numbers. A monitor that runs for long follows
// the path instead, as 'shmctl serve' does: Follow, NewFollowingCollector
// (and dashboard.NewFollowing) open the file the path names whenever it is
// another than the one open (a stat at each scrape). A scrape under way
// when another finds the file replaced reads the one it began with, which
// stays open until it is done: shmlock_segment_up is 0 only while the path
// names no segment that can be read.
//
// Read returns the same state as a View, for tools that show it otherwise
// ('shmctl top').
//
// # Series
//
// Every series has the label segment (the segment's path unless
// SegmentLabel says otherwise). Per lock in use (claimed, or with any word
// set; so their number is bounded by the table sizes), labelled kind
// (spinlock, upgrade, lockmgr) and lock (the claimed name or resource, or
// the entry index of an unnamed spinlock or upgrade mutex):
//
//	shmlock_lock_held                  1 while held, else 0
//	shmlock_lock_holders               holders: 0 or 1 for a spinlock; an upgrade
//	                                   mutex's readers with holds plus its unique or
//	                                   upgrade holder; a resource's holds
//	shmlock_lock_dead_holders          of those, holders whose process is gone
//	                                   (what 'shmctl reclaim' frees)
//	shmlock_lock_waiters               waiters asleep on it (spinlock, upgrade)
//	shmlock_lock_inconsistent          1 while marked inconsistent
//	shmlock_lock_hold_age_seconds      age of the oldest hold (lockmgr)
//
// and, on a segment of format version 4 or later, the contention counters
// every process bumps on its slow paths (layout.LockStats):
//
//	shmlock_lock_contended_total       acquisitions not granted at the first try
//	shmlock_lock_sleeps_total          futex sleeps of its waiters
//	shmlock_lock_wakeups_total         releases that woke a sleeper
//	shmlock_lock_reclaims_total        holds taken from dead processes
//	shmlock_lock_timeouts_total        waits that gave up
//	shmlock_lock_wait_seconds          histogram of those waits (buckets
//	                                   layout.StatsBuckets: 10µs to 100ms)
//
// They are the lock's entry's, and start again at 0 when a name is claimed
// afresh or a resource takes an entry (FORMAT.md): Prometheus reads a reset
// then, as for a restarted process.
//
// The lock manager's waiters are not recorded in the segment (a waiter
// retries with a backoff, asleep in its own process) and neither are the
// times at which a spinlock or an upgrade mutex was taken (the fast path
// is one compare-and-swap, with no clock read): those series exist only
// for the kinds named.
//
// Per segment, the lock manager's statistics, over every process since
// the table was made (absent without a lock-manager table):
//
//	shmlock_lockmgr_grants_total, shmlock_lockmgr_releases_total,
//	shmlock_lockmgr_conflicts_total, shmlock_lockmgr_expired_total,
//	shmlock_lockmgr_reclaimed_total, shmlock_lockmgr_hold_seconds_total
//	shmlock_lockmgr_active_holds, shmlock_lockmgr_expired_holds
//
// and the tables, labelled kind (spinlock, upgrade, lockmgr, txn):
//
//	shmlock_table_capacity             entries the table has
//	shmlock_table_used                 entries in use (claimed; resources; live
//	                                   transactions)
//	shmlock_data_size_bytes, shmlock_data_used_bytes, shmlock_data_regions
//	shmlock_segment_size_bytes
//
// and whether the segment could be read at all:
//
//	shmlock_segment_up                 1 if this scrape read the segment; 0 if
//	                                   not (closed, damaged, cut short, or,
//	                                   for a following collector, its path
//	                                   names no segment), and then it is the
//	                                   segment's only series
//
// A scrape that could not read a segment also reports the error (the
// scrape fails, or with promhttp.ContinueOnError the error is logged and
// the other segments' series served): alert on shmlock_segment_up == 0, as
// the segment's other series are absent then, not 0.
package metrics
