package lockmgr

import (
	"fmt"
	"strings"
)

// Mode is how a resource is held.
type Mode uint8

// The lock modes.
const (
	// Exclusive admits one holder at a time.
	Exclusive Mode = 1 + iota
	// Collaborative admits several holders at once; every grant and every
	// end of a hold bumps the resource's version, so a holder can check with
	// CheckVersion whether anyone joined or left since it read it
	// (optimistic concurrency, last writer wins).
	Collaborative
)

func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Collaborative:
		return "collaborative"
	case 0:
		return "none"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode parses "exclusive" or "collaborative".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "exclusive":
		return Exclusive, nil
	case "collaborative":
		return Collaborative, nil
	}
	return 0, fmt.Errorf("%w: %q (want exclusive or collaborative)", ErrBadMode, s)
}

// State is a state of the acquisition state machine. An acquisition starts
// Unlocked and ends Acquired or Failed, passing through Waiting between
// attempts; a hold ends Released or Expired:
//
//	Unlocked -> Acquired   granted
//	Unlocked -> Failed     conflict without retry, retries exhausted, timeout,
//	                       cancellation, or a bad request
//	Unlocked -> Waiting    conflict, the caller asked to retry (backoff)
//	Waiting  -> Unlocked   the backoff passed or a release woke the waiter
//	Acquired -> Released   Release by the holder
//	Acquired -> Expired    the hold's TTL passed (or its process died)
//
// Released, Failed and Expired are final. A resource, as Inspect reports it,
// is Unlocked with no holders, Acquired while any hold is live, and Expired
// when every remaining hold has expired but none was cleared yet.
type State uint8

// The states of an acquisition and a hold.
const (
	Unlocked State = iota
	Waiting
	Acquired
	Failed
	Released
	Expired
)

var stateNames = [...]string{"unlocked", "waiting", "acquired", "failed", "released", "expired"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// transitions has a bit for each legal move: bit 8*s+n for State s to
// State n (a constant, so that the check inlines into every acquisition).
const transitions uint64 = 1<<(8*Unlocked+Acquired) | 1<<(8*Unlocked+Failed) | 1<<(8*Unlocked+Waiting) |
	1<<(8*Waiting+Unlocked) |
	1<<(8*Acquired+Released) | 1<<(8*Acquired+Expired)

// to returns next if s may move to it. Any other move is a bug in this
// package, reported loudly.
func (s State) to(next State) State {
	if s >= 8 || next >= 8 || transitions>>(8*s+next)&1 == 0 {
		illegalTransition(s, next)
	}
	return next
}

func illegalTransition(s, next State) {
	panic(fmt.Sprintf("lockmgr: illegal state transition %v -> %v", s, next))
}

// Final reports whether no transition leaves s.
func (s State) Final() bool { return s == Released || s == Failed || s == Expired }
