package metrics_test

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shmlock/shmlock/metrics"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// A service exports its segment's locks in its own registry (served with
// promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) at /metrics).
func ExampleNewCollector() {
	path := fmt.Sprintf("/dev/shm/metrics-example-%d", os.Getpid())
	defer shm.Remove(path)
	seg, err := shm.Create(path, shm.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer seg.Close()
	lock, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Close()
	g, err := lock.Lock(spinlock.NewHolder())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Release()

	// A monitor opens the segment read-only.
	ro, err := shm.Open(path, shm.Options{ReadOnly: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ro.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(ro, metrics.SegmentLabel("jobs")))

	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shmlock_lock_held Whether the lock is held (1) or free (0).
# TYPE shmlock_lock_held gauge
shmlock_lock_held{kind="spinlock",lock="queue",segment="jobs"} 1
`), "shmlock_lock_held")
	fmt.Println("queue held:", err == nil)
	// Output:
	// queue held: true
}

// Read gives the same state as a View, for a tool of one's own.
func ExampleRead() {
	path := fmt.Sprintf("/dev/shm/metrics-read-example-%d", os.Getpid())
	defer shm.Remove(path)
	seg, err := shm.Create(path, shm.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer seg.Close()
	if _, err := spinlock.Named(seg, "queue", spinlock.PIDTID); err != nil {
		fmt.Println(err)
		return
	}
	v, err := metrics.Read(seg, time.Now())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range v.Locks {
		fmt.Printf("%s %s held=%v waiters=%d\n", l.Kind, l.Label, l.Held, l.Waiters)
	}
	// Output:
	// spinlock queue held=false waiters=0
}
