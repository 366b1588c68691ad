package spinlock

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/shmlock/shmlock/internal/futex"
	"github.com/shmlock/shmlock/internal/mono"
	"github.com/shmlock/shmlock/internal/racesync"
	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/internal/spin"
	"github.com/shmlock/shmlock/layout"
)

// Waiting: spin on the lock word for a while (the holder of a short
// critical section on another core is usually about to release), let other
// threads of this CPU run (sched_yield), then this process's goroutines,
// and only then sleep on the futex.
// A sleeper wakes at least every livenessInterval to check that the holder
// still lives, which bounds how long a dead holder's lock stays taken.
//
// Why a sched_yield before sleeping: a sleeper costs the holder's next
// release a futex wake, a system call (about 1.4 µs on the benchmark VM),
// and while the releaser is in it the lock is free: the woken waiter takes
// it, the releaser spins, catches the next release, and the two processes
// end up handing the lock back and forth at every acquisition, each handoff
// a cache-line transfer. One yield, after which the lock is often free,
// keeps most waiters from sleeping at all: counter throughput with 2
// processes went from 0.55-0.66x the best non-robust peer to 1.12-1.26x
// (4 processes: about 1.0x to 1.3-1.4x; 8: 1.5x to 1.6x), side by side in
// one run. More yields, or fewer loads, win more there but slow
// pingpong_retry, whose turn passes when a waiter's loads catch the
// holder's brief release or when its sleep makes the holder stop for the
// wake: with 300 loads and one yield it stays near pthread's robust
// mutex's rate (0.77-1.04x, against 0.93-1.15x without the yield); with
// 200 loads it fell to 0.71x and with 3 yields to 0.79x.
//
// Why a waiter first keeps off the lock for keepOff (see internal/spin):
// a waiter that polls at once catches the holder's next brief release, and
// with short critical sections the two processes then hand the lock back
// and forth every few acquisitions, so throughput falls to that of the
// cache-line transfers. How often depends on where the host places the
// two CPUs: while a cache-line round trip between them took 100-220 ns
// instead of the usual 430-490 ns (scripts/linert, run between benchmarks),
// counter throughput with 2 processes fell to 0.36-0.53x Boost's mutex.
// Keeping off for 250 ns, without touching the slot, lets the holder run a
// series: 0.89-1.09x in those placements. In the usual placement, side by
// side, counter went 1.28/1.49/1.49x -> 1.20/1.54/1.58x Boost at 2/4/8
// processes and pingpong_retry 0.74x -> 0.85x pthread's robust mutex in
// one matrix; a later one on a quiet machine gave 1.22/1.51/1.60x and
// 1.15x, and runs of 250 ns against none with the placement probed between
// them gave pingpong_retry medians of 1.02-1.09x against 0.95-0.98x.
// keepOff is the knob between the two kinds of cell: until the contention
// counters stopped timing spun waits (a clock read before KeepOff, and
// KeepOff itself read the wall clock too), the real keep-off was about
// 300-330 ns; back at 250 ns, alternated runs gave pingpong_retry 1.13-1.16x
// and counter 0.83-0.93x at 4 and 8 processes (still about twice Boost's
// mutex there), and 330 ns gave 0.95x and 0.96x. Handoff is the cell we
// trail pthread in; counter leads with room to spare.
//
// Every knob here moves along one trade: a turn passed inside the lock
// (pingpong_retry) needs the releaser to stand back, a series of holds
// needs it not to, and the lock cannot tell the two apart. Measured side
// by side on the far host (bench/matrix -baseline, 10 rounds each; p of
// the sign test 0.002-0.02 where a cell moved in 9 or 10 of them), and not
// kept for that reason:
//   - a waiter that says it is polling (a bit it sets in Token, bit 63,
//     which no generation reaches) and a release that finds the bit and
//     stands back 50 ns once the lock is free: pingpong_retry +12-15 %,
//     counter -0-9 % at 2/4/8 processes; in libshmlock +24 % and
//     -6-19 %. Standing back 150 ns: +19 %, counter -5-10 %; announcing
//     only after 8 or 24 loads kept the cost and lost the gain, announcing
//     at every load cost counter 12-20 %.
//   - a release that pushes the slot's line out to the shared cache
//     (CLDEMOTE, which this host's CPU has), measured in libshmlock: after
//     every release, pingpong_retry 1.90x (1.25M, above pthread's robust
//     mutex) and counter 0.22x/0.19x at 2/8 processes, since the holder's
//     next lock must fetch the line back; only after a waiter said it was
//     hungry (bit 63 of Token, set by the waiter once after 32 polls):
//     +20 %, counter -7 %/-4 %; after 128 polls: +14 %, -4 %/-13 %; every
//     32 polls from the first: +34 %, -25 %/-37 %. The same trade again.
//     (The lock manager, demoting its entry's line at each entry unlock:
//     0.38-0.50x in every cell, uncontended too.)
//   - sleeping at once, as glibc's futex-only mutex does (no keep-off, no
//     loads, no yield; libshmlock, 8 rounds beside pthread's mutexes):
//     counter 0.32x/0.30x at 2/8 processes, pingpong_retry 0.99x (663k,
//     where pthread_mutex made 984k in the same rounds): a policy that
//     sleeps at once on a far-placed host is no way to pthread's point on
//     the curve either. Counted with perf (syscalls:sys_enter_futex, 600k
//     turns): glibc makes 1.2 futex calls a turn and its processes almost
//     never sleep (156 context switches): its turns pass while the
//     releaser is in the kernel for a wake, a stand-back of about a
//     microsecond, which is also what its counter pays. Ours sleeping at
//     once: 1.5 calls a turn, 4041 context switches; ours as it is: 0.15
//     futex calls and 0.1 sched_yields a turn.
//   - polls spaced out (5 PAUSEs, about 100 ns here, before each load; in
//     libshmlock): counter +20 % at 2 processes and -5 % at 8,
//     pingpong_retry -14 %.
//   - polls spaced by a random pause (0-3 or 0-7 PAUSEs after each load
//     that finds the lock held, from the first load or from the 64th), to
//     break any lockstep between a waiter's polls and the holder's cycle:
//     pingpong_retry, 14 alternated runs of each: acquisitions that fall
//     through to yields and sleeps 2-5x fewer, but 5-15 % fewer round
//     trips in the fast runs (medians 594k with none, 540k from the 64th
//     load, 475k from the first), and the slow runs no faster (320-340k for
//     every variant in the same rounds). In those slow runs the loads
//     before a waiter gets the lock are cheap (22-35 ns a load with the
//     keep-off, against 67-90 ns in fast runs) and it gets it after 8-255
//     of them rather than 1-7: it waits out a hold that writes nothing to
//     the slot, not a relocker's race; no variant of the waiter changed
//     that, and the runs turn slow and fast again with the host.
//   - (alternated shmctl bench runs, medians of 4) 50 loads instead of 300:
//     counter +6 % at 2 processes and +34 % at 8, pingpong_retry -15 %; 10
//     loads, or none: pingpong_retry -40-50 %. 1000 or 3000 loads: no more
//     pingpong_retry, counter down.
//
// Why sched_yields and not runtime.Gosched after the loads (there were 4
// Goscheds before the one sched_yield): in a process of one busy goroutine
// Gosched returns at once, after waking an idle runtime thread for nothing
// (a futex wake and a context switch on the other CPU, which may be
// running the holder; see lockmgr's entry.go). A goroutine of this process
// that holds the lock gets its turn before each sleep instead (wait).
// bench/matrix -baseline, far-placed host, 10 rounds, three times: pid/tid
// mode's counter at 8 processes 1.13x, 1.14x and 1.27x (7, 10 and 10 of 10
// rounds), at 4 1.07x/1.08x/1.00x, pingpong_retry 1.10x/1.08x/0.99x;
// token mode's counter at 8 0.98x/0.96x/0.92x (5, 1 and 3 of 10), the
// other cells within noise. The same change in the upgrade mutex's writers
// gained more (upgrade/wait.go).
const (
	keepOff          = 250 * time.Nanosecond // before the first load of a waiting acquisition
	spinLoads        = 300                   // loads of the lock word before yielding
	osYields         = 5                     // sched_yield rounds before sleeping (a runtime.Gosched before each sleep)
	livenessInterval = 50 * time.Millisecond // longest sleep between liveness checks
)

// outcome of an acquisition.
type outcome struct {
	reclaimed bool // the previous holder had died
	recursive bool // a nested lock by the holder that already held it
}

// acquire locks for id, waiting until deadline (zero: no limit) or until
// ctx is done. try means: do not wait at all.
func (l *Lock) acquire(ctx context.Context, id Identity, deadline time.Time, try bool) (outcome, error) {
	if !id.fits(l.mode) {
		return outcome{}, ErrBadIdentity
	}
	if err := ctx.Err(); err != nil {
		return outcome{}, err
	}
	if l.closed() {
		return outcome{}, l.closedErr()
	}
	if l.tryAcquire(id) {
		return outcome{}, nil
	}
	return l.acquireSlow(ctx, id, deadline, try)
}

// acquireSlow is kept out of acquire so that the fast path stays small.
//
// Whether the caller holds the lock already (a recursive lock, pid/tid
// mode) is asked of the handle's ours flag for the holder first, not of the slot: the
// slot's line is the contended one, and the CAS that just failed lost it
// to the holder, so reading PID and TID there cost every contended
// acquisition one more cache-line transfer, in the holder's way (shmctl
// bench counter, 2 processes, far placement: 16.2 -> 18.9M ops/s without
// the read, token mode 21.4M). A recursive lock through another handle of
// the same slot (the flags are per handle) is caught in the spin loop below,
// after the keep-off: the word it loads anyway is then the caller's PID.
func (l *Lock) acquireSlow(ctx context.Context, id Identity, deadline time.Time, try bool) (outcome, error) {
	if l.mode == PIDTID && (l.oursOf(id).held.Load() == id.TID || try) && l.heldBy(id) {
		return l.recurse()
	}
	if try {
		return outcome{}, ErrWouldBlock
	}
	start := spin.KeepOff(keepOff)
	for i := range spinLoads + osYields {
		w := l.word.Load()
		if w == 0 && l.tryAcquire(id) {
			if i < spinLoads {
				l.stats.RecordSpunWait() // not timed: see layout.LockStats
			} else {
				l.stats.RecordWait(time.Duration(mono.Now()-start), false)
			}
			return outcome{}, nil
		}
		if w == id.PID && l.mode == PIDTID && l.heldBy(id) {
			return l.recurse()
		}
		if i >= spinLoads {
			futex.Yield()
		}
	}
	o, err := l.wait(ctx, id, deadline)
	l.stats.RecordWait(time.Duration(mono.Now()-start), err != nil)
	return o, err
}

// recurse takes one more hold for the holder of the lock (pid/tid mode).
func (l *Lock) recurse() (outcome, error) {
	if r := l.slot.RecursionCount.Load(); r&layout.SlotRecursion == maxRecursion {
		return outcome{}, ErrRecursion
	}
	l.slot.RecursionCount.Add(1)
	return outcome{recursive: true}, nil
}

// wait is the waiting part of acquireSlow once spinning and yielding have
// not got the lock: sleep on the futex until the lock is free, its holder
// dead, or the caller gives up.
func (l *Lock) wait(ctx context.Context, id Identity, deadline time.Time) (outcome, error) {
	if ctx.Done() != nil {
		// A sleeper cannot watch a channel; cancellation wakes every
		// sleeper of this lock, and the others simply sleep again.
		stop := context.AfterFunc(ctx, func() { _, _ = futex.WakeAll(l.fword) })
		defer stop()
	}
	for {
		if l.closed() {
			l.passWake() // the wake it may have consumed goes on
			return outcome{}, l.closedErr()
		}
		if err := ctx.Err(); err != nil {
			l.passWake()
			return outcome{}, err
		}
		sleep := livenessInterval
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				l.passWake()
				return outcome{}, ErrTimeout
			}
			sleep = min(sleep, left)
		}
		seq, owner := l.sleepValue()
		if owner == 0 {
			if l.tryAcquire(id) {
				return outcome{}, nil
			}
			continue
		}
		runtime.Gosched() // the holder may be a goroutine of this process
		ticket := sleepers.Register(&l.slot.Pad)
		l.stats.AddSleep()
		err := futex.Wait(l.fword, seq, sleep)
		sleepers.Unregister(&l.slot.Pad, ticket)
		if l.word.Load() == 0 && l.tryAcquire(id) {
			return outcome{}, nil
		}
		if errors.Is(err, futex.ErrTimeout) && !l.closed() && l.reclaim(id, owner) {
			return outcome{reclaimed: true}, nil
		}
	}
}

// sleepValue reads the lock word: the owner, and the futex word's value
// that goes with it (its low half).
func (l *Lock) sleepValue() (seq uint32, owner uint64) {
	owner = l.word.Load()
	return uint32(owner), owner
}

// passWake is for a waiter that gives up: it may have consumed a wake
// meant to hand the lock on, so if the lock is free it wakes the next
// sleeper. If the lock is held, its release will.
func (l *Lock) passWake() {
	if l.word.Load() == 0 && l.slot.Pad.Load()&layout.PadSleepers != 0 {
		l.wakeOne()
	}
}

// reclaim takes the lock over from owner if owner is a dead process: one
// CAS, so of several waiters that find the same dead owner exactly one
// wins. The winner resets the recursion count and bumps the generation, as
// if the dead holder had released, and marks the slot inconsistent: every
// holder is told (Guard.Inconsistent) until one says it repaired the data
// (Guard.MarkConsistent).
func (l *Lock) reclaim(id Identity, owner uint64) bool {
	if l.mode != PIDTID || owner == 0 || l.alive(owner) {
		return false
	}
	if !l.slot.PID.CompareAndSwap(owner, id.PID) {
		return false
	}
	if racesync.Enabled { // the dead holder released nothing; earlier holders did
		racesync.Acquire(l.word)
	}
	l.slot.TID.Store(id.TID)
	l.slot.RecursionCount.Store(layout.SlotInconsistent)
	l.oursOf(id).set(id, l.slot.Token.Add(1))
	l.stats.AddReclaim()
	return true
}

// Reclaim takes the lock over for id if its holder is dead, without
// waiting; ErrWouldBlock if the lock is free or held by a live process.
// Waiting acquisitions do this by themselves; Reclaim is for tools that
// repair a segment (shmctl reclaim) and for callers that only ever TryLock.
func (l *Lock) Reclaim(id Identity) (*Guard, error) {
	if !id.fits(l.mode) {
		return nil, ErrBadIdentity
	}
	if l.closed() {
		return nil, l.closedErr()
	}
	if !l.reclaim(id, l.word.Load()) {
		return nil, ErrWouldBlock
	}
	g := &Guard{lock: l, id: id, reclaimed: true}
	return g, nil
}
