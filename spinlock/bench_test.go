package spinlock_test

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// cacheLine pads hot words so that no two benchmarks' words, and no word
// and its neighbours, share a line.
const cacheLine = 64

type paddedSlot struct {
	_    [cacheLine]byte
	slot layout.OwnerSlot
	_    [cacheLine]byte
}

type paddedMutex struct {
	_  [cacheLine]byte
	mu sync.Mutex
	_  [cacheLine]byte
}

type paddedWord struct {
	_ [cacheLine]byte
	v atomic.Uint32
	_ [cacheLine]byte
}

type paddedCounter struct {
	_ [cacheLine]byte
	n uint64
	_ [cacheLine]byte
}

func nsPerOp(b *testing.B) float64 { return float64(b.Elapsed().Nanoseconds()) / float64(b.N) }

// floorNs is the ns/op of BenchmarkUncontended/floor in this run (0 if it
// did not run): the least any lock can cost, one CAS and one store.
var floorNs float64

func reportFloor(b *testing.B) {
	if floorNs > 0 {
		// x-floor: this lock's ns/op divided by the floor's (a bare CAS and store).
		b.ReportMetric(nsPerOp(b)/floorNs, "x-floor")
	}
}

// One goroutine locks and unlocks over and over: the cost of the fast path.
func BenchmarkUncontended(b *testing.B) {
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		var w paddedWord
		for b.Loop() {
			if !w.v.CompareAndSwap(0, 1) {
				b.Fatal("CAS of a free word failed")
			}
			w.v.Store(0)
		}
		floorNs = nsPerOp(b)
	})
	b.Run("pidtid-guard", func(b *testing.B) {
		b.ReportAllocs()
		var p paddedSlot
		l := spinlock.New(&p.slot, spinlock.PIDTID)
		me := spinlock.NewHolder()
		var g spinlock.Guard // on the stack
		for b.Loop() {
			if err := g.Lock(l, me); err != nil {
				b.Fatal(err)
			}
			if err := g.Release(); err != nil {
				b.Fatal(err)
			}
		}
		reportFloor(b)
	})
	b.Run("pidtid-locker", func(b *testing.B) {
		b.ReportAllocs()
		var p paddedSlot
		mu := spinlock.New(&p.slot, spinlock.PIDTID).Locker(spinlock.NewHolder())
		for b.Loop() {
			mu.Lock()
			mu.Unlock()
		}
		reportFloor(b)
	})
	b.Run("token-guard", func(b *testing.B) {
		b.ReportAllocs()
		var p paddedSlot
		l := spinlock.New(&p.slot, spinlock.Token)
		var g spinlock.Guard
		for b.Loop() {
			if err := g.Lock(l, spinlock.NewToken()); err != nil { // a fresh token per hold
				b.Fatal(err)
			}
			if err := g.Release(); err != nil {
				b.Fatal(err)
			}
		}
		reportFloor(b)
	})
	b.Run("sync.Mutex", func(b *testing.B) {
		b.ReportAllocs()
		var m paddedMutex
		for b.Loop() {
			m.mu.Lock()
			m.mu.Unlock() //nolint:staticcheck // an empty critical section is the point
		}
		reportFloor(b)
	})
	b.Run("fcntl-ofd", func(b *testing.B) {
		b.ReportAllocs()
		f, err := os.CreateTemp("/dev/shm", "shmlock-bench-ofd-*")
		require.NoError(b, err)
		b.Cleanup(func() { _ = f.Close(); _ = os.Remove(f.Name()) })
		fd := f.Fd()
		lock := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 1}
		unlock := lock
		unlock.Type = unix.F_UNLCK
		for b.Loop() {
			if err := unix.FcntlFlock(fd, unix.F_OFD_SETLKW, &lock); err != nil {
				b.Fatal(err)
			}
			if err := unix.FcntlFlock(fd, unix.F_OFD_SETLK, &unlock); err != nil {
				b.Fatal(err)
			}
		}
		reportFloor(b)
	})
}

// Goroutines (GOMAXPROCS of them) share one lock and a counter.
func BenchmarkContended(b *testing.B) {
	for _, mode := range modes {
		b.Run("spinlock-"+mode.String(), func(b *testing.B) {
			b.ReportAllocs()
			var p paddedSlot
			var counter paddedCounter
			l := spinlock.New(&p.slot, mode)
			b.RunParallel(func(pb *testing.PB) {
				holder := spinlock.NewHolder()
				var g spinlock.Guard
				for pb.Next() {
					if err := g.Lock(l, identityFor(mode, holder)); err != nil {
						b.Error(err)
						return
					}
					counter.n++
					if err := g.Release(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	b.Run("sync.Mutex", func(b *testing.B) {
		b.ReportAllocs()
		var m paddedMutex
		var counter paddedCounter
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.mu.Lock()
				counter.n++
				m.mu.Unlock()
			}
		})
	})
}

// Two processes increment a counter in the segment under one lock; the
// reference is the same work by two goroutines of one process.
func BenchmarkCrossProcess(b *testing.B) {
	b.Run("counter-2proc", func(b *testing.B) {
		seg, path := newSegment(b)
		sc, err := scratchOf(seg)
		require.NoError(b, err)
		// The helpers do the b.N operations between them, so the loop is
		// theirs: b.Loop cannot drive work in other processes.
		half := b.N / 2
		children := []*testproc.Child{
			testproc.Start(b, "counter", path, spinlock.PIDTID.String(), strconv.Itoa(half)),
			testproc.Start(b, "counter", path, spinlock.PIDTID.String(), strconv.Itoa(b.N-half)),
		}
		waitFor(b, func() bool { return sc.atomic(offReady).Load() == 2 }, "helpers to be ready")
		b.ResetTimer()
		sc.atomic(offGo).Store(1)
		for _, c := range children {
			c.WaitOK(b)
		}
		b.StopTimer()
		require.EqualValues(b, b.N, sc.atomic(offCounter).Load())
		// ops/s: lock-increment-unlock rounds per second, both processes together.
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
	b.Run("counter-2goroutines", func(b *testing.B) {
		var p paddedSlot
		var counter paddedCounter
		l := spinlock.New(&p.slot, spinlock.PIDTID)
		half := b.N / 2
		var wg sync.WaitGroup
		for _, n := range []int{half, b.N - half} {
			wg.Go(func() {
				me := spinlock.NewHolder()
				var g spinlock.Guard
				for range n {
					if err := g.Lock(l, me); err != nil {
						b.Error(err)
						return
					}
					counter.n++
					if err := g.Release(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		require.EqualValues(b, b.N, counter.n)
		// ops/s: lock-increment-unlock rounds per second, both goroutines together.
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})

	b.Run("handoff-2proc", func(b *testing.B) {
		seg, path := newSegment(b)
		sc, err := scratchOf(seg)
		require.NoError(b, err)
		p := newPingPong(b, seg, sc)
		c := testproc.Start(b, "bench-pingpong", path)
		for b.Loop() {
			p.serve(b)
		}
		p.stop(b)
		c.WaitOK(b)
		// ns/handoff: time for a held lock to pass to a waiter in the other process and back, per pass.
		b.ReportMetric(nsPerOp(b)/2, "ns/handoff")
	})
	b.Run("handoff-2goroutines", func(b *testing.B) {
		seg, _ := newSegment(b)
		sc, err := scratchOf(seg)
		require.NoError(b, err)
		p := newPingPong(b, seg, sc)
		done := make(chan error, 1)
		go func() { done <- p.returner() }()
		for b.Loop() {
			p.serve(b)
		}
		p.stop(b)
		require.NoError(b, <-done)
		// ns/handoff: time for a held lock to pass to a waiter in the other goroutine and back, per pass.
		b.ReportMetric(nsPerOp(b)/2, "ns/handoff")
	})
	b.Run("handoff-chan", func(b *testing.B) {
		ping, pong := make(chan struct{}), make(chan struct{})
		go func() {
			for range ping {
				pong <- struct{}{}
			}
		}()
		for b.Loop() {
			ping <- struct{}{}
			<-pong
		}
		close(ping)
		// ns/handoff: one pass over an unbuffered channel, the goroutine reference.
		b.ReportMetric(nsPerOp(b)/2, "ns/handoff")
	})
}

// pingPong passes control back and forth with two Token locks that each
// side keeps held and the other side releases, so every pass wakes a
// waiter: the server (the benchmark) unlocks "ret" and then waits in Lock on
// "serve"; the returner, woken in its Lock on "ret", unlocks "serve" with
// the server's token. Each side publishes the token of the lock it just
// took before it lets the other side run, so the other can unlock it.
type pingPong struct {
	serveLock, retLock *spinlock.Lock // owner slots 0 and 1
	serveTok, retTok   *atomic.Uint64 // their current tokens
	stopFlag           *atomic.Uint64
}

func openPingPong(seg *shm.Segment, sc scratch) (*pingPong, error) {
	s0, err := seg.Slot(0)
	if err != nil {
		return nil, err
	}
	s1, err := seg.Slot(1)
	if err != nil {
		return nil, err
	}
	return &pingPong{
		serveLock: spinlock.New(s0, spinlock.Token), retLock: spinlock.New(s1, spinlock.Token),
		serveTok: sc.atomic(offToken), retTok: sc.atomic(offToken2), stopFlag: sc.atomic(offStop),
	}, nil
}

func newPingPong(b *testing.B, seg *shm.Segment, sc scratch) *pingPong {
	p, err := openPingPong(seg, sc)
	require.NoError(b, err)
	for _, side := range []struct {
		l   *spinlock.Lock
		tok *atomic.Uint64
	}{{p.serveLock, p.serveTok}, {p.retLock, p.retTok}} {
		g, err := side.l.TryLock(spinlock.NewToken())
		require.NoError(b, err)
		side.tok.Store(g.Identity().Token)
		g.Detach()
	}
	return p
}

// serve is one round trip: hand control over and wait for it to come back.
func (p *pingPong) serve(b *testing.B) {
	if err := p.retLock.Unlock(spinlock.Identity{Token: p.retTok.Load()}); err != nil {
		b.Fatal(err)
	}
	var g spinlock.Guard
	if err := g.TryLockFor(p.serveLock, spinlock.NewToken(), testTimeout); err != nil {
		b.Fatal(err)
	}
	p.serveTok.Store(g.Identity().Token)
	g.Detach()
}

// stop lets the returner go for good.
func (p *pingPong) stop(b *testing.B) {
	p.stopFlag.Store(1)
	require.NoError(b, p.retLock.Unlock(spinlock.Identity{Token: p.retTok.Load()}))
}

// returner is the other side: woken in Lock on ret, it gives serve back.
func (p *pingPong) returner() error {
	for {
		var g spinlock.Guard
		if err := g.TryLockFor(p.retLock, spinlock.NewToken(), testTimeout); err != nil {
			return err
		}
		if p.stopFlag.Load() != 0 {
			return g.Release()
		}
		p.retTok.Store(g.Identity().Token)
		g.Detach()
		if err := p.serveLock.Unlock(spinlock.Identity{Token: p.serveTok.Load()}); err != nil {
			return err
		}
	}
}

func benchPingPongHelper(args []string) int {
	seg, _, sc, err := openLock(args[0], spinlock.Token)
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	p, err := openPingPong(seg, sc)
	if err != nil {
		return fail("%v", err)
	}
	if err := p.returner(); err != nil {
		return fail("%v", err)
	}
	return 0
}

// How much of a core a waiter uses while blocked on a held lock: the
// waiting goroutine is locked to its thread and the thread's CPU time is
// measured around the wait. sync.Mutex is the reference.
func BenchmarkBlockedWaiterCPU(b *testing.B) {
	const blocked = 20 * time.Millisecond
	run := func(b *testing.B, holder, waiter sync.Locker, sleeping func() bool) {
		var cpu, wall time.Duration
		for b.Loop() {
			holder.Lock()
			type sample struct {
				cpu, wall time.Duration
				err       error
			}
			done := make(chan sample, 1)
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread() // or the thread would exit with the goroutine
				c0, err := testproc.CPUTime(unix.RUSAGE_THREAD)
				start := time.Now()
				waiter.Lock()
				w := time.Since(start)
				c1, err2 := testproc.CPUTime(unix.RUSAGE_THREAD)
				waiter.Unlock()
				if err == nil {
					err = err2
				}
				done <- sample{c1 - c0, w, err}
			}()
			waitFor(b, sleeping, "the waiter to block")
			time.Sleep(blocked)
			holder.Unlock()
			s := <-done
			require.NoError(b, s.err)
			cpu += s.cpu
			wall += s.wall
		}
		// cpu%: CPU time of the waiter's thread as a percentage of the time it was blocked.
		b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu%")
	}
	b.Run("spinlock", func(b *testing.B) {
		l := spinlock.New(spinlock.NewInProcessState(), spinlock.PIDTID)
		run(b, l.Locker(spinlock.NewHolder()), l.Locker(spinlock.NewHolder()),
			func() bool { return l.Slot().Pad.Load() == 1 })
	})
	b.Run("sync.Mutex", func(b *testing.B) {
		var mu sync.Mutex
		run(b, &mu, &mu, func() bool {
			// A sync.Mutex does not say when a waiter parks; give it time to.
			time.Sleep(time.Millisecond)
			return true
		})
	})
}
