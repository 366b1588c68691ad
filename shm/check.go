package shm

import (
	"fmt"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// CheckDirectories validates the claim directories of the owner-slot and
// upgrade-mutex tables, the claim references and the region directory
// without changing anything, and returns a line for each damaged entry: a
// state no claim can leave, a claimed entry with a bad name or claimer, a name claimed twice, a data region out of
// the data area, misaligned or overlapping another (layout.DecodeRegions).
// (A claim with no reference is no damage: its lock was still held when
// the last reference went.) Nothing found: nil. It reads without the registry
// lock, so a claim under way may read as one finding; check again.
func (s *Segment) CheckDirectories() ([]string, error) {
	var found []string
	for _, k := range []layout.Kind{layout.KindOwnerSlots, layout.KindUpgrades} {
		dk, _ := directoryOf(k)
		names := map[string]int{}
		for i := range s.Len(k) {
			e, err := entry[layout.DirEntry](s, dk, i)
			if err != nil {
				return nil, err
			}
			where := fmt.Sprintf("%v[%d]", dk, i)
			switch st := e.State.Load(); st {
			case layout.DirFree: // its other words mean nothing: see AbandonedClaims
			case layout.DirClaimed:
				found = append(found, checkClaim(where, e, names, i)...)
			default:
				found = append(found, fmt.Sprintf("%s: state %d, neither free (0) nor claimed (1)", where, st))
			}
		}
	}
	found = append(found, s.checkRefs()...)
	if s.closed.Load() {
		return nil, ErrClosed
	}
	for _, p := range s.readRegions().Problems {
		if fe, ok := p.(*layout.FormatError); ok {
			found = append(found, fe.Field+": "+fe.Detail)
		} else {
			found = append(found, p.Error())
		}
	}
	return found, nil
}

// AbandonedClaims returns a line for each free directory entry (of the
// owner-slot, upgrade-mutex and region directories) and each free claim
// reference record that is not zeroed: what a process that died before
// publishing its claim or reference leaves. That is no
// damage (a free entry's words mean nothing, and the next claim of the
// entry zeroes it first), but a tool may say so.
func (s *Segment) AbandonedClaims() ([]string, error) {
	var found []string
	for _, k := range []layout.Kind{layout.KindOwnerSlots, layout.KindUpgrades} {
		dk, _ := directoryOf(k)
		for i := range s.Len(k) {
			e, err := entry[layout.DirEntry](s, dk, i)
			if err != nil {
				return nil, err
			}
			if e.State.Load() == layout.DirFree &&
				(e.Refs.Load() != 0 || e.NameLen.Load() != 0 || e.Use.Load() != 0 || e.Claimer.Load() != 0 || layout.NameOf(e) != "") {
				found = append(found, fmt.Sprintf("%v[%d]: %s", dk, i, abandoned))
			}
		}
	}
	for j := range s.Len(layout.KindClaimRefs) {
		r, err := entry[layout.ClaimRef](s, layout.KindClaimRefs, j)
		if err != nil {
			return nil, err
		}
		if r.Owner.Load() == 0 && (r.Target.Load() != 0 || r.Count.Load() != 0) {
			found = append(found, fmt.Sprintf("%v[%d]: a reference record its process did not finish (it died); free, and the next reference reuses it", layout.KindClaimRefs, j))
		}
	}
	if s.closed.Load() {
		return nil, ErrClosed
	}
	for _, i := range s.readRegions().Abandoned {
		found = append(found, fmt.Sprintf("%v[%d]: %s", layout.KindRegionDirectory, i, abandoned))
	}
	return found, nil
}

const abandoned = "a claim its claimant did not finish (it died); free, and the next claim reuses the entry"

// checkRefs validates the claim references: each names a claimed entry of
// a claimable table and a process, and the references counted for an
// entry never exceed its directory's total.
func (s *Segment) checkRefs() []string {
	var found []string
	sum := map[uint32]uint64{}
	for j := range s.Len(layout.KindClaimRefs) {
		r, err := entry[layout.ClaimRef](s, layout.KindClaimRefs, j)
		if err != nil {
			return found
		}
		o := r.Owner.Load()
		where := fmt.Sprintf("%v[%d]", layout.KindClaimRefs, j)
		if o == 0 { // its other words mean nothing: see AbandonedClaims
			continue
		}
		if id, _ := proc.Unpack(o); id.PID == 0 {
			found = append(found, fmt.Sprintf("%s: owner %#x has no pid", where, o))
		}
		t := r.Target.Load()
		k, i := layout.SplitClaimTarget(t)
		dk, err := directoryOf(k)
		if err != nil || i >= s.Len(k) {
			found = append(found, fmt.Sprintf("%s: names %v[%d], which is no claimable entry", where, k, i))
			continue
		}
		d, err := entry[layout.DirEntry](s, dk, i)
		if err != nil {
			return found
		}
		if d.State.Load() != layout.DirClaimed {
			found = append(found, fmt.Sprintf("%s: names %v[%d], which is not claimed", where, k, i))
			continue
		}
		if sum[t] += uint64(r.Count.Load()); sum[t] > uint64(d.Refs.Load()) {
			found = append(found, fmt.Sprintf("%s: %v[%d] has %d references, fewer than its records count", where, k, i, d.Refs.Load()))
		}
	}
	return found
}

// checkClaim validates a claimed directory entry.
func checkClaim(where string, e *layout.DirEntry, names map[string]int, i int) []string {
	var found []string
	n := e.NameLen.Load()
	switch {
	case n > layout.MaxNameLen:
		found = append(found, fmt.Sprintf("%s: name length %d, at most %d", where, n, layout.MaxNameLen))
	case n > 0:
		name := string(e.Name[:n])
		if err := layout.CheckName(name); err != nil {
			found = append(found, fmt.Sprintf("%s: %v", where, err))
		} else if j, dup := names[name]; dup {
			found = append(found, fmt.Sprintf("%s: name %q claimed at %d too", where, name, j))
		} else {
			names[name] = i
		}
	}
	for _, b := range e.Name[min(int(n), len(e.Name)):] {
		if b != 0 {
			found = append(found, where+": bytes after the name are not zero")
			break
		}
	}
	if id, _ := proc.Unpack(e.Claimer.Load()); id.PID == 0 {
		found = append(found, where+": claimed by no process (claimer's pid is 0)")
	}
	return found
}
