package main

import (
	"fmt"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
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

// readInfo gathers what info and create (the command) print about seg.
func readInfo(seg *shm.Segment, command string) (*infoJSON, error) {
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
		docHeader:        header(command),
		Path:             seg.Path(),
		FormatVersion:    h.Version,
		TotalBytes:       h.TotalSize,
		Created:          h.Created.UTC(),
		Creator:          processOf(seg, h.Creator),
		BootID:           formatUUID(h.BootID),
		CurrentBoot:      h.BootID == boot,
		PIDNamespace:     idString(h.PIDNamespace),
		SamePIDNamespace: h.PIDNamespace == ns,
		GroupAccess:      h.Flags&layout.FlagGroupAccess != 0,
		Tables:           make([]tableJSON, 0, layout.NumTables),
	}
	if info.Creator == nil {
		// validation refuses a header without a creator
		return nil, fmt.Errorf("%s: the header records no creator", seg.Path())
	}
	// The header's creator word is never marked stale (the header is
	// immutable), so a creator of another boot is stale by the boot id.
	if !info.CurrentBoot {
		info.Creator.Liveness, info.Creator.Started = livenessStale, nil
	}

	for i := range layout.NumTables {
		k := layout.Kind(i + 1)
		t := h.Table(k)
		tj := tableJSON{Kind: k.String(), EntryBytes: t.EntrySize, Entries: t.Count, Capacity: t.Count,
			Offset: t.Offset, Bytes: t.Size()}
		if k == layout.KindLockMgr && t.Count > 0 {
			tj.Capacity = t.Count - 1 // the first entry is the table's header
		}
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
	doc := &slotsJSON{docHeader: header("slots"), Path: seg.Path(), Slots: []slotJSON{}}
	for i := range seg.Len(layout.KindOwnerSlots) {
		s, err := seg.Slot(i)
		if err != nil {
			return nil, err
		}
		pidWord, tidWord, tokenWord := s.PID.Load(), s.TID.Load(), s.Token.Load()
		c, claimed := byIndex[i]
		sj := slotJSON{
			Index:        i,
			Name:         optName(c.Name, claimed),
			Refs:         c.Refs,
			Process:      processOf(seg, pidWord),
			TID:          optID(tidWord),
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
		case tokenWord != 0:
			sj.Mode = modeToken
		default:
			sj.Mode = modeFree
		}
		// The token word is the holder's token in token mode and the
		// generation in pid/tid mode (layout.OwnerSlot).
		switch sj.Mode {
		case modePIDTID:
			gen := idString(tokenWord)
			sj.Generation = &gen
		case modeToken:
			sj.Token = optID(tokenWord)
		}
		inUse := claimed || pidWord != 0 || tidWord != 0 || tokenWord != 0 || sj.Recursion != 0 || sj.Waiters != 0 || sj.Inconsistent
		if inUse || all {
			doc.Slots = append(doc.Slots, sj)
		}
	}
	return doc, nil
}

// processOf is the process of the packed identity w, as every document
// shows one; nil (null) if w is 0, no process.
func processOf(seg *shm.Segment, w uint64) *processJSON {
	if w == 0 {
		return nil
	}
	id, _ := proc.Unpack(w)
	p := &processJSON{PID: id.PID, StartTicks: id.StartTicks, Liveness: liveness(seg, w)}
	if p.Liveness != livenessStale { // ticks of another boot give no time
		if t, err := id.StartTime(); err == nil {
			t = t.UTC()
			p.Started = &t
		}
	}
	return p
}

// liveness says whether the process of the packed identity w (not 0)
// lives. An owner recorded under another boot is stale even before a
// writable open has marked it so; a process of another PID namespace
// cannot be judged by its pid here.
func liveness(seg *shm.Segment, w uint64) string {
	switch _, stale := proc.Unpack(w); {
	case stale || seg.OwnersFromOtherBoot():
		return livenessStale
	case !samePIDNamespace(seg):
		return livenessUnknown
	case seg.OwnerAlive(w):
		return livenessAlive
	}
	return livenessDead
}

// samePIDNamespace reports whether seg was made in this process's PID
// namespace (false if that cannot be read).
func samePIDNamespace(seg *shm.Segment) bool {
	ns, err := proc.PIDNamespace()
	return err == nil && seg.Header().PIDNamespace == ns
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
