package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// readStatFile reads a /proc/<pid>/stat file; tests replace it.
var readStatFile = os.ReadFile

// readStat returns the state and start ticks of process pid. A missing
// process gives an error wrapping ErrNoProcess, unparsable contents one
// wrapping ErrMalformedStat.
func readStat(pid uint32) (state byte, startTicks uint64, err error) {
	path := "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/stat"
	b, err := readStatFile(path)
	if err != nil {
		// ESRCH: the process was reaped between open and read.
		if gone(err) {
			return 0, 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
		}
		return 0, 0, fmt.Errorf("proc: %w", err)
	}
	state, startTicks, err = parseStat(b)
	if err != nil {
		return 0, 0, fmt.Errorf("%w in %s", err, path)
	}
	return state, startTicks, nil
}

// gone says whether err, from reading a process's /proc files, means that
// it ended (ESRCH: it was reaped between an open and a read).
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// readTaskDir lists a /proc/<pid>/task directory; tests replace it.
var readTaskDir = os.ReadDir

// groupRuns reports whether a thread of process pid, whose leader is a
// zombie, still runs: a process whose main thread exited shows Z in
// /proc/<pid>/stat until its last thread exits. When /proc cannot tell
// (an error other than a missing process) it says yes, as Alive errs.
func groupRuns(pid uint32) bool {
	dir := "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/task/"
	tasks, err := readTaskDir(dir)
	if err != nil {
		return !gone(err)
	}
	for _, t := range tasks {
		b, err := readStatFile(dir + t.Name() + "/stat")
		if gone(err) {
			continue // that thread was reaped meanwhile
		}
		if err != nil {
			return true
		}
		state, _, err := parseStat(b)
		if err != nil || state != stateZombie && state != stateDead && state != stateDeadOld {
			return true
		}
	}
	return false
}

var self = sync.OnceValue(func() Identity {
	id, err := Lookup(uint32(os.Getpid()))
	if err != nil {
		panic("proc: cannot read this process's /proc entry: " + err.Error())
	}
	return id
})

var bootID = sync.OnceValues(func() ([16]byte, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return [16]byte{}, fmt.Errorf("proc: boot id: %w", err)
	}
	return parseUUID(b)
})

var bootTime = sync.OnceValues(func() (int64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("proc: boot time: %w", err)
	}
	return parseBootTime(b)
})

var pidNamespace = sync.OnceValues(func() (uint64, error) {
	const path = "/proc/self/ns/pid"
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("proc: pid namespace: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("proc: pid namespace: no inode for %s", path)
	}
	return uint64(st.Ino), nil
})

func threadID() uint64 {
	return uint64(unix.Gettid())
}

// Children lists the pids of this process's children: from
// /proc/self/task/*/children (a child, an adopted orphan too, is the child
// of one of the threads), or, where the kernel has no such file, from the
// parent pid of every process in /proc. A child that ends meanwhile may or
// may not be listed.
func Children() []int {
	var pids []int
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		for _, w := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(w); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if len(tasks) > 0 {
		return pids
	}
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := readStatFile("/proc/" + e.Name() + "/stat"); err == nil {
			if ppid, err := parseParent(b); err == nil && ppid == self {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
