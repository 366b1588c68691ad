package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// errNoHoldProcess is the error of --hold-for naming no running process.
var errNoHoldProcess = errors.New("--hold-for: no such process")

// holdProcess is the running process pid names.
func holdProcess(pid int) (proc.Identity, error) {
	if pid <= 0 || pid > proc.MaxPID {
		return proc.Identity{}, fmt.Errorf("%w: %d", errNoHoldProcess, pid)
	}
	id, err := proc.Lookup(uint32(pid))
	if err != nil || !proc.Alive(id) {
		return proc.Identity{}, fmt.Errorf("%w: %d", errNoHoldProcess, pid)
	}
	return id, nil
}

// holdOwner is the owner name of a hold kept for process id: its pid and
// start time, so that a later process with the same pid is another owner,
// and 'shmctl unlock --hold-for PID' finds the same name again.
func holdOwner(id proc.Identity) string {
	return fmt.Sprintf("hold-%d-%d", id.PID, id.StartTicks)
}

// holdForProcess ties the hold shmctl took to process opts.HoldFor, which
// keeps it alive once shmctl exits, and prints what a command would have
// found in its environment, as shell assignments.
func holdForProcess(m *lockmgr.Manager, opts *lockOptions, id proc.Identity, info lockmgr.LockInfo) error {
	owner := info.Owner
	err := m.SetCompanion(opts.Resource, owner, int(id.PID))
	if err == nil {
		// The companion is whatever process has the pid now: if the one
		// asked for ended and its pid was reused, that is not it.
		if now, lerr := holdProcess(int(id.PID)); lerr != nil || now.StartTicks != id.StartTicks {
			err = fmt.Errorf("%w: %d ended", errNoHoldProcess, id.PID)
		}
	}
	if err != nil {
		return errors.Join(fmt.Errorf("holding %q for process %d: %w", opts.Resource, opts.HoldFor, err),
			m.Release(opts.Resource, owner))
	}
	_, err = fmt.Fprintf(opts.IO.Out, "%s=%d\n%s=%s\n", envVersion, info.Version, envReclaimed, reclaimedEnv(info))
	return err
}

// runReleaseHold releases a hold of a resource by its owner: the one kept
// for process opts.HoldFor, or opts.Owner's.
func runReleaseHold(opts *unlockOptions) error {
	owner := opts.Owner
	if opts.HoldFor != 0 {
		id, err := holdProcess(opts.HoldFor)
		if err != nil {
			return err
		}
		owner = holdOwner(id)
	}
	seg, m, err := openLockTable(opts.Segment, shm.Options{GroupAccess: opts.Group})
	if err != nil {
		return err
	}
	defer seg.Close()
	ri, err := m.Inspect(opts.Name)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(ri.Holders, func(h lockmgr.HolderInfo) bool { return h.Owner == owner }) {
		return fmt.Errorf("%w: %q holds no lock on %q in %s", lockmgr.ErrLockNotHeld, owner, opts.Name, seg.Path())
	}
	// Reaching the unlock is the end the owner meant: whatever an earlier
	// holder's death left is repaired.
	return errors.Join(m.MarkConsistent(opts.Name, owner), m.Release(opts.Name, owner))
}
