// Package sleepers keeps, in one 32-bit word of shared memory, the
// waiters registered to sleep on a futex gate, so that a waker makes a
// system call only when someone may be asleep, and wakes one sleeper at a
// time without a thundering herd.
//
// The word:
//
//	bits 0-15   the count of registered sleepers (CountMask)
//	bits 16-23  the epoch: drops of the count so far, modulo 256 (EpochMask)
//	bits 24-30  wakes in a row that found none of them in the kernel (FutileMask)
//	bit  31     wake-pending: a woken sleeper has not run yet (WakePending)
//
// A sleeper registers (Register), reads the gate, re-checks its condition,
// sleeps on the gate only if it is unchanged, and unregisters when the
// futex call returns (Unregister), woken or not. A waker changes the
// state the sleepers wait on, then calls WakeOne or WakeAll. Both sides
// are sequentially consistent, so a sleeper that registered before the
// waker read the word is seen, and one that registered after finds the
// gate changed: no wake-up is lost.
//
// Wake-pending works like sync.Mutex's mutexWoken: a WakeOne that wakes a
// sleeper sets it, and WakeOnes that find it set wake nobody, for the
// woken one is on its way; it clears the bit when it unregisters. Without
// it, with more processes than cores, nearly every release would make a
// futex call (over a microsecond on a KVM guest) for a sleeper that
// already has one.
//
// A sleeper killed while registered leaves the count one too high, and
// every later wake would make a system call for nobody. So a wake that
// finds nobody in the kernel counts itself in the futile bits, and every
// sleeper that unregisters resets them: FutileMax such wakes in a row, with
// no sleeper running in between, and the wake that makes the run that long
// takes the registered sleepers for dead and drops the count. Live
// sleepers that keep unregistering in between keep a drop from coming, and
// killed ones may fill the count: a full count takes no more (Register),
// rather than carry into the epoch.
//
// They may only have been slow: with more processes than CPUs, a live
// sleeper is often preempted between its registration and its futex call,
// for milliseconds, while the running processes make hundreds of releases
// (an 8-process counter on 2 CPUs saw several drops in each 20 ms run).
// Dropping is still right, since wakes for nobody would cost every release
// a system call; what must not happen is that such a sleeper, when it runs
// and unregisters, takes the count of a sleeper that registered after the
// drop: that one would sleep uncounted, woken by no release, for its whole
// slice with the lock free. So a drop moves the epoch on, Register returns
// the epoch as the sleeper's Ticket, and Unregister takes the sleeper off
// the count only in the epoch it registered in. (The epoch wraps at 256
// drops; a sleeper that stays away that long can still miscount, which
// costs at most one slice.) A dropped sleeper that is in the kernel, or
// gets there, sleeps at most its slice (its caller's liveness check) and
// registers again; one that reaches its futex call after the gate moved,
// as it almost always has, does not sleep at all.
//
// The plain words (WakeOne, WakeAll, Register, Unregister) have the
// layout above. A word that shares its low bits with flags of the caller's
// (upgrade's Waiters word: RegisterIn, UnregisterIn and FutileIn) says
// where its count (from bit 0) and its epoch are; its futile count is in
// the same bits 24-30, and it has no wake-pending bit.
// Invariant: the futile count is 0 whenever the sleeper count is.
package sleepers
