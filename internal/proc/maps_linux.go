package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// MappedBy returns the pids of the processes that have the file of device
// dev and inode ino mapped, as their /proc/<pid>/maps say, leaving out this
// process. Processes whose maps this user cannot read (another user's,
// without privileges) are left out too: the answer is a lower bound.
//
// A child this process is starting (os/exec clones with CLONE_VM and
// CLONE_VFORK) runs in this process's address space until its exec, and
// its maps are ours then: it is left out with this process (sharesOurVM),
// and one that has exec'd meanwhile is read again, so that only a new
// image that maps the file itself is counted. Without this, a segment this
// process maps was found "in use" by its own child of the moment.
func MappedBy(dev, ino uint64) ([]int, error) {
	want := mapsKey(dev, ino)
	return otherProcesses(func(pid int) bool { return mapsFile(pid, want) })
}

// OpenHere reports whether this process has the file of device dev and
// inode ino open, which OpenedBy leaves out.
func OpenHere(dev, ino uint64) bool { return hasOpen(os.Getpid(), dev, ino) }

// mapsKey is how a line of /proc/<pid>/maps names the file dev, ino.
func mapsKey(dev, ino uint64) []byte {
	return []byte(fmt.Sprintf("%02x:%02x %d", unix.Major(dev), unix.Minor(dev), ino))
}

// otherProcesses returns the pids of the processes but this one for which
// uses holds, leaving out a child of the moment that runs in this
// process's address space (sharesOurVM): uses is asked again after that
// check, so that a child that has exec'd meanwhile counts only for what
// its new image does.
func otherProcesses(uses func(pid int) bool) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("proc: %w", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if uses(pid) && !sharesOurVM(pid) && uses(pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// OpenedBy returns the pids of the processes that have the file of device
// dev and inode ino open, as their /proc/<pid>/fd say, leaving out this
// process and a child of the moment in its address space (as MappedBy:
// until its exec it holds copies of this process's descriptors). A
// process opens a segment a moment before it maps it: MappedBy alone
// misses it then. Processes whose descriptors this user cannot read are
// left out: the answer is a lower bound.
func OpenedBy(dev, ino uint64) ([]int, error) {
	return otherProcesses(func(pid int) bool { return hasOpen(pid, dev, ino) })
}

// Users returns the other processes that use the file of device dev and
// inode ino: those that have it mapped (MappedBy), and those that have it
// open but not mapped (OpenedBy).
func Users(dev, ino uint64) (mapped, opened []int, err error) {
	if mapped, err = MappedBy(dev, ino); err != nil {
		return nil, nil, err
	}
	all, err := OpenedBy(dev, ino)
	if err != nil {
		return nil, nil, err
	}
	for _, pid := range all {
		if !slices.Contains(mapped, pid) {
			opened = append(opened, pid)
		}
	}
	return mapped, opened, nil
}

// hasOpen reports whether a descriptor of process pid names the file dev,
// ino (a stat through /proc/<pid>/fd/N reaches the file itself, even one
// whose name is gone).
func hasOpen(pid int, dev, ino uint64) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false // gone, or not ours to read
	}
	for _, fd := range fds {
		var st unix.Stat_t
		if unix.Stat(dir+fd.Name(), &st) == nil && uint64(st.Dev) == dev && st.Ino == ino {
			return true
		}
	}
	return false
}

// mapsFile reports whether a line of /proc/<pid>/maps names the mapping of
// the file "dev inode" in want: the line's fourth and fifth fields.
func mapsFile(pid int, want []byte) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return false // gone, or not ours to read
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) >= 5 && bytes.Equal(bytes.Join(fields[3:5], []byte(" ")), want) {
			return true
		}
	}
	return false
}

// kcmpVM is KCMP_VM of linux/kcmp.h: kcmp compares the address spaces.
const kcmpVM = 1

// sharesOurVM reports whether process pid runs in this process's address
// space (kcmp(2) says equal). A kernel without kcmp, or a process this one
// may not inspect, says no: the process is then counted, as before.
func sharesOurVM(pid int) bool {
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(pid), kcmpVM, 0, 0, 0)
	return errno == 0 && r == 0
}
