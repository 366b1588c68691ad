package upgrade

import "testing"

// A unique holder that releases and exits (a process whose last act is
// its Unlock) between a repairer's load of the Writer word, which named
// it, and the repairer's check that it lives: the check says dead, of a
// holder whose word the repairer loaded before the release. A repairer
// that trusted that load marked the mutex inconsistent and moved the
// generation on before its CAS of the word failed: every later unique
// holder was told of a reclaim that never was, until one marked the data
// consistent. The release runs inside the liveness check, so the
// interleaving is exact.
func TestTakeOverWriterAfterCleanRelease(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 1)
	h, _ := Open(seg, 0)
	r, _ := Open(seg, 0)
	h.pid = deadIdentity(t) // the holder, gone by the time the repairer asks
	if err := h.Lock(); err != nil {
		t.Fatal(err)
	}
	e := r.e
	released := false
	r.alive = func(id uint64) bool {
		if id == h.pid && !released { // the holder's release and exit land just before the check
			released = true
			if err := h.Unlock(); err != nil {
				t.Error(err)
			}
		}
		return seg.OwnerAlive(id)
	}
	gen := e.Generation.Load() + 1 // the release's bump
	if r.releaseDeadWriter() {
		t.Error("a repairer released a hold that its holder had released")
	}
	if !released {
		t.Fatal("the repairer did not check the holder")
	}
	if s := e.State.Load(); s&stateInconsistent != 0 {
		t.Errorf("state %#x: inconsistent after a clean release", s)
	}
	if got := e.Generation.Load(); got != gen {
		t.Errorf("generation %d after the release, want %d", got, gen)
	}
	if w := e.Writer.Load(); w != 0 {
		t.Errorf("Writer word %#x after the release", w)
	}
	if err := r.Lock(); err != nil {
		t.Fatal(err)
	}
	if r.Reclaimed() {
		t.Error("the next holder is told of a reclaim")
	}
	_ = r.Unlock()
}
