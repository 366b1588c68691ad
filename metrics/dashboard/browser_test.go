package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/metrics/dashboard"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// browserTimeout bounds the whole browser test (Chromium's start
// included): it only turns a hang into a failure.
const browserTimeout = 2 * time.Minute

// installChromium is how to get the browser the test drives (README,
// "Tests and fuzzing"; .ci/run installs it).
const installChromium = "apt-get install -y chromium"

// chromium is the path of a headless-capable Chromium: $SHMLOCK_CHROMIUM,
// else the first of the usual names on $PATH. The test fails without one:
// it is never skipped.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SHMLOCK_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("no Chromium found on $PATH (nor $SHMLOCK_CHROMIUM): the dashboard's browser test needs it; install it with `%s`", installChromium)
	return ""
}

// newBrowser starts a headless Chromium for the test and returns a tab's
// context, which ends with the test (or browserTimeout).
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	t.Cleanup(cancel)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(cancelTab)
	return tab
}

// pageRow is a lock's row as the page shows it.
type pageRow struct {
	Found   bool   `json:"found"`
	State   string `json:"state"`
	Holders string `json:"holders"`
	Class   string `json:"class"`
}

// rowScript reads the row of spinlock name from the page.
func rowScript(name string) string {
	return fmt.Sprintf(`(() => {
	const r = [...document.querySelectorAll('tr[data-kind="spinlock"]')].find(r => r.dataset.lock === %s);
	if (!r) return {found: false};
	return {found: true, state: r.querySelector('[data-col=state]').textContent,
		holders: r.querySelector('[data-col=holders]').textContent, class: r.className};
})()`, strconv.Quote(name))
}

// waitRow waits until the page's row of spinlock name satisfies cond, and
// returns it; what says what is awaited.
func waitRow(t *testing.T, tab context.Context, name, what string, cond func(pageRow) bool) pageRow {
	t.Helper()
	var r pageRow
	for {
		var err error
		if r, err = chromedp.Run(tab, chromedp.Evaluate[pageRow](rowScript(name))); err != nil {
			t.Fatalf("waiting for the page to show %s: %v; last row: %+v", what, err, r)
		}
		if cond(r) {
			return r
		}
		select {
		case <-tab.Done():
			t.Fatalf("timed out after %v waiting for the page to show %s; last row: %+v", browserTimeout, what, r)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// The page, in a real browser, shows a spinlock that another process takes
// as held by that process's pid, then free after its release; a holder
// killed holding a lock is highlighted as dead, and the takeover as a
// reclaim.
func TestBrowser(t *testing.T) {
	t.Parallel()
	seg := newSegment(t)
	// The test claims "queue" too, so that it stays listed, free, after
	// the helper's release (a name nobody uses is not shown).
	q, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	defer q.Close()
	h := dashboard.New([]*shm.Segment{openRO(t, seg.Path())}, dashboard.Options{Interval: 100 * time.Millisecond})
	url := serve(t, h)
	tab := newBrowser(t)
	_, err = chromedp.Run(tab, chromedp.Navigate(url+"/"))
	require.NoError(t, err)
	title, err := chromedp.Run(tab, chromedp.Title())
	require.NoError(t, err)
	require.Equal(t, "shmlock: locks", title)

	c := testproc.StartWithStdin(t, "spin", seg.Path(), "queue")
	c.WaitLine(t, "held")
	pid := "pid " + strconv.Itoa(c.PID())
	r := waitRow(t, tab, "queue", "queue held", func(r pageRow) bool { return r.Found && r.State == "held" })
	require.Equal(t, pid, r.Holders)
	require.NotContains(t, r.Class, "dead")

	c.Send(t, "release")
	c.WaitLine(t, "released")
	require.NoError(t, c.Wait(t))
	r = waitRow(t, tab, "queue", "queue free", func(r pageRow) bool { return r.State == "free" })
	require.Equal(t, "—", r.Holders)

	// A holder killed holding "crash": the row is marked dead, with the
	// dead pid; after this process takes the lock over, reclaimed.
	k := testproc.StartWithStdin(t, "spin", seg.Path(), "crash")
	k.WaitLine(t, "held")
	k.Kill(t)
	r = waitRow(t, tab, "crash", "crash's dead holder", func(r pageRow) bool { return strings.Contains(r.Class, "dead") })
	require.Equal(t, fmt.Sprintf("pid %d (dead)", k.PID()), r.Holders)
	require.Contains(t, r.State, "1 dead")
	l, err := spinlock.Named(seg, "crash", spinlock.PIDTID)
	require.NoError(t, err)
	defer l.Close()
	g, err := l.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	require.True(t, g.Reclaimed())
	r = waitRow(t, tab, "crash", "crash reclaimed", func(r pageRow) bool {
		return strings.Contains(r.Class, "reclaimed") && !strings.Contains(r.Class, "dead")
	})
	require.Equal(t, "pid "+strconv.Itoa(os.Getpid()), r.Holders)
	require.Contains(t, r.State, "reclaimed")
	if path := os.Getenv("SHMLOCK_DASHBOARD_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, png, 0o644))
	}
	require.NoError(t, g.Release())
}
