package testproc

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sweepDead removes the segments that test processes now gone left in dir
// (names from SegmentPath: prefix, then the creator's PID). A process
// killed in the middle of a test cannot clean up after it: the fuzzing
// engine kills its workers when a run ends (a FuzzCorruptSegment run of
// 400,000 inputs left its last worker's segment), and a test that times out
// or is interrupted leaves its own. The next test binary run removes them,
// so that /dev/shm does not fill up with them over a day of fuzzing. Only
// regular files of this user whose creator is gone (kill(2) says ESRCH)
// go; a live creator's, and this process's own, stay.
func sweepDead(dir string) (removed []string) {
	const stem = "shmlock-test-"
	paths, _ := filepath.Glob(filepath.Join(dir, stem+"*"))
	self := os.Getpid()
	for _, p := range paths {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(p), stem), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == self {
			continue
		}
		if !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // alive, or not ours to ask about
		}
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		if os.Remove(p) == nil {
			removed = append(removed, p)
		}
	}
	return removed
}
