package testproc

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Torture is the kill -9 test of one lock: worker processes take the lock
// in a loop, each inside incrementing a shared counter and then its own
// tally, while the test kills one at random moments (two times in three
// the holder) and starts a replacement.
//
// The accounting is exact because Run freezes each victim with SIGSTOP and
// looks at the lock before it sends SIGKILL. A stopped process changes
// nothing, and while it holds the lock nobody else may, so:
//
//   - the victim holds the lock iff Holds says so, and then exactly one
//     reclaim is due (a victim stopped just after its release holds nothing
//     and is owed nothing);
//   - if it holds the lock, the increments nobody tallied grew by 0 or 1
//     since the last kill: 1 when it was stopped between incrementing the
//     counter and its tally; Untallied in the result adds those up;
//   - Run waits until the due reclaim is recorded before it stops the next
//     victim, so a victim is never a reclaimer that has not yet recorded
//     its reclaim, and every reclaim is counted once.
//
// The workers check each acquisition themselves (a marker word in the
// critical section, for two owners) and the caller checks the totals.
type Torture struct {
	Workers     int // running at any time
	Kills       int // kills to make at least,
	HolderKills int // of which at least this many of the holder;
	MaxKills    int // fail if that takes more kills than this
	Rng         *rand.Rand

	Start     func() *Child       // a new worker, once it is ready
	Holds     func(c *Child) bool // whether worker c holds the lock now
	Uncounted func() uint64       // the counter minus the sum of every worker's tally, now
	Reclaims  func() uint64       // reclaims the workers have recorded
}

// TortureResult is what a Torture did.
type TortureResult struct {
	All         []*Child // every worker started, in order
	Live        []*Child // those not killed
	Kills       int
	HolderKills int
	Untallied   uint64 // increments by victims killed before their tally
}

// Alive reports whether c was not killed.
func (r TortureResult) Alive(c *Child) bool { return slices.Contains(r.Live, c) }

// Run kills until the Torture's counts are reached. A worker that exits
// by itself has found something wrong, and fails the test at once.
func (k Torture) Run(tb testing.TB) TortureResult {
	tb.Helper()
	if k.Workers < 1 || k.HolderKills > k.Kills || k.Kills > k.MaxKills {
		tb.Fatalf("testproc.Torture: want 1 <= Workers and HolderKills <= Kills <= MaxKills, have %d, %d, %d, %d",
			k.Workers, k.HolderKills, k.Kills, k.MaxKills)
	}
	var r TortureResult
	for range k.Workers {
		c := k.Start()
		r.All, r.Live = append(r.All, c), append(r.Live, c)
	}
	check := func() {
		for _, c := range r.Live {
			c.RequireRunning(tb)
		}
	}
	for r.Kills < k.Kills || r.HolderKills < k.HolderKills {
		if r.Kills == k.MaxKills {
			tb.Fatalf("only %d of %d kills hit a holder", r.HolderKills, r.Kills)
		}
		time.Sleep(time.Duration(2000+k.Rng.IntN(20000)) * time.Microsecond)
		check()

		// Two times in three aim at the holder; the third kills anyone,
		// which may be a sleeping waiter or one that is just acquiring.
		var victim *Child
		if i := slices.IndexFunc(r.Live, k.Holds); i >= 0 {
			victim = r.Live[i]
		}
		if victim == nil || k.Rng.IntN(3) == 0 {
			victim = r.Live[k.Rng.IntN(len(r.Live))]
		}
		victim.Stop(tb)
		holds := k.Holds(victim)
		if holds {
			d := k.Uncounted() - r.Untallied
			if d != 0 && d != 1 {
				tb.Fatalf("victim stopped holding the lock: untallied increments grew by %d, want 0 or 1", int64(d))
			}
			r.Untallied += d
			r.HolderKills++
		}
		victim.Kill(tb)
		r.Live = slices.DeleteFunc(r.Live, func(c *Child) bool { return c == victim })
		r.Kills++
		c := k.Start()
		r.All, r.Live = append(r.All, c), append(r.Live, c)
		if holds {
			WaitFor(tb, func() bool { check(); return k.Reclaims() >= uint64(r.HolderKills) },
				"reclaim %d (victim pid %d)", r.HolderKills, victim.PID())
		}
	}
	return r
}
