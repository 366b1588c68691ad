package spinlock

import (
	"fmt"
	"math/rand/v2"

	"github.com/shmlock/shmlock/internal/proc"
)

// Mode says how a lock reads its owner slot.
type Mode uint8

const (
	// PIDTID records the holding process and holder; robust, recursive.
	PIDTID Mode = iota
	// Token records a token that whoever has it may release.
	Token
)

// ClaimUse is the number Named records in the slot directory for mode m
// (shm.Segment.ClaimAs); 0 there means the mode was never said.
func (m Mode) ClaimUse() uint32 { return uint32(m) + 1 }

// ModeOfClaimUse is the mode a slot directory's use number records, if any.
func ModeOfClaimUse(use uint32) (Mode, bool) {
	if use == PIDTID.ClaimUse() || use == Token.ClaimUse() {
		return Mode(use - 1), true
	}
	return 0, false
}

func (m Mode) String() string {
	switch m {
	case PIDTID:
		return "pid/tid"
	case Token:
		return "token"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Identity is what a lock records of its holder: (PID, TID) in PIDTID mode,
// Token in Token mode. Make one with a factory: NewHolder, ThreadHolder or
// NewToken. The lock never invents an identity.
type Identity struct {
	PID   uint64 // packed process identity (pid and start time); 0 in Token mode
	TID   uint64 // holder id within the process; 0 in Token mode
	Token uint64 // the token in Token mode; 0 in PIDTID mode
}

// NewHolder returns a new logical holder of this process for PIDTID locks.
// Its TID is random, so holder ids of different processes (and of a dead
// process and its pid's next user) never match. Recursion is keyed on the
// holder: goroutines that share one Identity count as one owner.
func NewHolder() Identity {
	return Identity{PID: proc.Self().Pack(), TID: proc.HolderID()}
}

// ThreadHolder returns a holder tied to the calling OS thread: its TID
// carries the thread id in the low 32 bits (shown by shmctl slots) and
// random bits above. Use it only from a goroutine that called
// runtime.LockOSThread, or the thread it names means nothing. Each call
// returns a new holder (its random bits differ), so a second call on the
// same thread is another owner, which waits for the first rather than
// recursing: keep the Identity for the thread's holds. (C's
// shmlock_holder_thread keeps one per thread instead.)
func ThreadHolder() Identity {
	return Identity{PID: proc.Self().Pack(), TID: proc.ThreadID()&0xffff_ffff | proc.HolderID()<<32}
}

// NewToken returns a fresh token for one acquisition of a Token lock.
// Tokens are random with non-zero low 32 bits (the futex compares those),
// so the tokens of different processes never collide in practice.
func NewToken() Identity {
	for {
		if t := rand.Uint64(); uint32(t) != 0 {
			return Identity{Token: t}
		}
	}
}

// fits reports whether id can be used with a lock of mode m. The lock
// word's low half is the futex word, which must not be 0 while the lock is
// held (see Lock): a token's low half must not be 0, nor a PID's, whose low
// bits are the pid of a packed identity.
func (id Identity) fits(m Mode) bool {
	if m == Token {
		return uint32(id.Token) != 0 && id.PID == 0 && id.TID == 0
	}
	return uint32(id.PID) != 0 && id.TID != 0 && id.Token == 0
}

func (id Identity) String() string {
	if id.Token != 0 {
		return fmt.Sprintf("token %#x", id.Token)
	}
	p, stale := proc.Unpack(id.PID)
	if stale {
		return fmt.Sprintf("%v (stale) holder %#x", p, id.TID)
	}
	return fmt.Sprintf("%v holder %#x", p, id.TID)
}
