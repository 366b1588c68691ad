package proc

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"
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
