package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/metrics"
	"github.com/shmlock/shmlock/spinlock"
)

func init() { helpers["churn"] = churnHelper }

// churnHelper (churn PATH N): N rounds of the spinlock "queue", a shared
// hold of "table" and an exclusive one of the resource "job" (contended
// with the other helper), and of a resource of a few more names than the
// table has entries, so that entries are recycled; it prints "done".
func churnHelper(args []string) int {
	fail := func(err error) int { fmt.Println("error:", err); return 1 }
	rounds, err := strconv.Atoi(args[1])
	if err != nil {
		return fail(err)
	}
	ls, err := openLocks(args[0])
	if err != nil {
		return fail(err)
	}
	defer ls.close()
	l, u, m := ls.spin, ls.rw, ls.mgr
	ctx, owner := context.Background(), "w"+args[1]
	h := spinlock.NewHolder()
	for i := range rounds {
		g, err := l.Lock(h)
		if err != nil {
			return fail(err)
		}
		if err := u.LockShared(); err != nil {
			return fail(err)
		}
		if err := u.UnlockShared(); err != nil {
			return fail(err)
		}
		if err := g.Release(); err != nil {
			return fail(err)
		}
		for _, res := range []string{"job", fmt.Sprintf("r%d", i%7)} {
			_, err := m.Acquire(ctx, res, owner, lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: testproc.Timeout})
			if errors.Is(err, lockmgr.ErrTableFull) {
				continue
			}
			if err != nil {
				return fail(err)
			}
			if err := m.Release(res, owner); err != nil {
				return fail(err)
			}
		}
	}
	fmt.Println("done")
	return 0
}

// Scrapes while two processes take and release locks and the lock
// manager recycles entries: every scrape succeeds, and no counter of a
// lock that keeps its name and entry, nor of the lock manager, goes back
// (Prometheus would read a reset).
func TestScrapeUnderChurn(t *testing.T) {
	t.Parallel()
	path := newSegment(t)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector(openRO(t, path))))
	a := testproc.Start(t, "churn", path, "20000")
	b := testproc.Start(t, "churn", path, "20001")
	last := map[string]float64{}
	stable := func(mf *dto.MetricFamily, m *dto.Metric) bool {
		if strings.HasPrefix(mf.GetName(), "shmlock_lockmgr_") {
			return true
		}
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "lock" {
				return lp.GetValue() == "queue" || lp.GetValue() == "table" || lp.GetValue() == "job"
			}
		}
		return false
	}
	scrapes := 0
	for running := true; running; scrapes++ {
		select {
		case <-a.Done():
			<-b.Done()
			running = false
		default:
		}
		mfs, err := reg.Gather()
		require.NoError(t, err, "scrape %d", scrapes)
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				var vals map[string]float64
				switch {
				case m.GetCounter() != nil:
					vals = map[string]float64{"": m.GetCounter().GetValue()}
				case m.GetHistogram() != nil:
					vals = map[string]float64{"_count": float64(m.GetHistogram().GetSampleCount()), "_sum": m.GetHistogram().GetSampleSum()}
				}
				if vals == nil || !stable(mf, m) {
					continue
				}
				for suffix, v := range vals {
					key := mf.GetName() + suffix + labelsOf(m)
					require.GreaterOrEqual(t, v, last[key], "scrape %d: %s went back", scrapes, key)
					last[key] = v
				}
			}
		}
	}
	a.WaitOK(t)
	b.WaitOK(t)
	t.Logf("%d scrapes", scrapes)
}

// labelsOf is m's labels as text, the key of its series.
func labelsOf(m *dto.Metric) string {
	var b strings.Builder
	for _, lp := range m.GetLabel() {
		fmt.Fprintf(&b, "{%s=%q}", lp.GetName(), lp.GetValue())
	}
	return b.String()
}
