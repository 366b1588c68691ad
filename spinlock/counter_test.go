package spinlock_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

var modes = []spinlock.Mode{spinlock.PIDTID, spinlock.Token}

// identityFor returns what one acquisition of a lock in mode uses: the
// given holder in PIDTID mode, a fresh token in Token mode.
func identityFor(mode spinlock.Mode, holder spinlock.Identity) spinlock.Identity {
	if mode == spinlock.Token {
		return spinlock.NewToken()
	}
	return holder
}

// Helper processes increment a plain counter in the segment under the lock;
// not one increment may be lost.
func TestCounterAcrossProcesses(t *testing.T) {
	t.Parallel()
	procs, iters := 4, 20000
	if long() {
		iters = 1000000
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			seg, path := newSegment(t)
			sc, err := scratchOf(seg)
			require.NoError(t, err)
			l, err := spinlock.Open(seg, 0, mode)
			require.NoError(t, err)

			children := make([]*testproc.Child, procs)
			for i := range children {
				children[i] = testproc.Start(t, "counter", path, mode.String(), strconv.Itoa(iters))
			}
			waitFor(t, func() bool { return sc.atomic(offReady).Load() == uint64(procs) }, "%d helpers to be ready", procs)
			sc.atomic(offGo).Store(1)
			for _, c := range children {
				c.WaitOK(t)
			}

			want := uint64(procs * iters)
			if got := sc.atomic(offCounter).Load(); got != want {
				t.Fatalf("counter: got %d, want %d", got, want)
			}
			if _, held := l.Owner(); held {
				t.Fatalf("lock still held after every helper exited: %+v", stateOf(l.Slot()))
			}
			if mode == spinlock.PIDTID {
				if got := l.Generation(); got != want {
					t.Fatalf("generation: got %d, want one per release, %d", got, want)
				}
			}
		})
	}
}

func counterHelper(args []string) int {
	mode := parseMode(args[1])
	iters, _ := strconv.Atoi(args[2])
	seg, l, sc, err := openLock(args[0], mode)
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	counter := sc.plain(offCounter)
	holder := spinlock.NewHolder() // this process's one holder (PIDTID mode)
	sc.atomic(offReady).Add(1)
	if err := waitWord(sc.atomic(offGo), 1); err != nil {
		return fail("%v", err)
	}
	// Every other hold through the Locker, whose Unlock has a copy of the
	// release's pid/tid path (guard.go); it panics on an error, which
	// fails the helper all the same.
	lk := l.Locker(identityFor(mode, holder))
	var g spinlock.Guard
	for i := range iters {
		if i%2 == 1 {
			lk.Lock()
			*counter++
			lk.Unlock()
			continue
		}
		if err := g.Lock(l, identityFor(mode, holder)); err != nil {
			return fail("lock: %v", err)
		}
		*counter++
		if err := g.Release(); err != nil {
			return fail("release: %v", err)
		}
	}
	return 0
}

// Goroutines, each with its own holder or its own tokens, increment a plain
// counter under the lock, over a slot in process memory and over one in a
// segment; run with -race to check the ordering too. The race detector does
// not see atomics on a segment's words (they are outside Go's memory), so
// there it sees the lock's happens-before only through the lock's
// annotations (internal/racesync); without them -race reports the counter.
func TestCounterAcrossGoroutines(t *testing.T) {
	t.Parallel()
	goroutines, iters := 8, 20000
	if long() {
		iters = 500000
	}
	slots := []struct {
		name string
		open func(t *testing.T, mode spinlock.Mode) *spinlock.Lock
	}{
		{"process", func(t *testing.T, mode spinlock.Mode) *spinlock.Lock {
			return spinlock.New(spinlock.NewInProcessState(), mode)
		}},
		{"segment", func(t *testing.T, mode spinlock.Mode) *spinlock.Lock {
			seg, _ := newSegment(t)
			l, err := spinlock.Open(seg, 0, mode)
			require.NoError(t, err)
			return l
		}},
	}
	for _, slot := range slots {
		for _, mode := range modes {
			t.Run(slot.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				l := slot.open(t, mode)
				var counter int
				var wg sync.WaitGroup
				start := make(chan struct{}) // all at once: each goroutine alone would finish within its time slice
				for range goroutines {
					wg.Go(func() {
						holder := spinlock.NewHolder()
						var g spinlock.Guard
						<-start
						for range iters {
							if err := g.Lock(l, identityFor(mode, holder)); err != nil {
								t.Error(err)
								return
							}
							counter++
							if err := g.Release(); err != nil {
								t.Error(err)
								return
							}
						}
					})
				}
				close(start)
				wg.Wait()
				if counter != goroutines*iters {
					t.Fatalf("counter: got %d, want %d", counter, goroutines*iters)
				}
				if mode == spinlock.PIDTID {
					require.EqualValues(t, goroutines*iters, l.Generation())
				}
				require.Equal(t, slotState{Token: l.Slot().Token.Load()}, stateOf(l.Slot()), "lock must be free and clean")
			})
		}
	}
}

// The annotations hide no real race: in a child process (this test binary,
// so built with -race as well), two goroutines increment a plain counter,
// each under a different lock of one segment, and the race detector must
// report it. Only a race build can tell.
func TestRaceDetectorStillSeesRaces(t *testing.T) {
	if !testproc.Race {
		t.Skip("needs the race detector (go test -race)")
	}
	t.Parallel()
	_, path := newSegment(t)
	out, err := testproc.Command("race-two-locks", path).CombinedOutput()
	require.Error(t, err, "the child must fail: a race build exits with status 66 after a report\n%s", out)
	require.Contains(t, string(out), "WARNING: DATA RACE", "the child's output")
	require.Contains(t, string(out), "raceTwoLocksHelper", "the child's output: the race must be the counter's")
}

// raceTwoLocksHelper races on purpose: two goroutines increment one plain
// counter under two different locks (slots 0 and 1). PATH.
func raceTwoLocksHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	var locks [2]*spinlock.Lock
	for i := range locks {
		if locks[i], err = spinlock.Open(seg, i, spinlock.PIDTID); err != nil {
			return fail("%v", err)
		}
	}
	counter := 0
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, l := range locks {
		wg.Go(func() {
			me := spinlock.NewHolder()
			<-start
			for range 1000 {
				g, err := l.Lock(me)
				if err != nil {
					panic(err)
				}
				counter++
				if err := g.Release(); err != nil {
					panic(err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	fmt.Println("counter", counter) // less than 2000 if increments were lost
	return 0
}

// A chain of processes hands one Token lock on without ever freeing it: each
// adopts the token the previous one left, increments, releases, locks again
// with a new token, increments and exits holding the lock. The parent adopts
// the last token and releases.
func TestTokenHandoffAcrossProcesses(t *testing.T) {
	t.Parallel()
	chain := 5
	if long() {
		chain = 50
	}
	seg, path := newSegment(t)
	sc, err := scratchOf(seg)
	require.NoError(t, err)
	l, err := spinlock.Open(seg, 0, spinlock.Token)
	require.NoError(t, err)

	var tok uint64
	for i := range chain {
		c := testproc.Start(t, "handoff", path, strconv.FormatUint(tok, 10))
		out := c.WaitOK(t)
		next, err := strconv.ParseUint(strings.TrimSpace(c.WaitLine(t, "token ")), 10, 64)
		require.NoError(t, err, "helper %d output:\n%s", i, out)
		require.NotEqual(t, tok, next, "each process must lock with a new token")
		if got := sc.atomic(offToken).Load(); got != next {
			t.Fatalf("token in the segment: got %#x, want %#x as printed", got, next)
		}
		owner, held := l.Owner()
		require.True(t, held, "the lock must stay held after its holder exited")
		require.Equal(t, spinlock.Identity{Token: next}, owner)

		// Nobody without the token gets in or out.
		stranger := spinlock.NewToken()
		_, err = l.TryLock(stranger)
		require.ErrorIs(t, err, spinlock.ErrWouldBlock)
		require.ErrorIs(t, l.Unlock(stranger), spinlock.ErrNotOwner)
		_, err = l.Reclaim(stranger)
		require.ErrorIs(t, err, spinlock.ErrWouldBlock, "a token holder has no process to die")
		tok = next
	}

	var g spinlock.Guard
	require.NoError(t, g.Adopt(l, spinlock.Identity{Token: tok}))
	*sc.plain(offCounter)++
	require.NoError(t, g.Release())
	if got, want := sc.atomic(offCounter).Load(), uint64(2*chain); got != want {
		t.Fatalf("counter: got %d, want %d", got, want)
	}
	require.Equal(t, slotState{}, stateOf(l.Slot()), "lock must be free")
}

func handoffHelper(args []string) int {
	in, _ := strconv.ParseUint(args[1], 10, 64)
	seg, l, sc, err := openLock(args[0], spinlock.Token)
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	counter := sc.plain(offCounter)
	if in != 0 {
		var g spinlock.Guard
		if err := g.Adopt(l, spinlock.Identity{Token: in}); err != nil {
			return fail("adopt %#x: %v", in, err)
		}
		*counter++
		if err := g.Release(); err != nil {
			return fail("release: %v", err)
		}
	}
	var g spinlock.Guard
	if err := g.TryLock(l, spinlock.NewToken()); err != nil {
		return fail("lock: %v", err)
	}
	*counter++
	tok := g.Identity().Token
	sc.atomic(offToken).Store(tok)
	g.Detach() // exit holding the lock: the next process takes it over
	fmt.Println("token", tok)
	return 0
}
