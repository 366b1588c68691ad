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

// A holder that lets its hold go and exits between a dry run's load of
// its word, which named it, and the dry run's check that it lives: the
// check says dead, and a dry run that trusted its load reported a dead
// holder's hold (shmctl reclaim --dry-run) that no Reclaim would find.
// The release runs inside the liveness check, so the interleaving is
// exact.
func TestReclaimDryRunAfterCleanRelease(t *testing.T) {
	for _, tc := range []struct {
		name          string
		hold, release func(h *Mutex) error
		reported      func(rep Repair) bool
	}{
		{"writer", (*Mutex).Lock, (*Mutex).Unlock, func(rep Repair) bool { return rep.Writer != 0 }},
		{"upgrader", (*Mutex).LockUpgrade, (*Mutex).UnlockUpgrade, func(rep Repair) bool { return rep.Upgrader != 0 }},
		{"reader", (*Mutex).LockShared, func(h *Mutex) error {
			if err := h.UnlockShared(); err != nil {
				return err
			}
			return h.Close() // the record goes back with the handle
		}, func(rep Repair) bool { return len(rep.Readers) != 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seg := newInternalSegment(t, 1)
			h, _ := Open(seg, 0)
			r, _ := Open(seg, 0)
			h.pid = deadIdentity(t) // the holder, gone by the time the dry run asks
			if err := tc.hold(h); err != nil {
				t.Fatal(err)
			}
			released := false
			r.alive = func(id uint64) bool {
				if id == h.pid && !released { // the release and exit land just before the check
					released = true
					if err := tc.release(h); err != nil {
						t.Error(err)
					}
				}
				return seg.OwnerAlive(id)
			}
			rep := r.reclaim(true)
			if !released {
				t.Fatal("the dry run did not check the holder")
			}
			if tc.reported(rep) {
				t.Errorf("dry run %+v: a dead holder reported after a clean release", rep)
			}
		})
	}
}
