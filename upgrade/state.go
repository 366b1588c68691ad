package upgrade

import (
	"time"

	"github.com/shmlock/shmlock/internal/mono"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// The state word (layout.UpgradeEntry.State) has these bits:
//
//	bit 31  stateWrite    the unique lock is held (alone: by the writer
//	                      recorded in Writer; with stateUpgrade: by the
//	                      upgrade holder, after UpgradeToUnique)
//	bit 30  stateUpgrade  the upgrade lock is held by the handle recorded in
//	                      Upgrader
//	bit 29  statePending  the upgrade holder waits for readers to drain
//	bit 28  stateInconsistent a unique hold was freed from a dead holder and
//	                      no unique holder has marked the data consistent since
//	bits 0-27             unused, always 0 (see below)
//
// Readers are not counted in the state word (the classic layout counts them in bits 0-28). A count in
// the shared word cannot survive the death of a reader process (nobody
// knows how much of it was the dead process's), so each handle counts its
// shared holds in a reader record of its own (layout.ReaderRecord: owner
// process, count), and the sum of the records is the reader count. The
// records are the only truth; a second count in the state word would cost
// every LockShared another read-modify-write of the one contended line.
// As a bonus, readers of different processes mostly touch different cache
// lines (records are handed out one per line first).
//
// Who may change what:
//   - Writer (packed identity) and WriterTID name the writer (WriterTID
//     once it is granted, see "Granted holds" below). The Writer
//     word is the writers' own mutex: CAS 0 -> identity takes it, and only
//     its holder sets stateWrite without stateUpgrade, which it does only
//     while stateUpgrade is clear. It then waits for the reader sum to
//     reach 0 (clearing stateWrite again, for a grace period, if readers
//     are slow to leave: see finishLock). Unlock bumps Generation, clears
//     stateWrite, then WriterTID, and clears Writer last.
//   - The unique lock has a second form, taken in one locked instruction:
//     Lock's fast path CASes the Writer word from 0 to its identity with
//     writerUnique (bit 61 of the word, see below), which keeps readers
//     out as stateWrite does. Then it loads the state word and the reader
//     records: if no lock bit is set and no reader is counted, it holds
//     the unique lock, with the state word untouched (readers still
//     counted get a few checks of the records to leave, the bit keeping
//     new ones out). Otherwise it steps back (clears writerUnique, keeping
//     the Writer word) and goes on as a writer that holds the Writer
//     word, through stateWrite. So a
//     writer's unique hold is writerUnique or stateWrite, never both (a
//     takeover of a dead writerUnique holder drops the bit in its CAS),
//     and a reader is kept out by stateWrite, statePending or
//     writerUnique. Its Unlock bumps Generation, clears WriterTID and then
//     the Writer word (bit and identity in one CAS): that uncontended
//     Lock+Unlock is two locked instructions, as a pthread rwlock's, where
//     the stateWrite form takes three (Writer CAS, State CAS, Writer CAS).
//     The state word's CAS was the writer's exclusion from the upgrade
//     holder; writerUnique is a different word, so the two exclude each
//     other as Dekker's pair: the writer CASes the Writer word and then
//     loads the state word, LockUpgrade CASes stateUpgrade into the state
//     word and then loads the Writer word, and whichever sees the other
//     steps back (the writer to its stateWrite form, which waits for the
//     upgrade lock; the upgrade seeker clears stateUpgrade and waits for
//     the writer). Both are locked instructions, so at least one sees the
//     other. UpgradeToUnique needs nothing more: a writer that comes while
//     stateUpgrade is set sees it and steps back.
//   - Upgrader and UpgraderTID name the upgrade holder likewise; its holder
//     sets stateUpgrade only while stateWrite is clear, so the writer and
//     the upgrade holder exclude each other through the state word, and
//     while stateUpgrade is set only its holder changes the state word.
//     UpgradeToUnique sets statePending (new readers back off), waits for
//     the reader sum to reach 0 and turns pending into stateWrite in one
//     CAS: no writer can slip in, since a writer needs stateUpgrade clear.
//   - Generation (the fencing token) is bumped only by the end of a
//     unique or upgrade hold, by its holder, before its state bit goes,
//     and by whoever takes a dead holder's hold over (takeOverWriter when
//     stateWrite was the dead writer's, takeOverUpgrader when stateUpgrade
//     was set), which then holds it. Those holds exclude each other, and a
//     writer holding only the Writer word (waiting) or an upgrade seeker
//     never bumps: so the word has one writer at a time, and is bumped by
//     a plain load and store, no locked instruction. (ForceUnlock, which
//     may meet a live holder's release, adds with a locked add.) The
//     state word is the holder's too while it holds (but for
//     stateInconsistent, set only for dead holders), so Unlock and
//     UnlockUpgrade clear their bits with a release store; the CAS or
//     store of the identity word that follows is the full barrier before
//     they look for sleepers. A release is thus one locked instruction.
//   - A reader adds 1 to its record and then loads the state word and the
//     Writer word (one cache line); if stateWrite, statePending or
//     writerUnique is set it takes the 1 back and waits. All these accesses
//     are sequentially consistent, so either the reader sees the bit or the
//     writer (drainer) sees the count: never neither (Dekker).
//
// Granted holds: WriterTID and UpgraderTID are 0 until the hold is
// granted, not from the moment the word is taken. A writer holds the
// Writer word while it waits for the upgrade lock and for readers, and an
// upgrade seeker the Upgrader word while it waits for a writer; their
// holder ids go in only when they have the lock (a plain store: nobody
// else writes the id while the word is held and the id is 0), and go back
// to 0 first thing in a release, before the word. Whoever takes a dead
// holder's word over clears the id before its CAS (seizeWriterWord), and
// sets it to 0 again at once after. So a word with a
// holder id is a granted hold, and a word without one is an acquisition in
// progress, a repair, or a holder that is releasing. ForceUnlock frees only
// the first kind (and dead identities' words, as a reclaim does): an
// acquisition it took the word from would go on, set its state bit without
// the word, and let a second holder in beside it.
// Nothing else reads the difference (a handle holds the lock if the word
// has its identity and the id is its own).
//
// A waiter that finds a dead holder: a writer or upgrade seeker takes the
// dead one's identity word over by CAS (one winner) and holds the lock,
// with Reclaimed set; anyone else takes it over and releases it at once.
// A dead writerUnique holder's bit goes in the takeover's CAS (the taker
// holds the Writer word alone, and a writer goes on through stateWrite);
// stateInconsistent is set before that CAS, so nobody gets in after the
// bit is gone and before the news is there.
// A dead reader's record is cleared by whoever waits for readers to drain:
// CAS of the record's owner to itself, count to 0, owner to 0, in that
// order, so a live process can never lose its count to the cleaner.
//
// Reporting reclaims: whoever frees a dead holder's unique hold (a writer
// with stateWrite or writerUnique, or an upgrade holder that had upgraded) sets
// stateInconsistent, whether it keeps the lock or not: a reader that frees
// a dead writer on its way in, Reclaim, a writer that takes the dead one's
// word over. Every acquisition of the unique lock (Lock, UpgradeToUnique)
// while the bit is set reports it (Reclaimed, Inconsistent), until a
// unique holder says it repaired the data (MarkConsistent clears it). So
// the news reaches a writer even if the one that reclaimed gave up, died
// itself, or released without repairing; and unlike glibc's
// ENOTRECOVERABLE the lock stays usable. Every change of the state word
// keeps the bit except MarkConsistent's; it blocks nobody, and it only
// sends Lock's fast path (a CAS from 0) the slow way until it is cleared.
//
// Sleeping: two futex gates, like the two condition variables of a classic
// upgradable mutex, and a
// queue for the writers' mutex. SharedGate holds readers and upgrade
// seekers, UniqueGate the writer that holds the writers' mutex (waiting for
// the upgrade lock to go or for readers to drain) and a pending upgrade.
// Waiters records the sleepers of each gate (see its constants below). A
// sleeper registers, reads the gate, re-checks its condition and sleeps
// only if the gate is unchanged; a waker changes the state, and if the
// gate has sleepers bumps the gate and wakes them all (sequentially
// consistent both sides: no lost wake-up). Unlocks with no sleeper make no
// system call.
//
// Writers waiting for the writers' mutex (the Writer word) sleep on
// WriterGate, counted in WriterSleepers, the same way, except that a
// release wakes one of them, not all: only one can take the word, and
// waking every writer at every release is a storm of system calls and
// context switches when processes outnumber cores. The waker sets
// writerWakePending first, and no release wakes another writer until the
// woken one has run and cleared it (unregistering); a sleeper that times
// out clears it too, so a woken writer that died cannot leave it set.
//
// Which unlock wakes whom, and why:
//   - UnlockShared wakes UniqueGate only when it empties its record while
//     stateWrite or statePending is set: only then can it be the last
//     reader a drainer waits for. Readers of one handle share a record, so
//     at most one wake per handle per drain (no storm of one wake per
//     read unlock).
//   - Every release of the Writer word wakes one sleeper on WriterGate.
//   - Unlock (writer) wakes SharedGate: readers and upgrade seekers were
//     blocked by stateWrite or writerUnique. Nobody can wait on UniqueGate
//     then: the writer held the writers' mutex, and no upgrade can be
//     pending. A writer that holds writerUnique never sleeps (it holds the
//     lock, or steps back first), so a reader that leaves while only
//     writerUnique is set wakes nobody.
//   - A writer that steps back from writerUnique wakes SharedGate: a
//     reader may have gone to sleep on the bit.
//   - UnlockUpgrade wakes SharedGate (upgrade seekers) and UniqueGate (a
//     writer waits for stateUpgrade to clear). Readers were never blocked.
//   - UniqueToUpgrade wakes SharedGate only (readers); writers still wait
//     for the upgrade lock.
//   - UniqueToShared wakes both: readers, and writers and upgrade seekers
//     now that the exclusive hold is gone.
//   - A cancelled UpgradeToUnique clears statePending and wakes SharedGate;
//     a cancelled Lock that had set stateWrite clears it and wakes both.
//
// Fairness: a writer that holds the writers' mutex keeps new upgrade
// seekers out (they wait for Writer to be 0), and once its grace period
// for readers (softDrain) is over, stateWrite keeps new readers out until
// it has the lock; a pending upgrade keeps new readers out at once. So
// readers cannot starve writers or upgraders. Among writers, and among
// readers woken together, no order is promised.
const (
	stateWrite   uint32 = 1 << 31 // the unique lock is held
	stateUpgrade uint32 = 1 << 30 // the upgrade lock is held
	statePending uint32 = 1 << 29 // an upgrade waits for readers to drain
	// stateInconsistent: a dead holder's unique hold was freed; unique
	// holders are told until one calls MarkConsistent
	stateInconsistent uint32 = 1 << 28

	// blockReaders are the bits that make a new reader wait.
	blockReaders = stateWrite | statePending
	// stateLocked are the bits of a hold or a pending upgrade: none may be
	// set for Lock's fast path to keep writerUnique.
	stateLocked = stateWrite | stateUpgrade | statePending
)

// The Waiters word:
//
//	bits 0-15   waitersShared  sleepers on SharedGate (readers, upgrade
//	                           seekers; each is an OS thread blocked in a
//	                           futex call, and Go allows 10000 threads a
//	                           process: as in every sleepers word, 65535
//	                           at once on one mutex is out of reach in
//	                           practice, and a count that overflowed would
//	                           cost sleepers a liveness slice, not a grant)
//	bits 16-21  waitersEpoch   drops of the shared count so far, modulo 64
//	bit  22     uniqueWriter   the Writer word's holder sleeps on UniqueGate
//	bit  23     uniqueUpgrader the upgrade holder sleeps on UniqueGate
//	bits 24-30  futile wakes   wakes of SharedGate in a row that found
//	                           nobody in the kernel (sleepers.FutileMask)
//	other bits                 0
//
// A sleeper killed while registered must not leave its registration for
// good: every later wake of its gate would make a futex system call
// (~1.4 us on a KVM guest) for nobody.
//
// UniqueGate has at most two sleepers, each holding a lock that only one
// may hold: the Writer word's holder (waiting for the upgrade lock to go,
// or for readers to drain) and the upgrade holder (draining readers for
// UpgradeToUnique). So each has a flag, not a count, and only the holder
// sets or clears its own; a dead holder's flag is cleared by whoever takes
// its lock over (by CAS of the identity word, so exactly one:
// takeOverWriter, takeOverUpgrader), before anyone else can hold that lock
// and set the flag again. A stale flag thus lives exactly as long as the
// dead process's hold, which must be taken over anyway. (Two goroutines
// of one handle that upgrade at once share its flag: the first to wake
// clears it, and the other may sleep until its liveness slice.)
//
// SharedGate's sleepers are anonymous, so a stale count is found out as in
// spinlock (layout.PadFutileWakes): a wake that finds nobody in the kernel
// counts itself in the futile bits, and every shared sleeper that runs resets
// that count when it unregisters. A live sleeper reaches its futex call
// (or unregisters) within microseconds of registering, so sleepers.FutileMax such
// wakes in a row, with no shared sleeper running in between, mean the
// registered ones are dead, and the wake that makes the run that long
// drops the count (sleepers.FutileIn). A live sleeper that was only slow to reach
// the kernel sleeps at most its liveness slice and registers again. The
// drop moves the epoch on, and a sleeper leaves the count only in the
// epoch it registered in (sleepers.UnregisterIn with its ticket): else a
// sleeper preempted between its registration and its futex call past a
// drop (with more processes than CPUs, milliseconds are common) would take
// off the count of one that registered after the drop, which would then
// sleep uncounted, woken by no release, for its whole slice (see package
// internal/sleepers). Unregistering never takes the count below zero.
// Invariant: the futile bits are 0 whenever the shared count is.
const (
	waitersShared     uint32 = 1 // one sleeper on SharedGate
	waitersSharedMask uint32 = 1<<16 - 1
	waitersEpoch      uint32 = 0x3f << 16
	uniqueWriter      uint32 = 1 << 22
	uniqueUpgrader    uint32 = 1 << 23
	waitersUnique            = uniqueWriter | uniqueUpgrader
)

// The Writer word's bits above the identity. Packed identities never use
// bits 61 and 62 (the top of the start-time field): a start time there is
// 2^39 ticks after boot, 174 years at 100 ticks a second.
//
// writerUnique: the word's holder holds the unique lock, taken in one CAS
// by Lock's fast path (see "Who may change what" above).
//
// Handoff to waiting writers (fairness among writers). A writer that has
// spun a full round without getting the Writer word is hungry: it sets
// writerHungry in the word, beside the holder's identity (and
// writerUnique, if set). The holder's release then stores a handoff instead of 0:
// writerHungry with a zero pid field (no identity has pid 0) and the time
// of the release in the start-time field (handoffStamp, CLOCK_MONOTONIC,
// which every process of one boot shares). Only a hungry writer (one past
// its first round) may take a fresh handoff, so the releaser cannot take
// the lock straight back, nor can a newcomer on the fast path. Only a
// writer on a CPU (spinning) marks the word, and it takes the mark off
// before it goes to sleep: a release handed to a sleeper would leave the
// lock idle until the sleeper runs, a convoy when processes outnumber
// cores. A woken writer spins, hungry, before it sleeps again.
//
// A hungry writer takes a handoff within microseconds, so one that has
// waited handoffExpiry is stale: its writers gave up, died, or closed their
// segment between marking and taking. Anyone may then take it as a free
// word: TryLock, LockUpgrade, Reclaim and every waiter. So nothing a dead
// or closing writer leaves makes a free mutex refuse TryLock for longer
// than handoffExpiry. Waiters that give up hand a handoff back at once
// (passWriterWake).
const (
	writerHungry uint64 = 1 << 62
	writerUnique uint64 = 1 << 61
	pidField            = uint64(proc.MaxPID)
	// stampShift drops the low bits of a nanosecond clock reading: a
	// handoff's stamp counts units of about 1.05 ms.
	stampShift = 20
	stampMask  = uint64(1)<<(61-proc.PIDBits) - 1 // the start-time field below bit 61
	// handoffExpiry, in stamp units: two units is at least 1.05 ms.
	handoffExpiry = 2
)

// handoffWord is the Writer word of a release handed to the hungry now.
func handoffWord() uint64 {
	return writerHungry | (uint64(mono.Now())>>stampShift&stampMask)<<proc.PIDBits
}

// isHandoff reports whether the Writer word o is a handoff.
func isHandoff(o uint64) bool { return layout.IsUpgradeHandoff(o) }

// The layout package reads these words too (layout.UpgradeFree, for the
// recycling of a mutex's name, and package shm, which asks who holds it):
// its constants must be these.
var (
	_ = [1]struct{}{}[layout.UpgradeStateHeld^stateLocked]
	_ = [1]struct{}{}[layout.UpgradeStateWrite^stateWrite]
	_ = [1]struct{}{}[layout.UpgradeStateUpgrade^stateUpgrade]
	_ = [1]struct{}{}[layout.UpgradeStatePending^statePending]
	_ = [1]struct{}{}[layout.UpgradeStateInconsistent^stateInconsistent]
	_ = [1]struct{}{}[layout.UpgradeWriterUnique^writerUnique]
)

// handoffExpired reports whether the handoff o is stale (see above).
func handoffExpired(o uint64) bool {
	stamp := o >> proc.PIDBits & stampMask
	now := uint64(mono.Now()) >> stampShift & stampMask
	return (now-stamp)&stampMask >= handoffExpiry
}

// writerID is the identity in the Writer word o: 0 if free or handed off.
func writerID(o uint64) uint64 {
	if isHandoff(o) {
		return 0
	}
	return o &^ (writerHungry | writerUnique)
}

// readersBlocked reports whether a reader must wait: a writer holds or
// takes the unique lock (stateWrite, writerUnique) or an upgrade is
// pending.
func readersBlocked(e *layout.UpgradeEntry) bool {
	return e.State.Load()&blockReaders != 0 || e.Writer.Load()&writerUnique != 0
}

// uniqueHeld reports whether state word s and Writer word w show the
// unique lock held (or taken once readers leave), in either form and by
// the writer or an upgraded upgrade holder.
func uniqueHeld(s uint32, w uint64) bool { return s&stateWrite != 0 || w&writerUnique != 0 }

// writerHoldsUnique is uniqueHeld for the Writer word's holder alone:
// stateWrite without stateUpgrade, or writerUnique.
func writerHoldsUnique(s uint32, w uint64) bool {
	return s&(stateWrite|stateUpgrade) == stateWrite || w&writerUnique != 0
}

// The WriterSleepers word is an internal/sleepers word over WriterGate:
// the writers asleep there, a wake-pending bit (see the handoff above), the
// futile-wake count that drops the registrations of writers killed while
// they slept, and the epoch that keeps a writer whose registration was
// dropped from taking a later writer's (sleepers.Ticket).

// Reader records of a mutex in use, for the drain check: bit j%32 of the
// first record's Pad word (layout.ReaderRecord leaves Pad to this package)
// is set, for good, once record j has been claimed. A writer that waits
// for readers to drain then reads only the records of those bits instead
// of all of them. A record's bit is set before its first shared hold is
// counted, and the drainer sets its state bit before it reads the mask,
// all sequentially consistent: a drainer never misses a counting record.
const maskBits = 32

// Limits and waiting.
const (
	// MaxShared is the most shared holds one handle may have at once: the
	// classic 29-bit reader count, per handle.
	MaxShared = 1<<29 - 1

	spinLoads = 100 // checks before yielding
	// A writer that finds the writers' mutex taken keeps off it this long
	// before its first check (internal/spin): counter with 2 processes
	// went from 0.66x pthread's rwlock to 1.01x (0.39x -> 0.47x in a slower
	// placement), side by side, and pingpong_retry from 1.60x to 1.04x;
	// 400 ns gave 1.09x and 0.84x, 1000 ns 1.42x and 0.48x. rw90 did not
	// change. A PAUSE after each of the writer's checks (libshmlock's loop
	// has one; Go's had none) moved along the same trade (bench/matrix
	// -baseline, 10 rounds, far placement): pingpong_retry 1.32x (10 of
	// 10), counter 0.83x/0.92x at 2/8 processes, rw90 0.99x; not kept, as
	// the spinlock's measurements in spinlock/slow.go were not. That trade
	// is also why libshmlock's upgrade mutex hands a turn over faster than
	// Go's (pingpong_retry 678k against 365k round trips/s in one run) and
	// trails it in counter at 2/4 processes.
	writerKeepOff    = 250 * time.Nanosecond
	spinYields       = 4                     // yield rounds before sleeping
	livenessInterval = 50 * time.Millisecond // longest time between liveness checks of a waiter
	softDrain        = time.Millisecond      // a writer's grace period for readers (finishLock)

	recordsPerLine = 64 / 16 // reader records per cache line
)
