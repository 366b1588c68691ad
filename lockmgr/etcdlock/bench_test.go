package etcdlock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// locker is one benchmark client's lock: lock and unlock one resource.
type locker interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

type mgrLocker struct {
	m     *etcdlock.Manager
	owner string
	mode  lockmgr.Mode
}

func (l mgrLocker) lock(ctx context.Context) error {
	_, err := l.m.Acquire(ctx, "bench", l.owner, l.mode, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
	return err
}
func (l mgrLocker) unlock(context.Context) error { return l.m.Release("bench", l.owner) }

type mutexLocker struct{ mu *concurrency.Mutex }

func (l mutexLocker) lock(ctx context.Context) error   { return l.mu.Lock(ctx) }
func (l mutexLocker) unlock(ctx context.Context) error { return l.mu.Unlock(ctx) }

type rwLocker struct{ rw *recipe.RWMutex }

func (l rwLocker) lock(context.Context) error   { return l.rw.RLock() }
func (l rwLocker) unlock(context.Context) error { return l.rw.RUnlock() }

// makers build the lock of client i on prefix p, each with an etcd client
// (a connection) of its own, as separate processes would have.
var makers = map[string]func(tb testing.TB, p string, i int) locker{
	"etcdlock": func(tb testing.TB, p string, i int) locker {
		return mgrLocker{m: newManager(tb, p), owner: fmt.Sprint("c", i), mode: lockmgr.Exclusive}
	},
	"concurrency.Mutex": func(tb testing.TB, p string, i int) locker {
		return mutexLocker{concurrency.NewMutex(newSession(tb), p+"bench")}
	},
	"etcdlock-collaborative": func(tb testing.TB, p string, i int) locker {
		return mgrLocker{m: newManager(tb, p), owner: fmt.Sprint("c", i), mode: lockmgr.Collaborative}
	},
	"recipe.RWMutex-RLock": func(tb testing.TB, p string, i int) locker {
		return rwLocker{recipe.NewRWMutex(newSession(tb), p+"bench")}
	},
}

func newSession(tb testing.TB) *concurrency.Session {
	s, err := concurrency.NewSession(newClient(tb), concurrency.WithTTL(int(testSessionTTL/time.Second)))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkAcquireRelease: acquire and release of one resource by 1, 4
// and 16 clients, beside etcd's own recipes on the same server: exclusive
// against concurrency.Mutex, collaborative against the read lock of the
// recipes' RWMutex. ns/op is the time of one acquire+release pair, all
// clients together.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, pair := range [][2]string{{"etcdlock", "concurrency.Mutex"}, {"etcdlock-collaborative", "recipe.RWMutex-RLock"}} {
		for _, clients := range []int{1, 4, 16} {
			for _, name := range pair {
				b.Run(fmt.Sprintf("%s/clients=%d", name, clients), func(b *testing.B) {
					p := newPrefix(b)
					ls := make([]locker, clients)
					for i := range ls {
						ls[i] = makers[name](b, p, i)
					}
					ctx := context.Background()
					var next sync.Mutex
					left := b.N
					b.ResetTimer()
					var wg sync.WaitGroup
					for _, l := range ls {
						wg.Go(func() {
							for {
								next.Lock()
								if left == 0 {
									next.Unlock()
									return
								}
								left--
								next.Unlock()
								if err := l.lock(ctx); err != nil {
									b.Error(err)
									return
								}
								if err := l.unlock(ctx); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s") // acquire+release pairs per second
				})
			}
		}
	}
}

// BenchmarkWakeUp: how long after a release returns its waiter's
// acquisition returns, next to one round trip (a read) to the same
// server. Reported as medians: wake-p50-ns and rtt-p50-ns.
func BenchmarkWakeUp(b *testing.B) {
	p := newPrefix(b)
	holder, waiter := newManager(b, p), newManager(b, p)
	cli := newClient(b)
	ctx := context.Background()
	var wakes, rtts []time.Duration
	for b.Loop() {
		_, err := holder.Acquire(ctx, "w", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.NoError(b, err)
		queued := make(chan struct{})
		var once sync.Once
		done := make(chan time.Time, 1)
		go func() {
			_, err := waiter.Acquire(ctx, "w", "waiter", lockmgr.Exclusive, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever,
				OnWait: func(lockmgr.LockInfo, time.Duration) { once.Do(func() { close(queued) }) }})
			if err != nil {
				b.Error(err)
			}
			done <- time.Now()
		}()
		<-queued
		time.Sleep(time.Millisecond) // the waiter's watch is in place
		t0 := time.Now()
		_, err = cli.Get(ctx, "rtt-probe")
		require.NoError(b, err)
		rtts = append(rtts, time.Since(t0))
		require.NoError(b, holder.Release("w", "holder"))
		released := time.Now()
		wakes = append(wakes, (<-done).Sub(released))
		require.NoError(b, waiter.Release("w", "waiter"))
	}
	b.ReportMetric(float64(median(wakes)), "wake-p50-ns") // release returned -> waiter's Acquire returned
	b.ReportMetric(float64(median(rtts)), "rtt-p50-ns")   // one Get
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
