package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/metrics"
	"github.com/shmlock/shmlock/metrics/dashboard"
	"github.com/shmlock/shmlock/shm"
)

type serveOptions struct {
	IO *IOStreams

	Segments []string
	Group    bool   // --group: the segments are shared with a group (shm.Options.GroupAccess)
	Listen   string // host:port
	Public   bool   // --public: a --listen address beyond this machine is meant
}

// defaultListen is where serve listens unless told: this machine only.
const defaultListen = "127.0.0.1:9464"

// serveShutdown bounds the wait for scrapes under way at SIGINT or SIGTERM.
const serveShutdown = 5 * time.Second

func newCmdServe(ios *IOStreams, runF func(*serveOptions) error) *cobra.Command {
	opts := &serveOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "serve <segment>... [--listen ADDR]",
		Short: "Serve the segments' locks as Prometheus metrics over HTTP",
		Long: `Serve the state of one or more segments at /metrics, in the Prometheus text
format: for every lock in use whether it is held, by how many holders and
how many of them are dead, its sleepers, whether it is inconsistent, the
age of a named resource's oldest hold; the lock manager's counters; how
full each table is (package metrics describes every series). Each segment's
series carry its path in the label segment. The segments are read at each
scrape, read-only: nothing in them changes, and nothing is cached.

At / serve shows the same locks on a live page for a browser (package
metrics/dashboard): a table per segment with each lock's holders and their
pids, waiters, hold age, contention rate and a sparkline of its last
minute, updated every second; dead holders, reclaims and inconsistent
locks are highlighted. The page is one file served by shmctl itself and
loads nothing from elsewhere. It reads /events (server-sent events); the
same snapshot is at /view.json for scripts that poll.

serve listens on 127.0.0.1:9464 unless --listen says otherwise, and refuses
an address other processes than this machine's could reach (another
interface, or all of them with ":PORT") unless --public is given: the
metrics name every lock and resource. A segment is its owner's alone (mode
0600), so run serve as the user that owns the segments (or with --group for
group segments). The address serve listens on is printed on stdout, as
"serving http://ADDR/metrics", once it accepts scrapes. SIGINT and SIGTERM
end it with status 0 after the scrapes under way. A client has 30 seconds
to send a request (10 for its headers) and to read an answer (each event
of /events), and a connection idle for 2 minutes is closed: a client that
is slow on purpose cannot hold the server's connections. At most 64
requests are answered at once (an open page's event stream is one for as
long as it is open); one more is refused with 503 Service Unavailable.

A segment removed and created again under the same path (an application
that restarts does so) is followed: at each scrape serve checks that the
path still names the file it has open, and opens the new one if not.
While the path names no segment, its series are shmlock_segment_up 0 (and
the error, on stderr) and the page shows the error.`,
		Example: `  shmctl serve jobs
  shmctl serve jobs queue --listen 127.0.0.1:9500
  shmctl serve jobs --listen :9464 --public
  curl -s localhost:9464/metrics | grep shmlock_lock_held
  curl -s localhost:9464/view.json`,
		Args: minArgs(1, "one or more segments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segments = args
			opts.Group = groupFlag(cmd)
			if err := checkListen(cmd, opts.Listen, opts.Public); err != nil {
				return err
			}
			if err := checkNamedOnce(cmd, args); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runServe(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Listen, "listen", defaultListen, "listen on `ADDR` (host:port; port 0 picks a free one)")
	cmd.Flags().BoolVar(&opts.Public, "public", false, "allow a --listen address other machines can reach")
	return cmd
}

// checkListen refuses an address that is not a loopback one unless
// public: a monitor exposed beyond the machine by a typo would hand out
// the names of every lock.
func checkListen(cmd *cobra.Command, addr string, public bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port) // a number in 0-65535, or a service name
	}
	if err != nil {
		return newUsageError(cmd, "--listen %q: %v", addr, err)
	}
	if public || isLoopback(host) {
		return nil
	}
	return newUsageError(cmd, "--listen %q is not a loopback address: other machines could read the metrics; add --public if that is meant", addr)
}

// checkNamedOnce refuses a segment named twice, in any spelling of its
// path (jobs, /dev/shm/jobs): its series would be registered twice, which
// is bad usage, better said before any segment is opened.
func checkNamedOnce(cmd *cobra.Command, segments []string) error {
	seen := map[string]bool{}
	for _, s := range segments {
		path, err := shm.ResolvePath(s)
		if err != nil {
			continue // the open says what is wrong with it
		}
		if seen[path] {
			return newUsageError(cmd, "%s is named twice", path)
		}
		seen[path] = true
	}
	return nil
}

func runServe(opts *serveOptions) error {
	reg := prometheus.NewRegistry()
	var segs []*metrics.Follower
	for _, path := range opts.Segments {
		seg, err := metrics.Follow(path, shm.Options{ReadOnly: true, GroupAccess: opts.Group})
		if err != nil {
			return err
		}
		defer seg.Close()
		segs = append(segs, seg)
		if err := reg.Register(metrics.NewFollowingCollector(seg)); err != nil {
			return fmt.Errorf("%s: named twice: %w", seg.Path(), err)
		}
	}
	if host, _, _ := net.SplitHostPort(opts.Listen); opts.Public && !isLoopback(host) {
		fmt.Fprintf(opts.IO.ErrOut, "shmctl: warning: serving on %s, which other machines may reach: the metrics name every lock\n", opts.Listen)
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return err
	}
	errLog := log.New(opts.IO.ErrOut, "shmctl: serve: ", 0)
	srv, cancelBase := newServeServer(serveHandler(reg, segs, errLog), errLog, defaultServeTimeouts)
	defer cancelBase()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintf(opts.IO.Out, "serving http://%s/metrics\n", ln.Addr())
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), serveShutdown)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// serveMaxInFlight bounds the requests serve answers at once: a scrape
// reads every table of its segments (a large segment takes a while), and
// an open page's event stream reads them every second for as long as it
// stays open. Past the bound a request is refused at once with 503 Service
// Unavailable (Prometheus counts a failed scrape, the page's stream
// retries), rather than piling up reads that take the CPU from the
// segments' users.
const serveMaxInFlight = 64

// serveHandler serves the metrics of reg at /metrics and the dashboard of
// segs at / (its page, /events and /view.json), serveMaxInFlight requests
// at a time.
func serveHandler(reg *prometheus.Registry, segs []*metrics.Follower, errLog *log.Logger) http.Handler {
	mux := http.NewServeMux()
	// One segment that cannot be read fails only its own series (logged
	// on stderr): the others are still served.
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      scrapeLog{errLog},
	}))
	mux.Handle("/", dashboard.NewFollowing(segs, dashboard.Options{}))
	return limitInFlight(mux, serveMaxInFlight)
}

// scrapeLog logs promhttp's report of a scrape's errors one line each,
// each a segment's error as the collector gave it (which names the
// segment), without the dump of the carrying metric's descriptor that
// prometheus wraps it in ("error collecting metric Desc{fqName: ...,
// help: ..., constLabels: {...}}: ") nor its "N error(s) occurred:" list.
type scrapeLog struct{ l *log.Logger }

func (s scrapeLog) Println(v ...any) {
	err, ok := v[len(v)-1].(error)
	if !ok {
		s.l.Println(v...)
		return
	}
	errs, ok := err.(prometheus.MultiError)
	if !ok {
		errs = prometheus.MultiError{err}
	}
	for _, e := range errs {
		if inner := errors.Unwrap(e); inner != nil && strings.HasPrefix(e.Error(), "error collecting metric ") {
			e = inner
		}
		s.l.Println(append(v[:len(v)-1:len(v)-1], e)...)
	}
}

// limitInFlight answers 503 to a request that arrives while h answers n.
func limitInFlight(h http.Handler, n int) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		default:
			http.Error(w, "shmctl serve: too many requests at once", http.StatusServiceUnavailable)
		}
	})
}

// serveTimeouts bound what a client may hold a connection (a goroutine, a
// file) with: without them, a client that sends its headers slowly, or a
// body nobody reads (the server reads it to the end after the answer, to
// keep the connection), or that keeps a connection idle, or stops reading
// an answer, held it for ever, and enough such clients used up the
// process's files. No endpoint reads a body, so reading a request is short;
// the event stream sets its own write deadline per event
// (dashboard.EventWriteTimeout).
type serveTimeouts struct {
	header, read, write, idle time.Duration
}

// defaultServeTimeouts are generous for a scrape (a read of the segment,
// answered at once) on a slow network, and far below what a client needs
// to wear the server out.
var defaultServeTimeouts = serveTimeouts{
	header: 10 * time.Second,
	read:   30 * time.Second,
	write:  30 * time.Second,
	idle:   2 * time.Minute,
}

// newServeServer is serve's server of h: with timeouts, and a base context
// for the requests that the returned cancel (called at shutdown too) ends,
// so that the page's event streams, which never go idle, end then.
func newServeServer(h http.Handler, errLog *log.Logger, to serveTimeouts) (*http.Server, context.CancelFunc) {
	base, cancelBase := context.WithCancel(context.Background())
	srv := &http.Server{Handler: h, ErrorLog: errLog,
		ReadHeaderTimeout: to.header, ReadTimeout: to.read, WriteTimeout: to.write, IdleTimeout: to.idle,
		BaseContext: func(net.Listener) context.Context { return base }}
	srv.RegisterOnShutdown(cancelBase)
	return srv, cancelBase
}

// isLoopback reports whether host (of a --listen address) is this
// machine's alone.
func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}
