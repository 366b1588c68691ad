package proc

import (
	"errors"
	"fmt"
	"testing"
)

// TestPIDNamespacesAlive judges the processes of other PID namespaces on
// scans made up: this namespace is 100, a child namespace 200 shows its
// pid 1 as /proc's 500, started at 42, and its pid 7 as 501; the
// namespace 300 shows nothing.
func TestPIDNamespacesAlive(t *testing.T) {
	t.Parallel()
	shown := []scannedProcess{{pid: 500, inner: 1, ns: 200}, {pid: 501, inner: 7, ns: 200}}
	const ownTime = 8
	sameTime := map[int]uint64{0: ownTime, 500: ownTime}
	viewedOwn := map[int]uint64{500: 42} // through its /proc, its namespace's, /proc's 500 sees its own start
	tests := []struct {
		name      string
		own       uint64
		procs     []scannedProcess
		timeNS    map[int]uint64 // of /proc pids, and 0 for this process; missing: the process ended
		viewed    map[int]uint64 // the start a /proc pid reads for its own pid; missing: it ended
		viewErr   bool           // reading that start fails
		ns        uint64
		id        Identity
		alive, ok bool // ok false: ErrCannotTell
	}{
		{"the maker runs", 100, shown, nil, nil, false, 200, Identity{1, 42}, true, true},
		{"its pid now names a later process", 100, shown, sameTime, viewedOwn, false, 200, Identity{1, 41}, false, true},
		{"... on a kernel without time namespaces", 100, shown, map[int]uint64{0: 0}, viewedOwn, false, 200, Identity{1, 41}, false, true},
		{"... of another time namespace, which shifts start times", 100, shown, map[int]uint64{0: ownTime, 500: 9}, viewedOwn, false,
			200, Identity{1, 41}, false, false},
		{"... whose /proc, not its namespace's, shows the maker's start at the pid", 100, shown, sameTime, map[int]uint64{500: 41}, false,
			200, Identity{1, 41}, false, false},
		{"... whose /proc, not its namespace's, shows at the pid a later process than the one the maker read", 100, shown, sameTime,
			map[int]uint64{500: 43}, false, 200, Identity{1, 41}, false, false},
		{"... whose /proc cannot be read", 100, shown, sameTime, nil, true, 200, Identity{1, 41}, false, false},
		{"no process of the namespace has the pid", 100, shown, nil, nil, false, 200, Identity{3, 42}, false, true},
		{"a namespace not shown may be out of sight", 100, shown, nil, nil, false, 300, Identity{1, 42}, false, false},
		{"in the initial namespace, one not shown has no process", InitialPIDNamespace, shown, nil, nil, false, 300, Identity{1, 42}, false, true},
		{"this namespace's own process", 100, shown, nil, nil, false, 100, Identity{3, 42}, true, true},
		{"a process of unread namespace has the pid", InitialPIDNamespace, append(shown, scannedProcess{pid: 502, inner: 3}), nil, nil, false,
			200, Identity{3, 42}, false, false},
		{"... another pid", InitialPIDNamespace, append(shown, scannedProcess{pid: 502, inner: 4}), nil, nil, false, 200, Identity{3, 42}, false, true},
		{"... yet the maker is found", 100, append(shown, scannedProcess{pid: 502, inner: 1}), nil, nil, false, 200, Identity{1, 42}, true, true},
		{"a status unread", InitialPIDNamespace, append(shown, scannedProcess{pid: 503}), nil, nil, false, 300, Identity{1, 42}, false, false},
		{"... yet the maker, found, is judged", 100, append(shown, scannedProcess{pid: 503}), nil, nil, false, 200, Identity{1, 42}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newPIDNamespaces(tt.own, tt.procs)
			s.alive = func(id Identity) bool {
				// /proc's 500 started at 42; a process of this namespace runs if it started then.
				return id.StartTicks == 42 && (id.PID == 500 || tt.ns == tt.own)
			}
			s.timeNamespace = func(pid int) (uint64, error) {
				if ns, ok := tt.timeNS[pid]; ok {
					return ns, nil
				}
				return 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
			}
			s.viewedStart = func(pid int, inner uint32) (uint64, error) {
				if tt.viewErr {
					return 0, errors.New("permission denied")
				}
				if start, ok := tt.viewed[pid]; ok {
					return start, nil
				}
				return 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
			}
			s.startOf = func(pid int) (uint64, error) {
				if pid == 500 {
					return 42, nil
				}
				return 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
			}
			alive, err := s.Alive(tt.ns, tt.id)
			if alive != tt.alive || tt.ok != (err == nil) || err != nil && !errors.Is(err, ErrCannotTell) {
				t.Errorf("got %v, %v; want %v, ok %v (else ErrCannotTell)", alive, err, tt.alive, tt.ok)
			}
		})
	}
}

// A process of a child namespace that has the maker's pid there, but not
// its start, and has no namespaces nor root left: it ended, and the maker
// is dead, unless it runs all the same, its leader thread exited and its
// other threads running (a zombie leader). Its pid in /proc is 500, and
// it started at 42. Before, a zombie leader was taken for an ended
// process: a maker whose /proc is not its namespace's, or of another time
// namespace, and whose main thread had exited, was judged dead.
func TestPIDNamespacesLeaderGone(t *testing.T) {
	t.Parallel()
	shown := []scannedProcess{{pid: 500, inner: 1, ns: 200}}
	tests := []struct {
		name      string
		ownTime   uint64 // the inode of this process's time namespace; 0: a kernel without them
		stat      bool   // its stat is still there
		runs      bool   // a thread of it runs
		alive, ok bool   // ok false: ErrCannotTell
	}{
		{"ended before its start was read", 8, false, false, false, true},
		{"ended after", 8, true, false, false, true},
		{"... on a kernel without time namespaces", 0, true, false, false, true},
		{"a zombie leader, its other threads running", 8, true, true, false, false},
		{"... on a kernel without time namespaces", 0, true, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newPIDNamespaces(100, shown)
			s.alive = func(id Identity) bool { return id.PID == 500 && id.StartTicks == 42 && tt.runs }
			s.startOf = func(pid int) (uint64, error) {
				if pid == 500 && tt.stat {
					return 42, nil
				}
				return 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
			}
			s.timeNamespace = func(pid int) (uint64, error) {
				if pid == 0 {
					return tt.ownTime, nil
				}
				return 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
			}
			s.viewedStart = func(pid int, _ uint32) (uint64, error) {
				return 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
			}
			alive, err := s.Alive(200, Identity{1, 41})
			if alive != tt.alive || tt.ok != (err == nil) || err != nil && !errors.Is(err, ErrCannotTell) {
				t.Errorf("got %v, %v; want %v, ok %v (else ErrCannotTell)", alive, err, tt.alive, tt.ok)
			}
		})
	}
}

// A scan that failed judges nothing of another namespace.
func TestPIDNamespacesFailedScan(t *testing.T) {
	t.Parallel()
	s := failedScan(InitialPIDNamespace, errors.New("/proc is mounted with hidepid"))
	if alive, err := s.Alive(200, Identity{1, 42}); alive || !errors.Is(err, ErrCannotTell) {
		t.Errorf("got %v, %v; want false, ErrCannotTell", alive, err)
	}
}
