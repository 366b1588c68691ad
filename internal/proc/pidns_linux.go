package proc

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ScanPIDNamespaces looks once through /proc for the processes of other
// PID namespaces than this process's (see PIDNamespaces). A process that
// starts during the scan may be missed: scan after whatever names the
// processes to judge was read, so that those were started before. The
// scan is unsound, and every answer of another namespace is an
// ErrCannotTell, where /proc is not of this process's PID namespace (a
// container's process that sees its host's /proc) or it hides processes
// (mounted with hidepid).
func ScanPIDNamespaces() *PIDNamespaces {
	own, err := pidNamespace()
	if err != nil {
		return failedScan(0, err)
	}
	procs, err := scanProcesses()
	if err != nil {
		return failedScan(own, err)
	}
	return newPIDNamespaces(own, procs)
}

// scanProcesses reads every process of /proc that is of another PID
// namespace than this process's, once it has checked that /proc shows
// this namespace's processes, all of them.
func scanProcesses() ([]scannedProcess, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	self, err := parseNSpid(b)
	if err != nil {
		return nil, err
	}
	if len(self) != 1 {
		return nil, fmt.Errorf("/proc is of another PID namespace than this process's (it has pids %v)", self)
	}
	if b, err = os.ReadFile("/proc/self/mountinfo"); err != nil {
		return nil, err
	}
	switch hides, err := parseProcHidesPIDs(b); {
	case err != nil:
		return nil, err
	case hides:
		return nil, fmt.Errorf("/proc is mounted with hidepid, which hides processes")
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var procs []scannedProcess
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if p, ok := scanProcess(pid); ok {
			procs = append(procs, p)
		}
	}
	return procs, nil
}

// scanProcess reads the process at the /proc pid pid: ok is false if it
// ended, or if it is of this process's PID namespace. Both files are read
// through one descriptor of its directory, which names that process only,
// not a later one that gets its pid.
func scanProcess(pid int) (p scannedProcess, ok bool) {
	p.pid = pid
	dir, err := unix.Open("/proc/"+strconv.Itoa(pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return p, !gone(err)
	}
	defer unix.Close(dir)
	status, err := readAt(dir, "status")
	if err != nil {
		return p, !gone(err)
	}
	nspid, err := parseNSpid(status)
	switch {
	case err != nil:
		return p, true // as good as refused: its pids are unknown
	case len(nspid) == 1:
		return p, false // this namespace's
	}
	p.inner = nspid[len(nspid)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(dir, "ns/pid", &st, 0); err != nil {
		return p, !gone(err)
	}
	p.ns = st.Ino
	return p, true
}

// readAt reads the file name of the directory dir.
func readAt(dir int, name string) ([]byte, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return io.ReadAll(f)
}

// timeNamespace returns the inode of the time namespace of the process at
// the /proc pid pid, or of this process for 0; 0 for this process where
// the kernel has no time namespaces (before Linux 5.6); an error wrapping
// ErrNoProcess if the process ended (a zombie has no namespaces left).
func timeNamespace(pid int) (uint64, error) {
	who := "self"
	if pid != 0 {
		who = strconv.Itoa(pid)
	}
	path := "/proc/" + who + "/ns/time"
	var st unix.Stat_t
	err := unix.Stat(path, &st)
	switch {
	case err == nil:
		return st.Ino, nil
	case pid == 0 && errors.Is(err, fs.ErrNotExist):
		return 0, nil
	case gone(err):
		return 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
	}
	return 0, fmt.Errorf("proc: %s: %w", path, err)
}

// viewedStart returns the start time that the process at the /proc pid pid
// reads for its pid inner in the /proc it has, through its root: its own
// start time where that /proc is its namespace's. It is an error wrapping
// ErrNoProcess if the process ended (it has no root left).
func viewedStart(pid int, inner uint32) (uint64, error) {
	root := "/proc/" + strconv.Itoa(pid) + "/root"
	if _, err := os.Stat(root); err != nil {
		if gone(err) {
			return 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
		}
		return 0, fmt.Errorf("proc: %w", err)
	}
	path := root + "/proc/" + strconv.FormatUint(uint64(inner), 10) + "/stat"
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("proc: %w", err)
	}
	_, start, err := parseStat(b)
	if err != nil {
		return 0, fmt.Errorf("%w in %s", err, path)
	}
	return start, nil
}
