// Package proc names processes in a way that survives PID reuse, so a lock
// can tell a live owner from a dead one.
//
// A pid alone is not an identity: when its process exits the kernel hands
// the number to a later process. Identity pairs the pid with the process
// start time, in clock ticks since boot, which no later process with the
// same pid can share during the same boot. A lock records its owner as one
// uint64 (Identity.Pack), so a single compare-and-swap says both who holds
// the lock and which incarnation of that pid; a word recorded before a
// reboot is marked stale (MarkStale) by whoever notices that BootID changed,
// and a stale word is never alive.
//
//	me := proc.Self().Pack()
//	if owner.CompareAndSwap(0, me) { /* locked */ }
//	...
//	if w := owner.Load(); w != 0 && !proc.AlivePacked(w) {
//		owner.CompareAndSwap(w, me) // the owner died: take over
//	}
//
// Liveness comes from /proc/<pid>/stat: a missing entry, a zombie (whose
// threads have all exited: a process whose main thread exited shows Z
// while its other threads run), or a different start time means the
// owner is gone; a start time read by a process of another time
// namespace, shifted by its boot-time offset, is not compared. When /proc cannot tell
// (for instance it is mounted with hidepid), Alive falls back to
// kill(pid, 0) and errs on the side of "alive": it never reports a live
// owner as dead. Other platforms than Linux only get that fallback.
//
// An identity means something in its own PID namespace only. A process
// of an ancestor namespace sees the processes of its descendants in its
// /proc too, under other pids: ScanPIDNamespaces finds them by their pids
// in their own namespaces (NSpid), and judges a process of another
// namespace where the scan can be sure (PIDNamespaces.Alive).
package proc
