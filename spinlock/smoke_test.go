package spinlock_test

import (
	"sync"
	"testing"

	"github.com/shmlock/shmlock/spinlock"
)

func TestSmokeCounter(t *testing.T) {
	for _, mode := range []spinlock.Mode{spinlock.PIDTID, spinlock.Token} {
		l := spinlock.New(spinlock.NewInProcessState(), mode)
		var counter int
		var wg sync.WaitGroup
		const workers, iters = 8, 20000
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range iters {
					id := spinlock.NewHolder()
					if mode == spinlock.Token {
						id = spinlock.NewToken()
					}
					var g spinlock.Guard
					if err := g.Lock(l, id); err != nil {
						t.Error(err)
						return
					}
					counter++
					if err := g.Release(); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if counter != workers*iters {
			t.Fatalf("%v: counter %d, want %d", mode, counter, workers*iters)
		}
	}
}
