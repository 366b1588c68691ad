package lockmgr

import (
	"strings"
	"testing"

	"github.com/shmlock/shmlock/layout"
)

// TestOwnerHashMatchesKey: the hash ownerHash computes from a holder
// record's words is the one setOwner computes from the name, for names of
// every length in words (LastExpired compares the two).
func TestOwnerHashMatchesKey(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "agent-1", "agent-12", "agent-123", "ünïcødé owner",
		strings.Repeat("o", MaxOwnerLen-1), strings.Repeat("o", MaxOwnerLen)} {
		var k ownKey
		if err := k.setOwner(name); err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		var h layout.LockMgrHolder
		for i := range h.Owner {
			h.Owner[i].Store(k.w[i])
		}
		if got := ownerHash(&h); got != k.hash {
			t.Errorf("%q: ownerHash %#x, setOwner %#x", name, got, k.hash)
		}
	}
}
