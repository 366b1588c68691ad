// Package spinlock is shmlock's cross-process mutex: one lock over one
// 32-byte owner slot (layout.OwnerSlot), in a shared segment or in process
// memory, that is robust to the death of its holder.
//
// The slot is read in one of two modes:
//
//   - PIDTID: the slot records the holding process (pid and start time,
//     packed into one word) and a holder id within it. Only that holder may
//     unlock; it may lock again recursively; every release bumps a
//     generation. If the holding process dies, or its pid now belongs to a
//     newer process, or it was recorded before a reboot, the next waiter
//     takes the lock over and its Guard reports Reclaimed, like EOWNERDEAD.
//   - Token: the slot records a token. Whoever has the token (the Guard, or
//     the number itself, in another goroutine or process) may unlock.
//
// Identities come from factories, never from inside the lock: NewHolder
// makes a logical holder for PIDTID mode, NewToken a fresh token for one
// acquisition in Token mode. In Go a "thread" is not a stable identity
// (goroutines move between OS threads), so a Holder plays the role of a thread id:
// recursion is keyed on it, and the goroutines sharing one Holder count as
// one owner. ThreadHolder ties a holder to the OS thread for goroutines that
// called runtime.LockOSThread.
//
// Waiting spins briefly, yields the CPU a few times (sched_yield), lets the
// process's other goroutines run, then sleeps on a futex in the slot, so a
// blocked process burns no CPU, and an unlock with no sleeper makes no
// system call.
//
//	seg, _ := shm.OpenOrCreate("jobs", shm.Options{})
//	lock, _ := spinlock.Named(seg, "queue", spinlock.PIDTID)
//	me := spinlock.NewHolder()
//	g, err := lock.Lock(me)
//	if err != nil { ... }
//	if g.Reclaimed() { /* the previous holder died: repair the data */ }
//	defer g.Release()
package spinlock
