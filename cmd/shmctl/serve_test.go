package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/metrics"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

func TestServeFlags(t *testing.T) {
	t.Parallel()
	opts, _ := parsedOptions(t, newCmdServe, []string{"a", "b"})
	require.Equal(t, []string{"a", "b"}, opts.Segments)
	require.Equal(t, "127.0.0.1:9464", opts.Listen)
	require.False(t, opts.Public)
	for _, listen := range []string{"localhost:0", "[::1]:9464", "127.0.0.2:80"} {
		opts, _ = parsedOptions(t, newCmdServe, []string{"a", "--listen", listen})
		require.Equal(t, listen, opts.Listen)
	}
	opts, _ = parsedOptions(t, newCmdServe, []string{"a", "--listen", ":9464", "--public"})
	require.True(t, opts.Public)
}

// serve refuses an address beyond this machine without --public, and
// bad usage, with one line and status 2.
func TestServeRefuses(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "seg", "--listen", ":9464"},
		{"serve", "seg", "--listen", "0.0.0.0:0"},
		{"serve", "seg", "--listen", "10.1.2.3:9464"},
		{"serve", "seg", "--listen", "nohost"},
		{"serve"},
	} {
		requireOneLineError(t, shmctl(t, false, args...), exitUsage)
	}
	line := requireOneLineError(t, shmctl(t, false, "serve", "seg", "--listen", ":9464"), exitUsage)
	require.Contains(t, line, "--public")

	// A segment named twice, in any spelling of its path, is bad usage,
	// found before any segment is opened: it was status 1, after the
	// opens, in prometheus's words ("duplicate metrics collector
	// registration attempted").
	for _, twice := range [][]string{{"seg", "seg"}, {"seg", shm.DefaultDir + "/seg"}, {"other", "seg", shm.DefaultDir + "//seg"}} {
		line := requireOneLineError(t, shmctl(t, false, append([]string{"serve"}, twice...)...), exitUsage)
		assert.Contains(t, line, shm.DefaultDir+"/seg is named twice", "%q", twice)
	}
}

// serve, a process of its own on a free port, exposes the held spinlock
// and resource of a segment, the change after their release, and ends
// with status 0 at SIGTERM.
func TestServe(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 2, Upgrades: 1, TxnRecords: -1, LockMgrEntries: 3})
	l, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	defer l.Close()
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	_, err = m.Acquire(context.Background(), "job", "w1", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)

	c := testproc.Start(t, "shmctl", "serve", seg.Path(), "--listen", "127.0.0.1:0")
	url := strings.TrimSpace(c.WaitLine(t, "serving "))
	lk := `{kind="spinlock",lock="queue",segment="` + seg.Path() + `"}`
	res := `{kind="lockmgr",lock="job",segment="` + seg.Path() + `"}`
	tab := `{segment="` + seg.Path() + `"}`
	body := get(t, url)
	for _, want := range []string{"shmlock_lock_held" + lk + " 1", "shmlock_lock_holders" + lk + " 1",
		"shmlock_lock_held" + res + " 1", "shmlock_lockmgr_grants_total" + tab + " 1",
		"shmlock_lockmgr_active_holds" + tab + " 1", "shmlock_lockmgr_releases_total" + tab + " 0"} {
		require.Contains(t, body, want+"\n")
	}

	require.NoError(t, g.Release())
	require.NoError(t, m.Release("job", "w1"))
	body = get(t, url)
	for _, want := range []string{"shmlock_lock_held" + lk + " 0", "shmlock_lock_holders" + lk + " 0",
		"shmlock_lockmgr_active_holds" + tab + " 0", "shmlock_lockmgr_releases_total" + tab + " 1"} {
		require.Contains(t, body, want+"\n")
	}
	require.NotContains(t, body, "shmlock_lock_held"+res, "a free resource nobody declared is not listed")

	// The dashboard beside /metrics: its page and its snapshot, which an
	// event stream left open does not keep from ending at SIGTERM.
	root := strings.TrimSuffix(url, "metrics")
	require.Contains(t, get(t, root), "<title>shmlock: locks</title>")
	require.Contains(t, get(t, root+"view.json"), `"label":"queue","index":0,"held":false`)
	events, err := http.Get(root + "events")
	require.NoError(t, err)
	defer events.Body.Close()
	require.Equal(t, "text/event-stream", events.Header.Get("Content-Type"))
	require.NoError(t, c.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, c.Wait(t))
}

// follow is a metrics.Follower of path until the test ends.
func follow(t *testing.T, path string) *metrics.Follower {
	t.Helper()
	f, err := metrics.Follow(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// serve follows a segment removed and created again under its path (an
// application's restart): it serves the new file's locks, and in between,
// while the path names no segment, shmlock_segment_up 0 and the error on
// the page. Before, serve kept the file it had opened and went on serving
// its frozen state: the held lock of the removed segment, no error.
func TestServeFollowsARecreatedSegment(t *testing.T) {
	t.Parallel()
	sizes := layout.Options{Slots: 2, Upgrades: 1, TxnRecords: -1}
	seg := newSegment(t, sizes)
	path := seg.Path()
	l, err := spinlock.Named(seg, "old", spinlock.PIDTID)
	require.NoError(t, err)
	defer l.Close()
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	defer func() { _ = g.Release() }()

	c := testproc.Start(t, "shmctl", "serve", path, "--listen", "127.0.0.1:0")
	url := strings.TrimSpace(c.WaitLine(t, "serving "))
	root := strings.TrimSuffix(url, "metrics")
	up := `shmlock_segment_up{segment="` + path + `"} `
	old := `shmlock_lock_held{kind="spinlock",lock="old",segment="` + path + `"} 1` + "\n"
	body := get(t, url)
	require.Contains(t, body, old)
	require.Contains(t, body, up+"1\n")

	require.NoError(t, shm.Remove(path))
	body = get(t, url)
	require.NotContains(t, body, old, "the removed segment's state")
	require.Contains(t, body, up+"0\n")
	require.Contains(t, get(t, root+"view.json"), `"error":`)

	fresh, err := shm.Create(path, shm.Options{Options: sizes})
	require.NoError(t, err)
	defer fresh.Close()
	nl, err := spinlock.Named(fresh, "new", spinlock.PIDTID)
	require.NoError(t, err)
	defer nl.Close()
	body = get(t, url)
	require.Contains(t, body, `shmlock_lock_held{kind="spinlock",lock="new",segment="`+path+`"} 0`+"\n")
	require.NotContains(t, body, old)
	require.Contains(t, body, up+"1\n")
	view := get(t, root+"view.json")
	require.Contains(t, view, `"label":"new"`)
	require.NotContains(t, view, `"label":"old"`)
	require.NoError(t, c.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, c.Wait(t))
	// The scrape while the path named nothing logged the error, one line
	// that names the segment, not prometheus's dump of a metric's Desc.
	require.Contains(t, c.Out.String(), "shmctl: serve: error gathering metrics: shm: open "+path+": no such file or directory\n")
	require.NotContains(t, c.Out.String(), "Desc{")
}

// get is the body of a 200 answer to a GET of url.
func get(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", url, b)
	return string(b)
}

// A client cannot hold a connection of serve for ever: not by sending its
// headers slowly, nor by announcing a body it never sends, nor by keeping
// its connection idle after an answer. Each ends with serve closing the
// connection (here with a timeout of 100ms; the test waits for the close,
// with testproc.Timeout as the bound of a hang). Before, the server had a
// header timeout only: the body and the idle connection were held as long
// as the client wished. Each case has a server of its own whose timeout
// under test alone is short: with every timeout short, a server
// descheduled for 100ms (a loaded machine) let its read or write timeout
// cut the answer the idle connection must get first (6 failures in 123
// runs beside CPU hogs), and a timeout left unwired went unseen when
// another short one ended the connection in its place.
func TestServeDropsSlowClients(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 2, Upgrades: 1, TxnRecords: -1, LockMgrEntries: 3})
	f := follow(t, seg.Path())
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewFollowingCollector(f)))
	errLog := log.New(io.Discard, "", 0)
	// long outlasts the client's wait (testproc.Timeout): a case whose
	// timeout went unwired must fail by the client's deadline, not race a
	// fallback of the same length (ReadHeaderTimeout falls back to
	// ReadTimeout, IdleTimeout to ReadTimeout).
	const d, long = 100 * time.Millisecond, time.Hour

	for _, c := range []struct {
		name, request string
		answered      bool // a whole answer comes before the close
		timeouts      serveTimeouts
	}{
		{"headers sent slowly", "GET /metrics HTTP/1.1\r\nHost: x\r\n", false,
			serveTimeouts{header: d, read: long, write: long, idle: long}},
		{"a body never sent", "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", false,
			serveTimeouts{header: long, read: d, write: long, idle: long}},
		{"an idle connection", "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", true,
			serveTimeouts{header: long, read: long, write: long, idle: d}},
	} {
		srv, cancel := newServeServer(serveHandler(reg, []*metrics.Follower{f}, errLog), errLog, c.timeouts)
		t.Cleanup(cancel)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })

		conn, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		require.NoError(t, conn.SetDeadline(time.Now().Add(testproc.Timeout)))
		_, err = io.WriteString(conn, c.request)
		require.NoError(t, err)
		r := bufio.NewReader(conn)
		if c.answered {
			resp, err := http.ReadResponse(r, nil)
			require.NoError(t, err, c.name)
			_, err = io.ReadAll(resp.Body)
			require.NoError(t, err, c.name)
			require.Equal(t, http.StatusOK, resp.StatusCode, c.name)
		}
		_, err = io.ReadAll(r) // to the close
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "%s: the connection is still open after %v", c.name, testproc.Timeout)
		require.NoError(t, conn.Close())
	}
}

// serve answers serveMaxInFlight requests at once and refuses one more
// with 503 at once: here as many event streams (a page each) as the bound
// are open, and a scrape is refused until one of them ends. Before, every
// request was served, so pages and scrapes without end each read the
// segments at once.
func TestServeBoundsRequestsInFlight(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 2, Upgrades: 1, TxnRecords: -1, LockMgrEntries: 3})
	f := follow(t, seg.Path())
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewFollowingCollector(f)))
	srv := httptest.NewServer(serveHandler(reg, []*metrics.Follower{f}, log.New(io.Discard, "", 0)))
	t.Cleanup(srv.Close)
	client := &http.Client{Timeout: testproc.Timeout}
	status := func() int {
		resp, err := client.Get(srv.URL + "/metrics")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, status())

	var streams []io.Closer
	t.Cleanup(func() { // before srv.Close, which waits for the streams' ends
		for _, s := range streams {
			_ = s.Close()
		}
	})
	for range serveMaxInFlight {
		resp, err := (&http.Client{}).Get(srv.URL + "/events")
		require.NoError(t, err)
		streams = append(streams, resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		_, err = bufio.NewReader(resp.Body).ReadString('\n') // the stream is under way
		require.NoError(t, err)
	}
	require.Equal(t, http.StatusServiceUnavailable, status(), "with %d streams open", serveMaxInFlight)
	require.NoError(t, streams[0].Close())
	testproc.WaitFor(t, func() bool { return status() == http.StatusOK }, "a scrape answered once a stream ended")
	require.Contains(t, newCmdServe(nil, nil).Long, fmt.Sprintf("At most %d\nrequests", serveMaxInFlight), "the help states the bound")
}

// serve's scrape log: one line per segment's error, without prometheus's
// wrapping (the descriptor, the "N error(s) occurred:" list), and promhttp's
// other reports as they are.
func TestScrapeLog(t *testing.T) {
	t.Parallel()
	wrapped := func(err error) error {
		return fmt.Errorf("error collecting metric Desc{fqName: \"x\", constLabels: {segment=\"a\"}}: %w", err)
	}
	a, b := errors.New("segment a: shm: segment is closed"), errors.New("shm: open b: no such file or directory")
	for _, tc := range []struct {
		v    []any
		want string
	}{
		{[]any{"error gathering metrics:", wrapped(a)}, "s: error gathering metrics: " + a.Error() + "\n"},
		{[]any{"error gathering metrics:", prometheus.MultiError{wrapped(a), wrapped(b)}},
			"s: error gathering metrics: " + a.Error() + "\ns: error gathering metrics: " + b.Error() + "\n"},
		{[]any{"error getting writer", b}, "s: error getting writer " + b.Error() + "\n"},
		{[]any{"no error"}, "s: no error\n"},
	} {
		var out strings.Builder
		scrapeLog{log.New(&out, "s: ", 0)}.Println(tc.v...)
		assert.Equal(t, tc.want, out.String(), "%q", tc.v)
	}
}
