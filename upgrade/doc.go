// Package upgrade is shmlock's upgradeable reader/writer mutex across
// processes, robust to the death of any holder.
//
// A Mutex is a handle on one upgrade mutex of a segment
// (layout.UpgradeEntry plus its reader records). It offers three modes:
//
//   - shared (LockShared): any number of readers at once;
//   - upgrade (LockUpgrade): at most one holder, alongside readers; only it
//     may turn its hold into the unique lock (UpgradeToUnique) without
//     letting a writer in between;
//   - unique (Lock): one holder and nobody else.
//
// A pending upgrade, and a writer that has waited a moment (a millisecond)
// for the readers to drain, block new readers, so neither starves under a
// stream of readers. Downgrades (UniqueToUpgrade, UniqueToShared) never
// block.
//
// Robustness: the writer and the upgrade holder are recorded by process
// identity (pid and start time) and handle id, so a waiter that finds one
// dead takes the lock over (the new holder's Reclaimed reports it, like
// EOWNERDEAD) or, if it wanted another mode, releases it. A dead unique
// holder marks the mutex inconsistent, whoever freed its hold: every
// unique holder is told (Reclaimed, Inconsistent) until one calls
// MarkConsistent. Waiters look for dead holders every 50 ms of waiting,
// however busy the mutex is. Readers are
// counted per handle, in reader records that name their process, so the
// share of a dead reader process is dropped; a live reader is never
// released. Boost's interprocess_upgradable_mutex and pthread rwlocks
// wedge forever in all these cases.
//
// Cost: an uncontended Lock+Unlock is two locked instructions, as a
// pthread rwlock's (Lock takes the unique lock in one compare-and-swap of
// the writer's word when nobody holds anything; see state.go for the two
// forms of a unique hold and how they exclude the upgrade holder), and an
// uncontended LockShared+UnlockShared two, on the handle's own reader
// record.
//
// Every blocking call has a Try form (never waits) and a Context form
// (waits until the context is done, then leaves the lock as it was). Waiters
// spin briefly, then sleep on futexes in the entry, waking at least every
// 50 ms to look for dead holders; a release wakes one queued writer, or
// every waiting reader.
//
// Closing: once the segment is closed every acquisition of its handles,
// and Inspect and Reclaim, return shm.ErrClosed and change nothing in the
// segment's file; an acquisition in flight either completes, its hold real
// in the file, or returns shm.ErrClosed having left nothing there; and a
// goroutine waiting for the lock returns shm.ErrClosed at its next wake
// (within a liveness interval). A waiter that holds part of the lock while
// it waits for the rest (Lock holds the writers' mutex while it waits for
// the upgrade holder or for readers, LockUpgrade the upgrade holder's word
// while it waits for a writer, UpgradeToUnique a pending upgrade) is woken
// by Close, which waits for it to give that part back
// (shm.Segment.OnClose). Holds taken before Close stay held in the file
// until released: the releases (Unlock, UnlockShared, UnlockUpgrade,
// UniqueToUpgrade after an upgrade, and Mutex.Close) still work after the
// segment's Close, and so does the unique holder's MarkConsistent. A
// Locker, which cannot return the error, panics with it (see Locker).
//
//	seg, _ := shm.OpenOrCreate("jobs", shm.Options{})
//	m, _ := upgrade.Named(seg, "table")
//	defer m.Close()
//	if err := m.LockUpgrade(); err != nil { ... }
//	... read, decide to write ...
//	err := m.WithUnique(ctx, func() error { ... write ... })
//	m.UnlockUpgrade()
package upgrade
