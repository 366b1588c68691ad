package testproc

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/shmlock/shmlock/internal/proc"
)

// sweepDead removes the segments that test processes now gone left in dir
// (names from SegmentPath: prefix, then the creator's PID). A process
// killed in the middle of a test cannot clean up after it: the fuzzing
// engine kills its workers when a run ends (a FuzzCorruptSegment run of
// 400,000 inputs left its last worker's segment), and a test that times out
// or is interrupted leaves its own. The next test binary run removes them,
// so that /dev/shm does not fill up with them over a day of fuzzing. Only
// regular files of this user whose creator is gone (no process, or a
// zombie: internal/proc) go; a live creator's, and this process's own,
// stay. libshmlock's C unit tests (which go test ./clib runs) name theirs
// cStem, then what the test is about, the PID and a random number
// (clib/tests/check.h): a failing C test leaves its segment too.
func sweepDead(dir string) (removed []string) {
	goPaths, _ := filepath.Glob(filepath.Join(dir, segStem+"*"))
	cPaths, _ := filepath.Glob(filepath.Join(dir, cStem+"*"))
	self := os.Getpid()
	for _, p := range append(goPaths, cPaths...) {
		pidText, ok := creatorField(filepath.Base(p))
		pid, err := strconv.ParseUint(pidText, 10, 32)
		if !ok || err != nil || pid == 0 || int(pid) == self || !gone(uint32(pid)) {
			continue
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

// cStem begins the name of every segment of libshmlock's C tests.
const cStem = "shmlock-ctest-"

// creatorField is the PID field of a test segment's name: the first after
// segStem, or the second to last of a C test's (its "what" may hold dashes).
func creatorField(name string) (string, bool) {
	if rest, ok := strings.CutPrefix(name, segStem); ok {
		pid, _, ok := strings.Cut(rest, "-")
		return pid, ok
	}
	fields := strings.Split(strings.TrimPrefix(name, cStem), "-")
	if len(fields) < 3 {
		return "", false
	}
	return fields[len(fields)-2], true
}

// gone reports whether pid names no running process: none, or a zombie.
// Where /proc cannot tell, the process is taken to run.
func gone(pid uint32) bool {
	id, err := proc.Lookup(pid)
	if err != nil {
		return errors.Is(err, proc.ErrNoProcess)
	}
	return !proc.Alive(id)
}
