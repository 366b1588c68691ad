package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/txn"
	"github.com/shmlock/shmlock/upgrade"
)

// segmentUsers says who uses the segment at path, for commands that would
// remove or replace it: the processes that have it mapped, and every hold
// of a live process (or of an unknown one: a token-mode slot). Nothing
// found: nil. It opens the segment read-only and changes nothing. fi is
// the file it examined: the caller removes that file only
// (shm.RemoveIfSame), not whatever the path names by then, and refuses it
// first if another user owns it (foreignOwner).
func segmentUsers(path string) (found []string, fi fs.FileInfo, err error) {
	path, err = shm.ResolvePath(path)
	if err != nil {
		return nil, nil, err
	}
	if fi, err = os.Lstat(path); err != nil {
		return nil, nil, err
	}
	found, err = fileUsers(path, fi)
	if err != nil {
		return nil, nil, err
	}
	// The holds were read from the file Open found: it must be the one
	// whose owner and mappings were seen.
	if now, err := os.Lstat(path); err != nil || !os.SameFile(now, fi) {
		return nil, nil, fmt.Errorf("%w: %s", shm.ErrChanged, path)
	}
	return found, fi, nil
}

// foreignOwner is the owner of the file fi, and whether that is another
// user than this process's: whose segment it is not for this process to
// remove, used or not.
func foreignOwner(fi fs.FileInfo) (uid uint32, foreign bool) {
	uid, ok := fsys.Owner(fi)
	return uid, ok && uid != fsys.Euid()
}

// processUsers lists the processes that have the file fi mapped or open
// (one that opens a segment maps it a moment later).
func processUsers(fi fs.FileInfo) ([]string, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, nil
	}
	mapped, opened, err := proc.Users(uint64(st.Dev), st.Ino)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, pid := range mapped {
		found = append(found, fmt.Sprintf("mapped by process %d", pid))
	}
	for _, pid := range opened {
		found = append(found, fmt.Sprintf("open in process %d", pid))
	}
	return found, nil
}

// fileUsers is segmentUsers of the file fi at path.
func fileUsers(path string, fi fs.FileInfo) ([]string, error) {
	found, err := processUsers(fi)
	if err != nil {
		return nil, err
	}
	seg, err := shm.Open(path, shm.Options{ReadOnly: true, AllowForeignOwner: true, AllowOthersAccess: true})
	if errors.Is(err, layout.ErrVersion) {
		// A segment of a format this build does not read (an older
		// release's): its locks cannot be read here, but whoever uses it
		// maps it, which the check above has seen.
		return found, nil
	}
	if err != nil {
		return nil, err
	}
	defer seg.Close()
	live := func(w uint64) bool { return liveness(seg, w) == livenessAlive }
	pidOf := func(w uint64) uint32 { id, _ := proc.Unpack(w); return id.PID }

	for i := range seg.Len(layout.KindOwnerSlots) {
		s, err := seg.Slot(i)
		if err != nil {
			return nil, err
		}
		switch pid := s.PID.Load(); {
		case pid != 0 && live(pid):
			found = append(found, fmt.Sprintf("owner slot %d held by live process %d", i, pidOf(pid)))
		case pid == 0 && s.Token.Load() != 0 && s.TID.Load() == 0 && tokenSlot(seg, i):
			found = append(found, fmt.Sprintf("owner slot %d held in token mode (its holder cannot be known)", i))
		}
	}
	for i := range seg.Len(layout.KindUpgrades) {
		st, err := upgrade.Inspect(seg, i)
		if err != nil {
			return nil, err
		}
		if st.Writer != 0 && live(st.Writer) {
			found = append(found, fmt.Sprintf("upgrade mutex %d: writer is live process %d", i, pidOf(st.Writer)))
		}
		if st.Upgrader != 0 && live(st.Upgrader) {
			found = append(found, fmt.Sprintf("upgrade mutex %d: upgrade holder is live process %d", i, pidOf(st.Upgrader)))
		}
		for _, r := range st.Readers {
			if r.Count != 0 && live(r.Owner) {
				found = append(found, fmt.Sprintf("upgrade mutex %d: %d shared holds of live process %d", i, r.Count, pidOf(r.Owner)))
			}
		}
	}
	if seg.Len(layout.KindLockMgr) > 0 {
		m, err := lockmgr.Open(seg, lockmgr.Options{})
		if err != nil {
			return nil, err
		}
		for _, r := range m.List() {
			for _, h := range r.Holders {
				if h.Alive && h.State == lockmgr.Acquired {
					found = append(found, fmt.Sprintf("resource %q held by %q of live process %d", r.Resource, h.Owner, h.PID))
				}
			}
		}
	}
	if seg.Len(layout.KindTxnRecords) > 0 {
		snap, err := txn.Inspect(seg, false)
		if errors.Is(err, txn.ErrNoSpace) {
			// Records but no arena (create --txn-arena=-1): no
			// transaction can have begun, none is in use.
			return found, nil
		}
		if err != nil {
			return nil, err
		}
		for _, ti := range snap.Txns {
			if ti.OwnerAlive {
				found = append(found, fmt.Sprintf("transaction %d (%v) of live process %d", ti.Index, ti.State, pidOf(ti.Owner)))
			}
		}
		for _, r := range snap.Rows {
			if r.Alive {
				found = append(found, fmt.Sprintf("transaction space open in live process %d", pidOf(r.Owner)))
			}
		}
	}
	return found, nil
}

// tokenSlot reports whether owner slot i is used in token mode, as its
// claim says (a released pid/tid slot keeps its generation in Token).
func tokenSlot(seg *shm.Segment, i int) bool {
	claims, err := seg.Claims(layout.KindOwnerSlots)
	if err != nil {
		return false
	}
	for _, c := range claims {
		if c.Index == i {
			return c.Use == spinlock.Token.ClaimUse()
		}
	}
	return false
}
