// Package racesync tells the race detector about the happens-before
// edges of shmlock's locks.
//
// The detector learns of synchronization from sync/atomic operations on Go
// memory and from runtime.RaceAcquire and RaceRelease on Go memory. A
// lock word of a segment is neither: the segment is a MAP_SHARED mapping
// outside the Go heap, the race runtime performs atomics on such an address
// without telling the detector (runtime/race_amd64.s, racecallatomic), and
// RaceAcquire and RaceRelease ignore it. So goroutines of one process that
// guard plain Go variables with a shmlock lock would be reported as racing.
//
// Each lock therefore calls Acquire with its lock word once an acquisition
// is granted (after the compare-and-swap that took it), and Release with
// the same word before the store that frees it, so that the detector sees
// the n'th release synchronize before the (n+1)'th acquisition, as the
// lock guarantees. Readers and writers follow sync.RWMutex: a reader
// acquires what writers released, and its release is what the next writer
// acquires; the lock kinds' files say which words stand for what.
//
// The detector cannot synchronize on the lock word itself, so Acquire and
// Release use a proxy: one of 4096 words of Go memory, chosen by hashing
// the word's address. Two locks whose words hash alike share a proxy
// (about one pair in 4096 of words far apart): their holders then appear
// ordered after each other's releases, which can hide a real race between
// them, never report a false one. For that, Release merges into the proxy
// (runtime.RaceReleaseMerge) rather than replacing what earlier releases
// left there: a plain RaceRelease of one lock would drop the edge that
// another lock's release had put on their shared proxy. (Within one lock,
// merging adds nothing: each releaser has acquired what the previous one
// released.) The hash spreads nearby words apart: words less than 8 KiB
// apart never share a proxy, so neither do the words of one upgrade mutex,
// nor owner slots less than 256 apart in their table (32 bytes each), nor
// lock-manager entries less than 32 apart (256 bytes each).
//
// A lock is known by its address in this process, so two mappings of one
// segment in one process (two shm.Open of the same file) are two locks to
// the detector: goroutines that guard Go data with one lock through both
// mappings are reported. Across processes the detector sees nothing either
// way.
//
// In builds without -race, Acquire and Release are empty and Enabled is
// false. Callers put each annotation under `if racesync.Enabled`, as
// package sync does with its race.Enabled: the compiler drops the branch,
// and the inliner counts nothing for it, so a fast path that was inlined
// before stays inlined (spinlock's tryAcquire is 3 under the budget).
//
//	if l.word.CompareAndSwap(0, mine) {
//		if racesync.Enabled {
//			racesync.Acquire(l.word)
//		}
//		...
//	}
//	...
//	if racesync.Enabled {
//		racesync.Release(l.word)
//	}
//	l.word.Store(0)
package racesync
