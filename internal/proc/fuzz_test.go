package proc

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// FuzzParseStat checks that parseStat and parseParent, which read the same
// line, never panic, that every failure wraps ErrMalformedStat, and that
// the command name cannot change either answer: only the text after the
// last ')' matters.
func FuzzParseStat(f *testing.F) {
	for _, seed := range []string{
		"3537 (sleep) S 3534 3534 1820 0 -1 4194304 126 0 1 0 0 0 0 0 20 0 1 0 280923 2990080 387 18446744073709551615 94562866884608 94562866902537 140731275864416 0 0 0 0 6 0 1 0 0 17 0 0 0 0 0 0 94562866916624 94562866917888 94563365662720 140731275872969 140731275872977 140731275872977 140731275874281 0\n",
		"1 (systemd) S 0 1 1 0 -1 4194560 77463 3209245 119 1690 433 305 7087 2575 20 0 1 0 17 22982656 3367 18446744073709551615 1 1 0 0 0 0 671173123 4096 1260 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		"4242 (Web Content) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 123456789\n",
		"77 (a) b) c) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99\n",
		"78 ((() X 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 1\n",
		"79 (tab\there) I 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 2199023255552\n",
		"80 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 18446744073709551616\n",
		"81 (x) S 1 2 3",
		"",
		")",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		checkParent(t, line)
		state, start, err := parseStat(line)
		if err != nil {
			if !errors.Is(err, ErrMalformedStat) {
				t.Fatalf("error %v does not wrap ErrMalformedStat", err)
			}
			return
		}
		if !isLetter(state) {
			t.Fatalf("state %q is not a letter", state)
		}
		// Replace the command name by a plain one: same answer.
		tail := line[bytes.LastIndexByte(line, ')'):]
		plain := append([]byte("1 (c"), tail...)
		state2, start2, err := parseStat(plain)
		if err != nil || state2 != state || start2 != start {
			t.Fatalf("with comm replaced: got %q, %d, %v; want %q, %d, nil", state2, start2, err, state, start)
		}
	})
}

// checkParent is FuzzParseStat's check of parseParent on line.
func checkParent(t *testing.T, line []byte) {
	ppid, err := parseParent(line)
	if err != nil {
		if !errors.Is(err, ErrMalformedStat) {
			t.Fatalf("parseParent: error %v does not wrap ErrMalformedStat", err)
		}
		return
	}
	tail := line[bytes.LastIndexByte(line, ')'):]
	plain := append([]byte("1 (c"), tail...)
	if ppid2, err := parseParent(plain); err != nil || ppid2 != ppid {
		t.Fatalf("parseParent with comm replaced: got %d, %v; want %d, nil", ppid2, err, ppid)
	}
}

// FuzzParseNSpid checks that parseNSpid never panics, that every failure
// wraps ErrMalformedStatus, that every pid it returns is one (1 to
// MaxPID), and that the line it read, written anew, reads the same: the
// other lines of the status do not matter.
func FuzzParseNSpid(f *testing.F) {
	for _, seed := range []string{
		"Name:\tsleep\nPid:\t10926\nNStgid:\t10926\t40\t2\nNSpid:\t10926\t40\t2\nNSpgid:\t10925\t39\t1\n",
		"NSpid:\t1\n",
		"NSpid:\t4194303 4194304\n",
		"NSpid:\n",
		"Name:\tNSpid:\t5\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, status []byte) {
		pids, err := parseNSpid(status)
		if err != nil {
			if !errors.Is(err, ErrMalformedStatus) {
				t.Fatalf("error %v does not wrap ErrMalformedStatus", err)
			}
			return
		}
		if len(pids) == 0 {
			t.Fatal("no pids and no error")
		}
		line := []byte(nspidTag)
		for _, pid := range pids {
			if pid == 0 || pid > MaxPID {
				t.Fatalf("pid %d out of range", pid)
			}
			line = fmt.Appendf(line, "\t%d", pid)
		}
		again, err := parseNSpid(append([]byte("Name:\tx\n"), line...))
		if err != nil || !slices.Equal(again, pids) {
			t.Fatalf("written anew: got %v, %v; want %v, nil", again, err, pids)
		}
	})
}

// FuzzParseProcHidesPIDs checks that parseProcHidesPIDs never panics, and
// that the last mount on /proc decides: a plain proc mount on top hides
// nothing, whatever came before.
func FuzzParseProcHidesPIDs(f *testing.F) {
	for _, seed := range []string{
		"21 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n22 21 0:20 / /proc rw,nosuid shared:5 - proc proc rw\n",
		"22 21 0:20 / /proc rw - proc proc rw,hidepid=invisible,gid=10\n",
		"22 21 0:20 / /proc rw shared:5 master:1 - proc proc rw,hidepid=2\n",
		"22 21 0:20 / /proc rw - tmpfs tmpfs rw\n",
		"- - - - /proc - - proc",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, mountinfo []byte) {
		_, _ = parseProcHidesPIDs(mountinfo)
		top := append(append([]byte(nil), mountinfo...), "\n45 22 0:39 / /proc rw - proc proc rw\n"...)
		if hides, err := parseProcHidesPIDs(top); hides || err != nil {
			t.Fatalf("with a plain proc on top: got %v, %v; want false, nil", hides, err)
		}
	})
}
