package dashboard

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/shmlock/shmlock/metrics"
	"github.com/shmlock/shmlock/shm"
)

// DefaultInterval is how often /events sends a snapshot unless
// Options.Interval says otherwise.
const DefaultInterval = time.Second

// MinInterval is the shortest Options.Interval: a shorter one is raised
// to it, so that a page left open cannot keep a CPU busy.
const MinInterval = 50 * time.Millisecond

// EventWriteTimeout bounds each write of /events: a client that takes no
// snapshot for that long (it stopped reading, its window full) is dropped,
// rather than holding the stream's goroutine and connection for ever. Each
// event sets its own deadline, which replaces the server's WriteTimeout
// (meant for answers that end) for the stream.
const EventWriteTimeout = 30 * time.Second

//go:embed index.html
var page []byte

// Options configure a Handler.
type Options struct {
	// Interval is the time between two snapshots of /events;
	// DefaultInterval if zero.
	Interval time.Duration
	// Now is the clock the snapshots are taken with; time.Now if nil.
	Now func() time.Time
}

// Handler serves the dashboard of a fixed set of segments (see the
// package comment). It keeps no state between requests and is safe for
// concurrent use.
type Handler struct {
	segs     []source
	interval time.Duration
	now      func() time.Time
	mux      *http.ServeMux
}

// New returns the Handler of segs, which stay the caller's to close: a
// closed segment shows as an error in the snapshots.
func New(segs []*shm.Segment, opts Options) *Handler {
	return newHandler(fixed(segs), opts)
}

// NewFollowing returns the Handler of the segments the followers' paths
// name at each snapshot (metrics.Follower.Use): one made again under its
// path is shown, and while a path names none, the snapshot says why; a
// snapshot that races the replacement shows the old segment or the new.
// The followers stay the caller's to close.
func NewFollowing(fs []*metrics.Follower, opts Options) *Handler {
	srcs := make([]source, len(fs))
	for i, f := range fs {
		if f == nil {
			srcs[i] = noSegment
			continue
		}
		srcs[i] = source{path: f.Path(), use: f.Use}
	}
	return newHandler(srcs, opts)
}

func newHandler(segs []source, opts Options) *Handler {
	h := &Handler{segs: segs, interval: opts.Interval, now: opts.Now, mux: http.NewServeMux()}
	if h.interval == 0 {
		h.interval = DefaultInterval
	}
	h.interval = max(h.interval, MinInterval)
	if h.now == nil {
		h.now = time.Now
	}
	h.mux.HandleFunc("GET /{$}", h.servePage)
	h.mux.HandleFunc("GET /view.json", h.serveView)
	h.mux.HandleFunc("GET /events", h.serveEvents)
	return h
}

// ServeHTTP serves /, /view.json and /events; anything else is not found.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Snapshot reads the segments now.
func (h *Handler) Snapshot() Snapshot { return readSources(h.segs, h.now()) }

func (h *Handler) servePage(w http.ResponseWriter, _ *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	// The page loads nothing from elsewhere; say so to the browser too.
	hdr.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:")
	hdr.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(page)
}

func (h *Handler) serveView(w http.ResponseWriter, _ *http.Request) {
	b, err := json.Marshal(h.Snapshot())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

// serveEvents sends a snapshot at once and then every interval, until the
// client goes away (or the server shuts down, if it cancels the requests'
// base context then) or a write fails or times out (EventWriteTimeout).
//
// The stream outlives the server's WriteTimeout, which would end it: each
// event has a write deadline of its own. (net/http lifts the read deadline
// itself while a handler runs.) A ResponseWriter without deadlines (a
// test's recorder) does without.
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	// A client reconnects after this many milliseconds when the stream
	// breaks: the interval, so that a restarted server is found soon.
	retry := h.interval.Milliseconds()
	tick := time.NewTicker(h.interval)
	defer tick.Stop()
	for first := true; ; first = false {
		b, err := json.Marshal(h.Snapshot())
		if err != nil {
			return
		}
		_ = rc.SetWriteDeadline(time.Now().Add(EventWriteTimeout))
		if first {
			if _, err := w.Write([]byte("retry: " + strconv.FormatInt(retry, 10) + "\n")); err != nil {
				return
			}
		}
		if _, err := w.Write(append(append([]byte("data: "), b...), '\n', '\n')); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}
