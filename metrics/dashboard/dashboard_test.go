package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/metrics"
	"github.com/shmlock/shmlock/metrics/dashboard"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

// lockOf is the lock of kind and label in s's only segment; it fails the
// test if there is none.
func lockOf(t *testing.T, s dashboard.Snapshot, kind, label string) dashboard.Lock {
	t.Helper()
	require.Len(t, s.Segments, 1)
	for _, l := range s.Segments[0].Locks {
		if l.Kind == kind && l.Label == label {
			return l
		}
	}
	t.Fatalf("no %s %q in %+v", kind, label, s.Segments[0].Locks)
	return dashboard.Lock{}
}

// The snapshot names each holder's process: a spinlock's, an upgrade
// mutex's reader and a resource's owner; a killed holder is dead.
func TestReadHolders(t *testing.T) {
	t.Parallel()
	seg := newSegment(t)
	l, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	defer l.Close()
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	defer g.Release()
	u, err := upgrade.Named(seg, "table")
	require.NoError(t, err)
	defer u.Close()
	require.NoError(t, u.LockShared())
	defer u.UnlockShared()
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	_, err = m.Acquire(context.Background(), "job", "w1", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	defer m.Release("job", "w1")

	c := testproc.StartWithStdin(t, "spin", seg.Path(), "crash")
	c.WaitLine(t, "held")
	c.Kill(t)

	ro := openRO(t, seg.Path())
	now := time.Now()
	s := dashboard.Read([]*shm.Segment{ro}, now)
	require.Equal(t, now, s.Time)
	require.Equal(t, seg.Path(), s.Segments[0].Path)
	require.Empty(t, s.Segments[0].Error)
	require.True(t, s.Segments[0].Contention)
	me := os.Getpid()

	q := lockOf(t, s, "spinlock", "queue")
	require.True(t, q.Held)
	require.Equal(t, 1, q.HolderCount)
	require.Equal(t, []dashboard.Holder{{PID: me, Alive: true}}, q.Holders)
	require.Equal(t, -1.0, q.HoldAge)
	require.NotNil(t, q.Contention)

	tb := lockOf(t, s, "upgrade", "table")
	require.Equal(t, []dashboard.Holder{{PID: me, Alive: true, Mode: "shared"}}, tb.Holders)

	j := lockOf(t, s, "lockmgr", "job")
	require.Equal(t, -1, j.Waiters)
	require.GreaterOrEqual(t, j.HoldAge, 0.0)
	require.Equal(t, []dashboard.Holder{{PID: me, Alive: true, Mode: lockmgr.Exclusive.String(), Owner: "w1"}}, j.Holders)

	dead := lockOf(t, s, "spinlock", "crash")
	require.Equal(t, 1, dead.DeadHolders)
	require.Equal(t, []dashboard.Holder{{PID: c.PID(), Alive: false}}, dead.Holders)

	// A closed segment is an error of its own.
	require.NoError(t, ro.Close())
	s = dashboard.Read([]*shm.Segment{ro}, now)
	require.Equal(t, shm.ErrClosed.Error(), s.Segments[0].Error)
	require.Empty(t, s.Segments[0].Locks)
}

// serve starts an HTTP server of h on a free port until the test ends.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: testproc.Timeout}).Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// / is the page, which names nothing outside the server; view.json the
// snapshot; other paths are not found.
func TestHandler(t *testing.T) {
	t.Parallel()
	seg := newSegment(t)
	l, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	defer l.Close()
	url := serve(t, dashboard.New([]*shm.Segment{seg}, dashboard.Options{}))

	resp, page := get(t, url+"/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Contains(t, page, `new EventSource("events")`)
	// No external resource: no src or href attribute, CSS url() or
	// @import, and no absolute URL but the SVG namespace's.
	for _, bad := range []string{"src=", "@import", "url(", "//fonts", "<link"} {
		require.NotContains(t, page, bad)
	}
	for _, u := range regexp.MustCompile(`https?://[^"'\s)]*`).FindAllString(page, -1) {
		require.Equal(t, "http://www.w3.org/2000/svg", u, "an absolute URL in the page")
	}

	resp, body := get(t, url+"/view.json")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var s dashboard.Snapshot
	require.NoError(t, json.Unmarshal([]byte(body), &s))
	q := lockOf(t, s, "spinlock", "queue")
	require.False(t, q.Held)
	require.Empty(t, q.Holders)

	for _, path := range []string{"/metrics", "/index.html", "/events/x"} {
		resp, _ := get(t, url+path)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
	}
}

// /events sends a snapshot at once and then every interval, each the
// segment as it is, and stops when the client goes away.
func TestEvents(t *testing.T) {
	t.Parallel()
	seg := newSegment(t)
	l, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	defer l.Close()
	h := dashboard.New([]*shm.Segment{seg}, dashboard.Options{Interval: dashboard.MinInterval})
	returned := make(chan struct{}, 1)
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		returned <- struct{}{}
	}))

	ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/events", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	// next is the snapshot of the next event.
	next := func() dashboard.Snapshot {
		t.Helper()
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				var s dashboard.Snapshot
				require.NoError(t, json.Unmarshal([]byte(data), &s))
				return s
			}
		}
		t.Fatalf("the stream ended: %v", lines.Err())
		return dashboard.Snapshot{}
	}
	require.False(t, lockOf(t, next(), "spinlock", "queue").Held)
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	for !lockOf(t, next(), "spinlock", "queue").Held {
	}
	require.NoError(t, g.Release())
	for lockOf(t, next(), "spinlock", "queue").Held {
	}

	cancel()
	testproc.Receive(t, returned, "the events handler to return after the client left")
}

// /events goes on past the server's ReadTimeout and WriteTimeout, which
// a server sets against slow clients ('shmctl serve' does): each event
// has a write deadline of its own. Before, the stream's writes failed
// once the server's WriteTimeout had passed, so a page behind such a
// server reconnected over and over. The request's headers have a timeout
// of their own, a long one (as 'shmctl serve' has a header timeout apart):
// with the ReadTimeout on them, a client descheduled for 100ms between
// its connect and its request had its connection reset before any answer
// (2 failures in 80 runs with -cpu 1 beside CPU hogs; 0 in 80 after).
func TestEventsOutliveServerTimeouts(t *testing.T) {
	t.Parallel()
	seg := newSegment(t)
	const timeout = 100 * time.Millisecond // the server's; the stream must last many of them
	srv := httptest.NewUnstartedServer(dashboard.New([]*shm.Segment{seg}, dashboard.Options{Interval: dashboard.MinInterval}))
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = timeout, timeout
	srv.Config.ReadHeaderTimeout = testproc.Timeout
	srv.Start()
	t.Cleanup(srv.Close)

	resp, err := (&http.Client{Timeout: testproc.Timeout}).Get(srv.URL + "/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	start := time.Now()
	for events := 0; time.Since(start) < 10*timeout; {
		require.True(t, lines.Scan(), "the stream ended after %d events, %v: %v", events, time.Since(start), lines.Err())
		if strings.HasPrefix(lines.Text(), "data: ") {
			events++
		}
	}
}

// docs/JSON.md's section on /view.json names every key of a Snapshot.
// Before, the endpoint was not described there at all.
func TestViewDocumented(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/JSON.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## serve's /view.json\n")
	require.True(t, ok, "docs/JSON.md has no section on /view.json")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, typ := range []reflect.Type{reflect.TypeFor[dashboard.Snapshot](), reflect.TypeFor[dashboard.Segment](),
		reflect.TypeFor[dashboard.Table](), reflect.TypeFor[dashboard.Lock](), reflect.TypeFor[dashboard.Holder](),
		reflect.TypeFor[dashboard.Contention]()} {
		for f := range typ.Fields() {
			key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			require.Contains(t, section, "`"+key+"`", "%v.%s", typ, f.Name)
		}
	}
}

// A nil segment or follower among the Handler's is shown with the error
// shm.ErrNoSegment, as metrics.NewCollector(nil) reports it, and the
// others are read all the same: it panicked on its Path.
func TestNilSegments(t *testing.T) {
	t.Parallel()
	seg := newSegment(t)
	check := func(t *testing.T, s dashboard.Snapshot) {
		t.Helper()
		require.Len(t, s.Segments, 2)
		require.Equal(t, shm.ErrNoSegment.Error(), s.Segments[0].Error)
		require.Empty(t, s.Segments[1].Error)
		require.Equal(t, seg.Path(), s.Segments[1].Path)
	}
	require.NotPanics(t, func() { check(t, dashboard.Read([]*shm.Segment{nil, seg}, time.Now())) })
	require.NotPanics(t, func() { check(t, dashboard.New([]*shm.Segment{nil, seg}, dashboard.Options{}).Snapshot()) })
	f, err := metrics.Follow(seg.Path(), shm.Options{ReadOnly: true})
	require.NoError(t, err)
	defer f.Close()
	require.NotPanics(t, func() { check(t, dashboard.NewFollowing([]*metrics.Follower{nil, f}, dashboard.Options{}).Snapshot()) })
}
