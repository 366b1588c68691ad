// Package dashboard serves a live web page of the locks of one or more
// shmlock segments: for every lock in use (as metrics.Read lists them) its
// holders and their pids, its waiters, the age of its oldest hold, its
// contention rate with a sparkline of the last minute, and whether a dead
// holder, a reclaim or an inconsistent mark needs a look.
//
// The Handler serves three paths:
//
//	/           the page: one HTML file with its CSS and JavaScript inline,
//	            embedded in the binary; it loads nothing from elsewhere
//	/events     server-sent events: a Snapshot as JSON every interval, read
//	            afresh for each connection until the client goes away
//	/view.json  one Snapshot, for clients that poll
//
// The page computes the contention rate itself, as the difference of the
// contended counters of two snapshots over the time between them, and
// keeps the last rates of each lock for its sparkline. The segments are
// only read (they may be opened read-only) and nothing is kept between
// requests. 'shmctl serve' mounts the Handler at / beside /metrics:
//
//	seg, err := shm.Open("jobs", shm.Options{ReadOnly: true})
//	...
//	mux := http.NewServeMux()
//	mux.Handle("/", dashboard.New([]*shm.Segment{seg}, dashboard.Options{}))
//	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
package dashboard
