package main

import (
	"fmt"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// Owner states, as info and slots report them.
const (
	stateAlive = "alive" // the recorded process is running
	stateDead  = "dead"  // it exited, or its pid now names another process
	stateStale = "stale" // recorded under a previous boot: dead too
	stateNone  = "none"  // no owner recorded (printed "-" in tables)
)

// Slot modes (see layout.OwnerSlot). spinlock.Named records the mode in the
// slot directory; for a slot claimed without it the mode is guessed from the
// words, and a pid/tid slot after its release (pid 0, a non-zero generation)
// then reads as "token": the slot alone cannot tell the two apart.
const (
	modePIDTID = "pid/tid"
	modeToken  = "token"
	modeFree   = "free"
)

// readInfo gathers what info and create print about seg.
func readInfo(seg *shm.Segment) (*infoJSON, error) {
	h := seg.Header()
	boot, err := proc.BootID()
	if err != nil {
		return nil, err
	}
	ns, err := proc.PIDNamespace()
	if err != nil {
		return nil, err
	}
	info := &infoJSON{
		Path:             seg.Path(),
		Version:          h.Version,
		TotalSize:        h.TotalSize,
		Created:          h.Created.UTC(),
		BootID:           formatUUID(h.BootID),
		CurrentBoot:      h.BootID == boot,
		PIDNamespace:     h.PIDNamespace,
		SamePIDNamespace: h.PIDNamespace == ns,
		GroupAccess:      h.Flags&layout.FlagGroupAccess != 0,
		Tables:           make([]tableJSON, 0, layout.NumTables),
	}

	// The header's creator word is never marked stale (the header is
	// immutable), so a creator of another boot is stale by the boot id.
	id, _ := proc.Unpack(h.Creator)
	info.Creator = creatorJSON{PID: id.PID, StartTicks: id.StartTicks, State: stateStale}
	if info.CurrentBoot {
		info.Creator.State = ownerState(seg, h.Creator)
		if t, err := id.StartTime(); err == nil {
			t = t.UTC()
			info.Creator.Started = &t
		}
	}
	info.Creator.Alive = info.Creator.State == stateAlive

	for i := range layout.NumTables {
		k := layout.Kind(i + 1)
		t := h.Table(k)
		tj := tableJSON{Kind: k.String(), EntrySize: t.EntrySize, Count: t.Count, Offset: t.Offset, Size: t.Size()}
		if k == layout.KindOwnerSlots || k == layout.KindUpgrades {
			claims, err := seg.Claims(k)
			if err != nil {
				return nil, fmt.Errorf("reading the %v directory: %w", k, err)
			}
			n := len(claims)
			tj.Claimed = &n
		}
		if err := dataUse(seg, k, &tj); err != nil {
			return nil, err
		}
		info.Tables = append(info.Tables, tj)
	}
	return info, nil
}

// readSlots gathers the owner slots of seg that are in use (claimed in the
// directory or with any non-zero field), or all of them.
func readSlots(seg *shm.Segment, all bool) (*slotsJSON, error) {
	byIndex, err := claimsByIndex(seg, layout.KindOwnerSlots, "slot")
	if err != nil {
		return nil, err
	}
	doc := &slotsJSON{Path: seg.Path(), Slots: []slotJSON{}}
	for i := range seg.Len(layout.KindOwnerSlots) {
		s, err := seg.Slot(i)
		if err != nil {
			return nil, err
		}
		pidWord := s.PID.Load()
		c, claimed := byIndex[i]
		sj := slotJSON{
			Index:        i,
			Name:         c.Name,
			Refs:         c.Refs,
			ownerJSON:    ownerOf(seg, pidWord),
			TID:          s.TID.Load(),
			Token:        s.Token.Load(),
			Recursion:    s.RecursionCount.Load() & layout.SlotRecursion,
			Waiters:      s.Sleepers(),
			Inconsistent: s.RecursionCount.Load()&layout.SlotInconsistent != 0,
		}
		mode, said := spinlock.ModeOfClaimUse(c.Use)
		switch {
		case said && mode == spinlock.PIDTID:
			sj.Mode = modePIDTID
		case said:
			sj.Mode = modeToken
		case pidWord != 0:
			sj.Mode = modePIDTID
		case sj.Token != 0:
			sj.Mode = modeToken
		default:
			sj.Mode = modeFree
		}
		inUse := claimed || pidWord != 0 || sj.TID != 0 || sj.Token != 0 || sj.Recursion != 0 || sj.Waiters != 0 || sj.Inconsistent
		if inUse || all {
			doc.Slots = append(doc.Slots, sj)
		}
	}
	return doc, nil
}

// ownerOf is the packed identity w as the JSON documents show an owner.
func ownerOf(seg *shm.Segment, w uint64) ownerJSON {
	id, _ := proc.Unpack(w)
	return ownerJSON{PID: id.PID, StartTicks: id.StartTicks, OwnerState: ownerState(seg, w)}
}

// ownerState says whether the packed identity w names a live process. An
// owner recorded under another boot is stale even before a writable open
// has marked it so.
func ownerState(seg *shm.Segment, w uint64) string {
	switch _, stale := proc.Unpack(w); {
	case w == 0:
		return stateNone
	case stale || seg.OwnersFromOtherBoot():
		return stateStale
	case seg.OwnerAlive(w):
		return stateAlive
	}
	return stateDead
}

// formatUUID writes a boot id in the 8-4-4-4-12 form of
// /proc/sys/kernel/random/boot_id.
func formatUUID(b [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// claimsByIndex reads the directory of seg's table kind (the what
// directory, for the error) into a map by entry index.
func claimsByIndex(seg *shm.Segment, kind layout.Kind, what string) (map[int]shm.Claim, error) {
	claims, err := seg.Claims(kind)
	if err != nil {
		return nil, fmt.Errorf("reading the %s directory: %w", what, err)
	}
	byIndex := make(map[int]shm.Claim, len(claims))
	for _, c := range claims {
		byIndex[c.Index] = c
	}
	return byIndex, nil
}
