package coro_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmlock/shmlock/coro"
)

// The storm's size: enough goroutines that the queue is long, and waits
// short enough that many deadlines fire while queued or just as the lock
// is handed over.
const (
	stormGoroutines = 2000
	stormRounds     = 3
	stormLoops      = 4
	stormMaxWait    = 50 * time.Millisecond // drawn log-uniformly down to ~5µs, and 0
)

// Ways a storm goroutine bounds its wait.
const (
	waitForever = iota // context.Background: must get the lock
	waitDone           // a context already cancelled: must fail at once
	waitTimeout        // a deadline 0..stormMaxWait away
	waitCancel         // a cancel func called 0..stormMaxWait later
	waitAtGrant        // cancelled by the Unlock that hands it the mutex
	waitModes
)

// TestStorm: thousands of goroutines lock (as goroutine or loop waiters,
// or by TryLock), hold briefly, unlock, and are cancelled at random
// moments. Checked: mutual exclusion; FIFO among the waiters that were
// not cancelled (grants, ordered by epoch, carry increasing queue
// tickets); every hold unlocked exactly once; the mutex ends free with an
// empty queue; no goroutine is left (TestMain).
func TestStorm(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	var (
		m         coro.Mutex
		inside    atomic.Int32 // holders in the critical section
		unlocks   atomic.Int64
		cancelled [waitModes]atomic.Int64
		mu        sync.Mutex
		grants    []stormGrant
	)
	coro.SetAtGrantHook(&m)
	loops := make([]*coro.Loop, stormLoops)
	for i := range loops {
		loops[i] = coro.NewLoop()
	}

	critical := func(g coro.Guard, ticket uint64, rng *rand.Rand) {
		if n := inside.Add(1); n != 1 {
			t.Errorf("%d holders at once, want 1", n)
		}
		if rng.IntN(4) == 0 {
			runtime.Gosched()
		}
		inside.Add(-1)
		mu.Lock()
		grants = append(grants, stormGrant{g.Epoch(), ticket})
		mu.Unlock()
		if err := g.Unlock(); err != nil {
			t.Errorf("Unlock: got %v, want nil", err)
			return
		}
		unlocks.Add(1)
		if rng.IntN(8) == 0 {
			if err := g.Unlock(); !errors.Is(err, coro.ErrNotOwner) {
				t.Errorf("second Unlock: got %v, want ErrNotOwner", err)
			}
		}
	}
	failed := func(mode int, err error) {
		if mode == waitForever || !isCtxErr(err) {
			t.Errorf("lock with wait mode %d: got %v", mode, err)
		}
		cancelled[mode].Add(1)
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range stormGoroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			<-start
			for range stormRounds {
				mode := rng.IntN(waitModes)
				ctx, cancel := stormContext(mode, rng)
				var atGrant func()
				if mode == waitAtGrant {
					atGrant = cancel // at once, under the queue lock
					if rng.IntN(2) == 0 {
						atGrant = func() { go cancel() } // racing with the wake-up
					}
				}
				switch k := rng.IntN(16); {
				case k == 0:
					if g, ok := m.TryLock(); ok {
						critical(g, 0, rng)
					}
				case k < 6: // on a loop; rng is this goroutine's, which waits
					done := make(chan struct{})
					err := coro.LockOnTicket(&m, ctx, loops[rng.IntN(stormLoops)], atGrant, func(g coro.Guard, ticket uint64, err error) {
						if err != nil {
							failed(mode, err)
						} else {
							critical(g, ticket, rng)
						}
						close(done)
					})
					if err != nil {
						t.Errorf("LockOn: got %v, want nil", err)
						close(done)
					}
					<-done
				case k < 9: // the public Lock, fast path included; no ticket
					if g, err := m.Lock(ctx); err != nil {
						failed(mode, err)
					} else {
						critical(g, 0, rng)
					}
				default:
					if g, ticket, err := coro.LockTicket(&m, ctx, atGrant); err != nil {
						failed(mode, err)
					} else {
						critical(g, ticket, rng)
					}
				}
				cancel()
			}
		})
	}
	close(start)
	wg.Wait()
	for _, l := range loops {
		closeLoop(t, l)
	}

	mustFree(t, &m)
	if int64(len(grants)) != unlocks.Load() {
		t.Fatalf("%d holds, %d unlocks", len(grants), unlocks.Load())
	}
	slices.SortFunc(grants, func(a, b stormGrant) int { return cmpUint(a.epoch, b.epoch) })
	var last stormGrant
	queued := 0
	for i, g := range grants {
		if i > 0 && g.epoch == grants[i-1].epoch {
			t.Fatalf("two holds of epoch %d", g.epoch)
		}
		if g.ticket == 0 {
			continue
		}
		if g.ticket <= last.ticket {
			t.Fatalf("FIFO: ticket %d got epoch %d after ticket %d got epoch %d", g.ticket, g.epoch, last.ticket, last.epoch)
		}
		last = g
		queued++
	}
	// Epochs count every hold, including those handed to a waiter whose
	// context won before it resumed (and which passed them on).
	passedOn := int(grants[len(grants)-1].epoch) + 1 - len(grants)
	t.Logf("%d holds, %d of them by queued waiters, %d passed on by cancelled waiters; cancelled: done %d, timeout %d, cancel %d, at grant %d",
		len(grants), queued, passedOn, cancelled[waitDone].Load(), cancelled[waitTimeout].Load(), cancelled[waitCancel].Load(), cancelled[waitAtGrant].Load())
}

type stormGrant struct{ epoch, ticket uint64 }

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func stormContext(mode int, rng *rand.Rand) (context.Context, context.CancelFunc) {
	d := time.Duration(rng.Int64N(int64(stormMaxWait>>rng.IntN(14)) + 1))
	switch mode {
	case waitDone:
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, cancel
	case waitTimeout:
		return context.WithTimeout(context.Background(), d)
	case waitAtGrant:
		return context.WithCancel(context.Background())
	case waitCancel:
		ctx, cancel := context.WithCancel(context.Background())
		timer := time.AfterFunc(d, cancel)
		return ctx, func() { timer.Stop(); cancel() }
	}
	return context.Background(), func() {}
}
