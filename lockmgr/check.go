package lockmgr

import (
	"fmt"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// ctlKnown are the Ctl bits an entry may have (see entry.go).
const ctlKnown = kindMask | ctlDeclared | ctlModeMask | ctlInconsistent

// Check validates the lock-manager table without changing anything and
// returns a line for each damaged entry: Ctl bits or a mode no operation
// sets, a resource name that is no valid name or does not hash to the
// entry's hash, a mode with no holder (or holders with no mode, or more
// than one exclusive holder), a chain of overflow entries that leaves the
// table, loops, is too long or shares an entry with another chain, an
// overflow entry no chain reaches, a holder with no pid or a bad owner
// name, a resource that lookups cannot reach (past the header's reach, or
// past an entry never used). Nothing found: nil. It reads without the
// entry locks: under traffic a finding may be a moment's, so check a quiet
// table, or again.
func (m *Manager) Check() ([]string, error) {
	if m.closed() {
		return nil, ErrClosed
	}
	var found []string
	t := m.t
	reached := map[uint32]int{} // overflow entry -> the resource that links it
	for i := 1; i < len(t.entries); i++ {
		e := t.entries[i]
		ctl := e.Ctl.Load()
		where := fmt.Sprintf("lock-manager entry %d", i)
		add := func(format string, args ...any) { found = append(found, where+": "+fmt.Sprintf(format, args...)) }
		if bad := ctl &^ ctlKnown; bad != 0 {
			add("Ctl bits %#x that no operation sets", bad)
		}
		if kindOf(ctl) != kindResource {
			continue
		}
		name := unpack(e.Name[:])
		var k resKey
		if err := k.setResource(name); err != nil {
			add("resource name %q: %v", name, err)
		} else if k.hash != e.Hash.Load() {
			add("resource %q: its hash %#x is not its name's %#x", name, e.Hash.Load(), k.hash)
		}
		// Where lookups (table.search) look: from the home entry, no
		// farther than the header's reach, stopping at an entry never
		// used. (t.n is at least 1 here: entry i is one.)
		home := e.Hash.Load() % t.n
		d := (uint64(i-1) + t.n - home) % t.n
		if reach := uint64(t.head.Next.Load()); d > reach {
			add("resource %q lies %d entries past its home, beyond the reach lookups trust (%d)", name, d, reach)
		}
		for dd := range d {
			if j := t.probeFrom(home, dd); kindOf(t.entries[j].Ctl.Load()) == kindEmpty {
				add("resource %q: entry %d on its probe path was never used, and lookups stop there", name, j)
				break
			}
		}
		mode := modeOf(ctl)
		if mode != 0 && mode != Exclusive && mode != Collaborative {
			add("mode %d", mode)
		}
		holders := 0
		check := func(h *layout.LockMgrHolder, at string) {
			p := h.Process.Load()
			if p == 0 {
				return
			}
			holders++
			if id, _ := proc.Unpack(p); id.PID == 0 {
				add("%s: holder %#x has no pid", at, p)
			}
			var own ownKey
			if err := own.setOwner(unpack(h.Owner[:])); err != nil {
				add("%s: owner name: %v", at, err)
			}
		}
		for j := range e.Holders {
			check(&e.Holders[j], fmt.Sprintf("holder %d", j))
		}
		next, links := e.Next.Load(), 0
		for next != 0 {
			if uint64(next) >= uint64(len(t.entries)) {
				add("its chain leaves the table (entry %d)", next)
				break
			}
			o := t.entries[next]
			if kindOf(o.Ctl.Load()) != kindOverflow {
				add("its chain reaches entry %d, which is no overflow entry", next)
				break
			}
			if by, seen := reached[next]; seen {
				add("its chain reaches overflow entry %d, which entry %d's chain has already", next, by)
				break
			}
			reached[next] = i
			if links++; links > maxOverflow {
				add("its chain is longer than %d overflow entries", maxOverflow)
				break
			}
			for j := range o.Holders {
				check(&o.Holders[j], fmt.Sprintf("overflow entry %d holder %d", next, j))
			}
			next = o.Next.Load()
		}
		switch {
		case holders == 0 && mode != 0:
			add("mode %v with no holder", mode)
		case holders > 0 && mode == 0:
			add("%d holders with no mode", holders)
		case holders > 1 && mode == Exclusive:
			add("%d exclusive holders", holders)
		}
	}
	for i := 1; i < len(t.entries); i++ {
		if kindOf(t.entries[i].Ctl.Load()) == kindOverflow {
			if _, ok := reached[uint32(i)]; !ok {
				found = append(found, fmt.Sprintf("lock-manager entry %d: an overflow entry that no resource's chain reaches", i))
			}
		}
	}
	return found, nil
}
