package upgrade

import (
	"testing"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// layout.IsUpgradeHandoff, which layout.UpgradeFree uses, reads the Writer
// word as this package writes it: a handoff (hungry, no pid, a time stamp
// above the pid field) is one; a writer's identity, hungry or not, is not.
func TestHandoffWordAgreesWithLayout(t *testing.T) {
	t.Parallel()
	self := proc.Self().Pack()
	for _, tc := range []struct {
		w    uint64
		want bool
	}{
		{writerHungry, true},
		{writerHungry | 12345<<proc.PIDBits, true},
		{self, false},
		{self | writerHungry, false},
		{0, false},
		{writerHungry | pidField, false},
	} {
		if got := layout.IsUpgradeHandoff(tc.w); got != tc.want || isHandoff(tc.w) != tc.want {
			t.Errorf("IsUpgradeHandoff(%#x) = %v, want %v", tc.w, got, tc.want)
		}
	}
}
