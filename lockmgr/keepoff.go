package lockmgr

import (
	"sync/atomic"
	"time"
)

// keepOff is how long a waiter whose attempt failed stays off the entry
// before it watches the gate again (it spins on the clock without touching
// the entry; a keep-off is at most maxKeepOff, and the waiter lets the
// process's other goroutines run before it sleeps, see Manager.wait).
//
// Why: a hold's end moves the gate, and a waiter that watches it closely
// attempts at once, taking the entry's lock and reading its lines; the
// holder, which meanwhile has often taken the resource again, then finds
// those lines gone at its next acquisition and release. Behind a holder
// that acquires and releases in a loop, every one of its holds paid for a
// waiter's failed attempt. Kept off, a waiter lets the holder run a series
// of holds undisturbed, and then attempts at some point of the holder's
// cycle, where the resource is free about as often as it is held.
//
// How long: keepOffAttempts times what the waiter's failed attempts cost,
// between minKeepOff and maxKeepOff. An attempt's cost is mostly the
// entry's cache lines moving between CPUs (and the wait for the entry's
// lock, whose holder moves them too), which is what the waiter's pokes
// take from the holder; staying off for keepOffAttempts of them bounds
// each waiter's share of the entry's traffic. That cost depends on where
// the host puts the CPUs: a failed attempt took 0.8-0.9 us where a cache
// line's round trip between the 2 vCPUs took about 200 ns (scripts/linert),
// and the fixed 1 us keep-off that was right where it took 55-70 ns let
// the waiters take most of the entry there. On that machine (shmctl bench
// medians of 5 alternated rounds, 2/4/8 processes) this took counter from
// 2.7/2.1/2.2M to 3.3/3.1/3.1M lock+unlock pairs/s and rw90 from
// 1.5/1.6/1.5M to 2.6/3.0/2.5M; a cap of 16 us gained a little more, 4 us
// about half as much. minKeepOff is the fixed keep-off of before, where an
// attempt is cheap: on the near host it had taken counter from 4.0-7.9M to
// 5.7-9.0M and rw90 from 3.1-7.3M to 4.5-8.4M (2 to 8 processes). The
// waiter spins rather than giving its CPU away: sched_yield until the time
// passed measured no better, and at 8 processes the yields switched
// between waiters.
//
// What it costs: a handoff to a waiter that needs the resource now (a
// turn passed inside the lock: shmctl bench's pingpong_retry) takes about
// a keep-off or two instead of a few hundred nanoseconds: on the same
// machine 100k -> 30k round trips/s (the fixed 1 us had taken it from
// 684k on the other). Like sync.Mutex's normal mode and glibc's mutexes,
// the lock manager favours a contended resource's throughput over its
// waiters' order. A waiter behind holds longer than the keep-off still
// attempts right after one ends, and one behind a long hold sleeps on the
// gate as before. An acquisition with AcquireOptions.Eager does not keep
// off: on the same machine its pingpong_retry ran at 190-243k round trips/s
// and counter, every waiter eager, at 1.1-1.8M pairs/s (2.7-4.2M not).
//
// cost is an exponentially weighted average of a Manager's failed
// attempts on any of its resources, in nanoseconds, each clamped to
// maxKeepOff (an attempt that waited out a descheduled holder of the
// entry's lock says nothing about the lines). Its goroutines update it
// without a lock: a lost update only drops one sample.
type keepOff struct {
	cost atomic.Int64
}

const (
	keepOffAttempts = 8
	minKeepOff      = time.Microsecond
	maxKeepOff      = 8 * time.Microsecond
	keepOffWeight   = 8 // a sample moves the average by 1/keepOffWeight of the difference
)

// failed records a failed attempt that took d nanoseconds.
func (k *keepOff) failed(d int64) {
	d = min(max(d, 0), int64(maxKeepOff))
	c := k.cost.Load()
	k.cost.Store(c + (d-c)/keepOffWeight)
}

// duration is how long a waiter keeps off after a failed attempt.
func (k *keepOff) duration() time.Duration {
	return min(max(keepOffAttempts*time.Duration(k.cost.Load()), minKeepOff), maxKeepOff)
}

// keepOffFor is how long a waiter of an acquisition with opts keeps off
// after a failed attempt: 0 for an eager one.
func (m *Manager) keepOffFor(opts *AcquireOptions) time.Duration {
	if opts.Eager {
		return 0
	}
	return m.keep.duration()
}
