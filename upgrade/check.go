package upgrade

import (
	"fmt"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/shm"
)

// Bits of the words that no operation ever sets (see state.go).
const (
	stateKnown   = stateWrite | stateUpgrade | statePending | stateInconsistent
	waitersKnown = waitersSharedMask | waitersEpoch | waitersUnique | sleepers.FutileMask
)

// Check validates upgrade mutex i of seg without changing anything and
// returns a line for each inconsistency: state bits no operation sets, a
// lock bit with no holder recorded (or a pending upgrade without the
// upgrade lock), a holder identity no process can have, a reader record
// that counts holds with no owner or more than MaxShared, a record in use
// that the drain mask leaves out. Nothing found: nil. Holds of dead
// processes are not damage (Reclaim frees them). It reads word by word
// without a lock, so under traffic a finding may be a moment's: check a
// quiet mutex, or check again.
func Check(seg *shm.Segment, i int) ([]string, error) {
	if seg == nil {
		return nil, shm.ErrNoSegment
	}
	m, err := open(seg, i)
	if err != nil {
		return nil, err
	}
	where := fmt.Sprintf("upgrade mutex %d", i)
	var found []string
	add := func(format string, args ...any) { found = append(found, where+": "+fmt.Sprintf(format, args...)) }
	st, w, u := m.e.State.Load(), m.e.Writer.Load(), m.e.Upgrader.Load()
	if bad := st &^ stateKnown; bad != 0 {
		add("state bits %#x that no operation sets", bad)
	}
	if st&stateUpgrade != 0 && u == 0 {
		add("upgrade lock held with no upgrade holder recorded")
	}
	if st&statePending != 0 && st&stateUpgrade == 0 {
		add("an upgrade pending without the upgrade lock")
	}
	if st&(stateWrite|stateUpgrade) == stateWrite && writerID(w) == 0 {
		add("unique lock held with no writer recorded")
	}
	if w&writerUnique != 0 {
		switch {
		case writerID(w) == 0:
			add("unique lock held (writer word %#x) with no writer recorded", w)
		case st&stateWrite != 0:
			add("unique lock held in both forms (writer word %#x, state %#x)", w, st)
		}
	}
	if id := writerID(w); id != 0 && pidOf(id) == 0 {
		add("writer %#x has no pid", w)
	}
	if u != 0 && pidOf(u) == 0 {
		add("upgrade holder %#x has no pid", u)
	}
	if bad := m.e.Waiters.Load() &^ waitersKnown; bad != 0 {
		add("sleeper bits %#x that no operation sets", bad)
	}
	mask := uint32(0)
	if len(m.readers) > 0 {
		mask = m.readers[0].Pad.Load()
	}
	for j, r := range m.readers {
		o, n := r.Owner.Load(), r.Count.Load()
		switch {
		case o == 0 && n != 0:
			add("reader record %d counts %d holds with no owner", j, n)
		case n > MaxShared:
			add("reader record %d counts %d holds, more than %d", j, n, MaxShared)
		}
		if o != 0 && pidOf(o) == 0 {
			add("reader record %d: owner %#x has no pid", j, o)
		}
		if n != 0 && mask&(1<<(j%maskBits)) == 0 {
			add("reader record %d counts holds, but the drain mask leaves it out (writers would not wait for it)", j)
		}
	}
	return found, nil
}

func pidOf(w uint64) uint32 {
	id, _ := proc.Unpack(w)
	return id.PID
}
