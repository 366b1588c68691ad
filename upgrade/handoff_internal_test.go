package upgrade

import (
	"testing"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// layout.IsUpgradeHandoff, which layout.UpgradeFree uses, and
// layout.UpgradeWriterID, which shm's claim directory uses, read the Writer
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
		{self | writerUnique, false},
		{self | writerUnique | writerHungry, false},
		{handoffWord(), true},
		{0, false},
		{writerHungry | pidField, false},
	} {
		if got := layout.IsUpgradeHandoff(tc.w); got != tc.want || isHandoff(tc.w) != tc.want {
			t.Errorf("IsUpgradeHandoff(%#x) = %v, want %v", tc.w, got, tc.want)
		}
		// The claim directory asks who holds the writers' mutex too.
		if got := layout.UpgradeWriterID(tc.w); got != writerID(tc.w) {
			t.Errorf("UpgradeWriterID(%#x) = %#x, want %#x", tc.w, got, writerID(tc.w))
		}
	}
}

// A handoff's time stamp stays below writerUnique: a handoff is never
// read as a unique hold, whatever the clock says.
func TestHandoffStampBelowUniqueBit(t *testing.T) {
	t.Parallel()
	if w := handoffWord(); w&writerUnique != 0 || writerID(w) != 0 {
		t.Errorf("handoffWord() = %#x: has the unique bit, or names a writer", w)
	}
	if top := stampMask << proc.PIDBits; top&(writerUnique|writerHungry) != 0 {
		t.Errorf("the stamp field %#x overlaps the unique or hungry bit", top)
	}
}

// The upgrade seeker's half of Dekker's pair with Lock's fast path: a
// stateUpgrade set while a writer holds writerUnique is taken back (and
// nothing else in the state word changes); without the bit it stands.
func TestUpgradeBitStands(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 1)
	m, err := Open(seg, 0)
	if err != nil {
		t.Fatal(err)
	}
	e := m.e
	other := proc.Self().Pack() + 1 // any identity but ours: the test never checks liveness
	for _, tc := range []struct {
		name   string
		writer uint64
		stands bool
	}{
		{"no writer", 0, true},
		{"a writer waiting for the word's lock (no unique bit)", other, true},
		{"a hungry writer's word", other | writerHungry, true},
		{"a one-CAS unique hold", other | writerUnique, false},
		{"a one-CAS unique hold, hungry", other | writerUnique | writerHungry, false},
	} {
		e.Writer.Store(tc.writer)
		e.State.Store(stateUpgrade | stateInconsistent)
		if got := m.upgradeBitStands(); got != tc.stands {
			t.Errorf("%s: upgradeBitStands() = %v, want %v", tc.name, got, tc.stands)
		}
		want := stateUpgrade | stateInconsistent
		if !tc.stands {
			want = stateInconsistent
		}
		if got := e.State.Load(); got != want {
			t.Errorf("%s: state %#x, want %#x", tc.name, got, want)
		}
	}
	e.Writer.Store(0)
	e.State.Store(0)
}

// newInternalSegment creates a small segment of upgrades mutexes for this
// package's internal tests, removed at the end of the test.
func newInternalSegment(tb testing.TB, upgrades int) *shm.Segment {
	tb.Helper()
	seg, err := shm.Create(testproc.SegmentPath(tb), shm.Options{Options: layout.Options{Upgrades: upgrades, UpgradeReaders: 4}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = seg.Close() })
	return seg
}
