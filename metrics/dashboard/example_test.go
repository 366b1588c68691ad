package dashboard_test

import (
	"fmt"
	"net/http/httptest"
	"os"
	"time"

	"github.com/shmlock/shmlock/metrics/dashboard"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// A service mounts the dashboard of its segment beside its other handlers
// (here one request is served by hand); Read takes the same snapshot
// directly.
func Example() {
	path := fmt.Sprintf("/dev/shm/dashboard-example-%d", os.Getpid())
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

	h := dashboard.New([]*shm.Segment{seg}, dashboard.Options{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))

	snap := dashboard.Read([]*shm.Segment{seg}, time.Now())
	for _, l := range snap.Segments[0].Locks {
		fmt.Println(l.Kind, l.Label, l.Held, l.Holders[0].PID == os.Getpid())
	}
	// Output:
	// 200 text/html; charset=utf-8
	// spinlock queue true true
}
