//go:build race

package racesync

import (
	"math/rand/v2"
	"testing"
)

// Words less than nearBytes apart never share a proxy: the lock words of
// one table, or of one upgrade mutex, stay apart (see the package
// documentation).
func TestNearWordsHaveTheirOwnProxies(t *testing.T) {
	t.Parallel()
	const nearBytes = 8 << 10
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		base := uintptr(r.Uint64()>>17) &^ 7 // a user-space address, 8-byte aligned
		s := slot(base)
		for d := uintptr(4); d < nearBytes; d += 4 {
			if slot(base+d) == s {
				t.Fatalf("words at %#x and %#x share a proxy, want apart", base, base+d)
			}
		}
	}
}
