package shm

import (
	"fmt"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// recoverFromReboot runs on every writable Open. A segment in a file that
// survived a reboot records owners whose pids and start times belong to the
// previous boot and could match unrelated processes of this one. The first
// process to open it in this boot marks every recorded identity stale (so
// each lock is reclaimed from a dead owner, with the usual report to the new
// owner), frees the registry lock (recounting the claims' references first
// if a process of the previous boot held it), and only then records this
// boot as the owners' boot. Until that last store nobody of this boot can
// have used the segment, which is why a plain flock, released by the
// kernel if the recovering process dies, is enough to serialise
// recoverers.
//
// Tables that record owners must be listed in markStale.
func (s *Segment) recoverFromReboot() error {
	boot, err := proc.BootID()
	if err != nil {
		return err
	}
	if s.ownersBoot() == boot {
		return nil
	}
	if err := fsys.LockExclusive(s.file); err != nil {
		return fmt.Errorf("locking for reboot recovery: %w", err)
	}
	defer fsys.Unlock(s.file)
	if s.ownersBoot() == boot {
		return nil
	}
	if err := s.markStale(); err != nil {
		return err
	}
	if s.registry.Load() != 0 {
		// A process of the previous boot held the directory's lock, and
		// may have stopped between a claim's or a release's two counts:
		// recount, as a takeover from a dead holder does (lockRegistry),
		// or a reference that no record names stays for ever. Nobody of
		// this boot changes the directory before the boot is recorded.
		s.recountRefs()
	}
	s.registry.Store(0)
	s.regGen.Add(1)
	s.setOwnersBoot(boot)
	return nil
}

func (s *Segment) markStale() error {
	for i := range s.Len(layout.KindOwnerSlots) {
		slot, err := s.Slot(i)
		if err != nil {
			return err
		}
		staleWord(&slot.PID)
		d, err := entry[layout.DirEntry](s, layout.KindSlotDirectory, i)
		if err != nil {
			return err
		}
		staleWord(&d.Claimer)
	}
	for i := range s.Len(layout.KindUpgrades) {
		u, err := s.Upgrade(i)
		if err != nil {
			return err
		}
		staleWord(&u.Writer)
		staleWord(&u.Upgrader)
		d, err := entry[layout.DirEntry](s, layout.KindUpgradeDirectory, i)
		if err != nil {
			return err
		}
		staleWord(&d.Claimer)
	}
	for i := range s.Len(layout.KindLockMgr) {
		e, err := entry[layout.LockMgrEntry](s, layout.KindLockMgr, i)
		if err != nil {
			return err
		}
		staleWord(&e.Lock)
		for h := range e.Holders {
			staleWord(&e.Holders[h].Process)
			staleWord(&e.Holders[h].Companion)
		}
	}
	for i := range s.Len(layout.KindUpgradeReaders) {
		r, err := entry[layout.ReaderRecord](s, layout.KindUpgradeReaders, i)
		if err != nil {
			return err
		}
		staleWord(&r.Owner)
	}
	for i := range s.Len(layout.KindClaimRefs) {
		r, err := entry[layout.ClaimRef](s, layout.KindClaimRefs, i)
		if err != nil {
			return err
		}
		staleWord(&r.Owner)
	}
	return s.markTxnStale()
}

// markTxnStale marks the identities of package txn's tables: each
// record's owner, the barrier's leader, the holders of the arena's two
// locks and the pin rows' processes (see layout.TxnPinRows).
func (s *Segment) markTxnStale() error {
	recs := s.header.Table(layout.KindTxnRecords)
	for i := range recs.Count {
		if err := s.staleAt(recs.EntryOffset(i) + layout.TxnRecordOwner); err != nil {
			return err
		}
	}
	arena := s.header.Table(layout.KindTxnArena)
	if arena.Size() < layout.TxnCtlAreaSize {
		return nil // no room for the control area: package txn never used it
	}
	for _, off := range []uint64{layout.TxnLeader, layout.TxnAllocLock, layout.TxnBarrierLock} {
		if err := s.staleAt(arena.Offset + off); err != nil {
			return err
		}
	}
	rows, rowSize := layout.TxnPinRows(int(recs.Count), arena.Size())
	for row := range uint64(rows) {
		if err := s.staleAt(arena.Offset + layout.TxnCtlAreaSize + row*rowSize); err != nil {
			return err
		}
	}
	return nil
}

// staleAt marks the identity word at byte off of the segment.
func (s *Segment) staleAt(off uint64) error {
	w, err := memview.Uint64(s.mem, off)
	if err != nil {
		return err
	}
	staleWord(w)
	return nil
}

type word64 interface {
	Load() uint64
	CompareAndSwap(old, new uint64) bool
}

func staleWord(w word64) {
	for {
		old := w.Load()
		if old == 0 || w.CompareAndSwap(old, proc.MarkStale(old)) {
			return
		}
	}
}
