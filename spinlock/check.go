package spinlock

import (
	"fmt"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// maxPlausibleSleepers bounds the sleeper count of a slot that Check
// believes: each sleeper is a goroutine or thread blocked in a futex call,
// holding an OS thread (Go allows 10000 threads a process), and the count
// has 16 bits (layout.PadSleepers), so a count past half of them is damage.
const maxPlausibleSleepers = 1 << 15

// Check validates the owner slots of seg without changing anything and
// returns a line for each damaged one: an owner identity no process can
// have, a free slot with a holder id or recursion, a token-mode slot (as
// its claim says) that records a process, a sleeper count no process
// could reach. Nothing found: nil. Holds of dead processes are not damage
// (shmctl reclaim frees them).
func Check(seg *shm.Segment) ([]string, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	claims, err := seg.Claims(layout.KindOwnerSlots)
	if err != nil {
		return nil, err
	}
	var found []string
	use := map[int]uint32{}
	for _, c := range claims {
		use[c.Index] = c.Use
		if _, ok := ModeOfClaimUse(c.Use); !ok && c.Use != 0 {
			found = append(found, fmt.Sprintf("owner slot %d: claimed for use %d, which is no mode", c.Index, c.Use))
		}
	}
	for i := range seg.Len(layout.KindOwnerSlots) {
		s, err := seg.Slot(i)
		if err != nil {
			return nil, err
		}
		where := fmt.Sprintf("owner slot %d", i)
		pid, tid, rec := s.PID.Load(), s.TID.Load(), s.RecursionCount.Load()
		mode, said := ModeOfClaimUse(use[i])
		switch {
		case pid != 0 && said && mode == Token:
			found = append(found, where+": a token-mode slot records a process")
		case pid != 0:
			if id, _ := proc.Unpack(pid); id.PID == 0 {
				found = append(found, fmt.Sprintf("%s: owner %#x has no pid", where, pid))
			}
			// A holder id of 0 is no damage: a holder that died between
			// its CAS and its store of the id leaves one.
		default:
			if tid != 0 {
				found = append(found, where+": free, with a holder id")
			}
			if rec&layout.SlotRecursion != 0 {
				found = append(found, fmt.Sprintf("%s: free, with recursion count %d", where, rec&layout.SlotRecursion))
			}
		}
		if n := s.Sleepers(); n > maxPlausibleSleepers {
			found = append(found, fmt.Sprintf("%s: %d sleepers", where, n))
		}
	}
	return found, nil
}
