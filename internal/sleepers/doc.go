// Package sleepers keeps, in one 32-bit word of shared memory, the
// waiters registered to sleep on a futex gate, so that a waker makes a
// system call only when someone may be asleep, and wakes one sleeper at a
// time without a thundering herd.
//
// The word:
//
//	bits 0-23   the count of registered sleepers (CountMask)
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
// sleeper that unregisters resets them: a live sleeper reaches its futex
// call within microseconds of registering, so FutileMax such wakes in a
// row, with no sleeper running in between, mean the registered ones are
// dead, and the wake that makes the run that long drops the count. A live
// sleeper that was only slow to reach the kernel is not lost: its caller
// sleeps in bounded slices (a liveness check), and it registers again.
// Invariant: the futile count is 0 whenever the sleeper count is.
package sleepers
