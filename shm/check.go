package shm

import (
	"fmt"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// CheckDirectories validates the claim directories of the owner-slot and
// upgrade-mutex tables without changing anything, and returns a line for
// each damaged entry: a state no claim can leave, a free entry that is not
// zeroed, a claimed one with a bad name or claimer, a name claimed twice.
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
			case layout.DirFree:
				if e.Refs.Load() != 0 || e.NameLen.Load() != 0 || e.Use.Load() != 0 || e.Claimer.Load() != 0 || layout.NameOf(e) != "" {
					found = append(found, where+": a free entry that is not zeroed")
				}
			case layout.DirClaimed:
				found = append(found, checkClaim(where, e, names, i)...)
			default:
				found = append(found, fmt.Sprintf("%s: state %d, neither free (0) nor claimed (1)", where, st))
			}
		}
	}
	return found, nil
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
