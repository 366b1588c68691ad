// Package peerwork holds the pieces of the peer benchmarks' workloads
// (bench/README.md) that more than one harness runs: shmctl
// bench's drivers and the upgrade package's testing.B benchmarks. The loops
// are bench/c/harness.h's, statement for statement, so that every
// peer runs the same sequence of operations.
package peerwork

import "sync"

// SplitMix64 advances the state s and returns the next output of Vigna's
// splitmix64, the rw90 workload's generator.
func SplitMix64(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// RWLocker is a lock that rw90 takes exclusively and shared.
type RWLocker interface {
	sync.Locker
	RLock()
	RUnlock()
}

// RW90 is one worker's rw90 loop: iters operations, one in ten (by
// SplitMix64 from seed) a write of all eight words of rec under l's
// exclusive lock, the others a read of them under its shared lock, counted
// as torn if the words differ. rec is plain memory on purpose: a lock that
// failed to exclude writers would show as torn reads.
func RW90(l RWLocker, rec *[8]uint64, iters, seed uint64) (reads, writes, torn uint64) {
	for i := uint64(0); i < iters; i++ {
		if SplitMix64(&seed)%10 == 0 {
			l.Lock()
			v := rec[0] + 1
			for k := range rec {
				rec[k] = v
			}
			l.Unlock()
			writes++
			continue
		}
		l.RLock()
		tmp := *rec
		l.RUnlock()
		reads++
		for k := 1; k < len(tmp); k++ {
			if tmp[k] != tmp[0] {
				torn++
				break
			}
		}
	}
	return reads, writes, torn
}
