package proc

import (
	"errors"
	"fmt"
)

// InitialPIDNamespace is the inode of the initial PID namespace, the one
// the kernel starts in: the kernel's PROC_PID_INIT_INO, fixed since Linux
// 3.8, while every namespace made later gets an inode from 0xF0000000 up
// (proc_alloc_inum), so no other namespace has it. It is the one sound
// test of "initial": inside any namespace, its own init is pid 1 and its
// /proc starts there, just as in the initial one.
const InitialPIDNamespace = 0xEFFFFFFC

// PIDNamespaces is what one look through /proc (ScanPIDNamespaces) found
// of the processes of other PID namespaces than this process's, so that
// the makers of many hidden names are judged on one scan.
//
// A process is in /proc only for its own PID namespace and that one's
// ancestors, with a pid in each; NSpid in /proc/<pid>/status lists them
// from the namespace of the /proc read down to the process's own. So where
// one process of a namespace is shown, all of them are, and a process of
// that namespace with a given pid in it is there or does not exist. Where
// none is shown, the namespace is not a descendant of this one (a sibling,
// a parent: its processes are out of sight) or it has no process left; a
// namespace whose init has exited never gets one again. Only the initial
// namespace, of which every namespace is a descendant, tells these apart:
// there, a namespace with no process shown has none. Anything that hides
// a process from the scan (a status or ns/pid refused, hidepid) leaves the
// answer unknown where that process may be the one sought.
type PIDNamespaces struct {
	own uint64 // this process's PID namespace
	err error  // why nothing can be judged (wraps ErrCannotTell); nil if the scan is sound
	// byNS maps each namespace shown (a descendant of own) to the pids of
	// its processes there, each to its pid in /proc.
	byNS map[uint64]map[uint32]int
	// unplaced maps a pid in its own namespace to the /proc pid of a
	// process of another namespace than own that has it, and whose
	// namespace could not be read (ns/pid refused): it may be any.
	unplaced map[uint32]int
	// unread is the /proc pid of a process whose status could not be
	// read, so that its pids in every namespace are unknown; 0 if none.
	unread int
	// alive is Alive, timeNamespace reads the inode of the time namespace
	// of the process at a /proc pid, viewedStart what start time it reads
	// for a pid in its own /proc, and startOf its start time as this
	// process reads it (see reused); tests replace them.
	alive         func(Identity) bool
	timeNamespace func(pid int) (uint64, error)
	viewedStart   func(pid int, inner uint32) (uint64, error)
	startOf       func(pid int) (uint64, error)
}

// A scannedProcess is what a scan read of one process of /proc that is
// of another PID namespace than this process's (NSpid has more than one
// pid).
type scannedProcess struct {
	pid   int    // in /proc
	inner uint32 // its pid in its own namespace (the last of NSpid); 0: the status was refused
	ns    uint64 // its PID namespace; 0: ns/pid was refused
}

// newPIDNamespaces records the processes a scan found for a process of
// the PID namespace own whose /proc is of that namespace.
func newPIDNamespaces(own uint64, procs []scannedProcess) *PIDNamespaces {
	s := &PIDNamespaces{own: own, byNS: map[uint64]map[uint32]int{},
		unplaced: map[uint32]int{}, alive: Alive, timeNamespace: timeNamespace, viewedStart: viewedStart, startOf: startOf}
	for _, p := range procs {
		switch {
		case p.inner == 0:
			s.unread = p.pid
		case p.ns == 0:
			s.unplaced[p.inner] = p.pid
		default:
			if s.byNS[p.ns] == nil {
				s.byNS[p.ns] = map[uint32]int{}
			}
			s.byNS[p.ns][p.inner] = p.pid
		}
	}
	return s
}

// failedScan is a scan, by a process of the PID namespace own (0 if
// unknown), that judges no process of another namespace: err says why.
func failedScan(own uint64, err error) *PIDNamespaces {
	s := newPIDNamespaces(own, nil)
	s.err = fmt.Errorf("%w: %w", ErrCannotTell, err)
	return s
}

// Alive says whether the process id, whose pid and start time are as it
// read them itself in its PID namespace ns, runs: true if the process
// with that pid in ns started then, false if it is dead, and an error
// wrapping ErrCannotTell if the scan cannot tell (see PIDNamespaces). It
// never says a live process is dead; one that ended after the scan may
// still be said to run.
//
// The start time is field 22 of /proc/<pid>/stat, clock ticks since boot
// whatever PID namespace reads it: the kernel keeps one start time per
// process. A different start is a reused pid, unless the process read its
// own where this one cannot compare it (see reused).
func (s *PIDNamespaces) Alive(ns uint64, id Identity) (bool, error) {
	switch {
	case ns == s.own:
		return s.alive(id), nil
	case s.err != nil:
		return false, s.err
	}
	if pid, ok := s.byNS[ns][id.PID]; ok {
		if s.alive(Identity{PID: uint32(pid), StartTicks: id.StartTicks}) {
			return true, nil
		}
		return false, s.reused(pid, id)
	}
	if pid, ok := s.unplaced[id.PID]; ok {
		return false, fmt.Errorf("%w: process %d has pid %d in its PID namespace, which may not be read", ErrCannotTell, pid, id.PID)
	}
	if s.unread != 0 {
		return false, fmt.Errorf("%w: /proc/%d/status may not be read", ErrCannotTell, s.unread)
	}
	// The initial namespace's /proc shows every process.
	if _, shown := s.byNS[ns]; shown || s.own == InitialPIDNamespace {
		return false, nil
	}
	return false, fmt.Errorf("%w: no process of pid:[%d] is shown here: it is not below this namespace, or it has none left, which only the initial PID namespace tells apart",
		ErrCannotTell, ns)
}

// reused is nil if the process at the /proc pid pid, which has id's pid
// in its namespace but does not run with id's start time as this process
// reads it, proves id dead: it ended, or it is a later process with that
// pid. Otherwise it is an error wrapping ErrCannotTell: it may be id all
// the same, which read its start time where this process cannot compare
// it. The kernel adds the boot-time offset of the reader's time namespace
// to field 22 (Linux 5.6 and later), so a process of another time
// namespace may have read it shifted (sameClock). And a process whose
// /proc is not its namespace's (one started with unshare --pid but no
// /proc of its own) read another process's, the one at its pid in the
// /proc it has: its start says nothing, whether that process still runs
// (the same start again) or has ended and a later one has its pid there
// (another). So the process is proven to be no id only where its /proc
// shows, at its pid, itself (viewedStart is its own start): then it read
// its own start, and id's is another.
//
// A process that ended has no namespaces and no root left, and so has a
// process whose leader thread exited while its other threads run (a
// zombie leader, as after pthread_exit in a C program's main): such a
// process runs all the same (Alive, with its own start, says so).
func (s *PIDNamespaces) reused(pid int, id Identity) error {
	start, err := s.startOf(pid)
	switch {
	case errors.Is(err, ErrNoProcess):
		return nil
	case err != nil:
		return fmt.Errorf("%w: the start time of process %d: %w", ErrCannotTell, pid, err)
	}
	noneLeft := func(err error) error {
		if s.alive(Identity{PID: uint32(pid), StartTicks: start}) {
			return fmt.Errorf("%w: process %d runs, but its leader thread has exited (%v)", ErrCannotTell, pid, err)
		}
		return nil
	}
	if err := s.sameClock(pid); err != nil {
		if errors.Is(err, ErrNoProcess) {
			return noneLeft(err)
		}
		return err
	}
	viewed, err := s.viewedStart(pid, id.PID)
	switch {
	case errors.Is(err, ErrNoProcess):
		return noneLeft(err)
	case err != nil:
		return fmt.Errorf("%w: the start time process %d sees for itself: %w", ErrCannotTell, pid, err)
	case viewed&startMask != start&startMask:
		return fmt.Errorf("%w: process %d sees at its pid %d another process, in its /proc, which is not its namespace's: it may have read that one's start",
			ErrCannotTell, pid, id.PID)
	}
	return nil
}

// sameClock is nil if the process at the /proc pid pid reads start times
// as this process does (the same time namespace, or a kernel without
// them); an error wrapping ErrNoProcess if it has no namespaces left (see
// reused); otherwise its start time may have been shifted: an error
// wrapping ErrCannotTell.
func (s *PIDNamespaces) sameClock(pid int) error {
	own, err := s.timeNamespace(0)
	if err != nil {
		return fmt.Errorf("%w: this process's time namespace: %w", ErrCannotTell, err)
	}
	if own == 0 {
		return nil
	}
	ns, err := s.timeNamespace(pid)
	switch {
	case errors.Is(err, ErrNoProcess):
		return err
	case err != nil:
		return fmt.Errorf("%w: the time namespace of process %d: %w", ErrCannotTell, pid, err)
	case ns != own:
		return fmt.Errorf("%w: process %d, of another time namespace, may see another start time", ErrCannotTell, pid)
	}
	return nil
}

// startOf returns the start time of the process at the /proc pid pid, as
// this process reads it; an error wrapping ErrNoProcess if it ended.
func startOf(pid int) (uint64, error) {
	_, start, err := readStat(uint32(pid))
	return start, err
}
