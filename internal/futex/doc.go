// Package futex puts goroutines of any process to sleep on a 32-bit word in
// shared memory and wakes them again: the Linux futex(2) WAIT and WAKE
// operations, without FUTEX_PRIVATE_FLAG, so the kernel keys a waiter by the
// word's file and offset rather than by its address in one process.
//
// A futex is not a lock by itself. The caller keeps its state in the word,
// changes it with sync/atomic, and sleeps only while the word still holds
// the value it saw; the kernel checks that value and queues the caller
// atomically, so a wake that comes between the check and the sleep is never
// lost. Every return from Wait may be spurious, so callers loop:
//
//	for word.Load() == busy {
//		if err := futex.Wait(word, busy, -1); err != nil {
//			return err
//		}
//	}
//
// and the side that changes the word stores the new value first, then wakes:
//
//	word.Store(free)
//	futex.WakeAll(word)
//
// Only Linux is supported; elsewhere every call fails with ErrUnsupported.
package futex
