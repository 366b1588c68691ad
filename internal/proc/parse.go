package proc

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Fields of /proc/<pid>/stat after the command name, numbered as in
// proc(5): the state is field 3, the start time field 22.
const (
	statFirstAfterComm = 3
	statState          = 3
	statParent         = 4
	statStartTime      = 22
)

// parseParent extracts the parent's pid (field 4) from the contents of
// /proc/<pid>/stat, counting fields from the last ')' as parseStat does.
func parseParent(line []byte) (int, error) {
	end := bytes.LastIndexByte(line, ')')
	if end < 0 {
		return 0, fmt.Errorf("%w: no parenthesized command name", ErrMalformedStat)
	}
	fields := bytes.Fields(line[end+1:])
	if len(fields) <= statParent-statFirstAfterComm {
		return 0, fmt.Errorf("%w: no parent pid", ErrMalformedStat)
	}
	ppid, err := strconv.Atoi(string(fields[statParent-statFirstAfterComm]))
	if err != nil {
		return 0, fmt.Errorf("%w: parent pid: %w", ErrMalformedStat, err)
	}
	return ppid, nil
}

// parseStat extracts the state (field 3) and the start time (field 22) from
// the contents of /proc/<pid>/stat. Field 2, the command name, is in
// parentheses and may hold spaces, parentheses and any other byte, so the
// fields are counted from the last ')' of the text. Every failure wraps
// ErrMalformedStat.
func parseStat(line []byte) (state byte, startTicks uint64, err error) {
	open := bytes.IndexByte(line, '(')
	end := bytes.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return 0, 0, fmt.Errorf("%w: no parenthesized command name", ErrMalformedStat)
	}
	fields := bytes.Fields(line[end+1:])
	if n := len(fields) + statFirstAfterComm - 1; n < statStartTime {
		return 0, 0, fmt.Errorf("%w: %d fields, want at least %d", ErrMalformedStat, n, statStartTime)
	}
	st := fields[statState-statFirstAfterComm]
	if len(st) != 1 || !isLetter(st[0]) {
		return 0, 0, fmt.Errorf("%w: state %q", ErrMalformedStat, st)
	}
	start, err := strconv.ParseUint(string(fields[statStartTime-statFirstAfterComm]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: start time: %w", ErrMalformedStat, err)
	}
	return st[0], start, nil
}

func isLetter(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}

// uuidLen is the length of a UUID in text form, such as
// "cddbe62e-c18c-4f84-81af-5713d1ef1944".
const uuidLen = 36

// parseUUID parses the text form of a UUID, as in
// /proc/sys/kernel/random/boot_id; surrounding white space is ignored.
func parseUUID(b []byte) ([16]byte, error) {
	var id [16]byte
	s := bytes.TrimSpace(b)
	if len(s) != uuidLen || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return id, fmt.Errorf("proc: malformed UUID %q", s)
	}
	digits := make([]byte, 0, 2*len(id))
	for _, part := range [][]byte{s[0:8], s[9:13], s[14:18], s[19:23], s[24:36]} {
		digits = append(digits, part...)
	}
	if _, err := hex.Decode(id[:], digits); err != nil {
		return [16]byte{}, fmt.Errorf("proc: malformed UUID %q: %w", s, err)
	}
	return id, nil
}

// parseBootTime returns the "btime" value, boot time in seconds since the
// Unix epoch, from the contents of /proc/stat.
func parseBootTime(b []byte) (int64, error) {
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			t, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("proc: malformed btime in /proc/stat: %w", err)
			}
			return t, nil
		}
	}
	return 0, fmt.Errorf("proc: no btime in /proc/stat")
}

// nspidTag starts the line of /proc/<pid>/status that gives the process's
// pid in each PID namespace, from the one /proc was mounted for down to
// its own (Linux 4.1 and later).
const nspidTag = "NSpid:"

// parseNSpid returns the pids of the NSpid line of the contents of
// /proc/<pid>/status: the first in the namespace of the /proc read, the
// last in the process's own. Each is a pid, from 1 to MaxPID. Every
// failure wraps ErrMalformedStatus.
func parseNSpid(status []byte) ([]uint32, error) {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte(nspidTag))
		if !ok {
			continue
		}
		fields := bytes.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("%w: empty %s line", ErrMalformedStatus, nspidTag)
		}
		pids := make([]uint32, len(fields))
		for i, f := range fields {
			pid, err := strconv.ParseUint(string(f), 10, 32)
			if err != nil || pid == 0 || pid > MaxPID {
				return nil, fmt.Errorf("%w: %s %q", ErrMalformedStatus, nspidTag, f)
			}
			pids[i] = uint32(pid)
		}
		return pids, nil
	}
	return nil, fmt.Errorf("%w: no %s line", ErrMalformedStatus, nspidTag)
}

// The mount options that hide processes from /proc: with hidepid set to
// anything but its default ("0", "off"), a process that may not ptrace
// another does not see it, or only its directory (proc(5)).
const (
	procMountPoint = "/proc"
	hidePIDOption  = "hidepid="
)

// parseProcHidesPIDs reads the contents of /proc/self/mountinfo and says
// whether the proc file system mounted on /proc, the last mount there
// (the one a path reaches), hides processes (hidepid). A /proc that is no
// proc mount is an error: what it shows says nothing.
func parseProcHidesPIDs(mountinfo []byte) (bool, error) {
	var found bool
	var fstype string
	var options []string
	for line := range bytes.Lines(mountinfo) {
		// id parent major:minor root mount-point options [optional...] - fstype source super-options
		fields := strings.Fields(string(line))
		sep := slices.Index(fields, "-")
		if sep < 6 || len(fields) < sep+4 || fields[4] != procMountPoint {
			continue
		}
		found, fstype = true, fields[sep+1]
		options = append(strings.Split(fields[5], ","), strings.Split(fields[sep+3], ",")...)
	}
	switch {
	case !found:
		return false, fmt.Errorf("proc: nothing is mounted on %s", procMountPoint)
	case fstype != "proc":
		return false, fmt.Errorf("proc: %s is a %q mount, not proc", procMountPoint, fstype)
	}
	for _, o := range options {
		if v, ok := strings.CutPrefix(o, hidePIDOption); ok && v != "0" && v != "off" {
			return true, nil
		}
	}
	return false, nil
}
