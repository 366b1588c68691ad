package proc

import (
	"bytes"
	"errors"
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
