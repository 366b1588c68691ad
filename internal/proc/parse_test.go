package proc_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/shmlock/shmlock/internal/proc"
)

// realStat is a /proc/<pid>/stat line read from a running "sleep".
const realStat = "3537 (sleep) S 3534 3534 1820 0 -1 4194304 126 0 1 0 0 0 0 0 20 0 1 0 280923 2990080 387 18446744073709551615 94562866884608 94562866902537 140731275864416 0 0 0 0 6 0 1 0 0 17 0 0 0 0 0 0 94562866916624 94562866917888 94563365662720 140731275872969 140731275872977 140731275872977 140731275874281 0\n"

// afterComm is realStat from the state on.
const afterComm = " S 3534 3534 1820 0 -1 4194304 126 0 1 0 0 0 0 0 20 0 1 0 280923 2990080 387\n"

func TestParseStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		line  string
		state byte
		start uint64
	}{
		{"real", realStat, 'S', 280923},
		{"spaces in comm", "12 (my prog  x)" + afterComm, 'S', 280923},
		{"parens in comm", "12 (a) Z 1 2 (b))" + afterComm, 'S', 280923},
		{"empty comm", "12 ()" + afterComm, 'S', 280923},
		{"newline in comm", "12 (a\nb)" + afterComm, 'S', 280923},
		{"zombie", "99 (x) Z 1 1 1 0 -1 4227148 0 0 0 0 0 0 0 0 20 0 1 0 17 0 0", 'Z', 17},
		{"exactly 22 fields, no newline", "1 (init) R 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551615", 'R', 1<<64 - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			state, start, err := proc.ParseStat([]byte(tt.line))
			if err != nil || state != tt.state || start != tt.start {
				t.Errorf("got %q, %d, %v; want %q, %d, nil", state, start, err, tt.state, tt.start)
			}
		})
	}
}

func TestParseStatMalformed(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, line string }{
		{"empty", ""},
		{"no parens", "12 sleep S 1 2 3"},
		{"no close paren", "12 (sleep S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"},
		{"close before open", "12 )sleep( S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"},
		{"too few fields", "12 (sleep) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18"},
		{"long state", "12 (sleep) SS 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19"},
		{"digit state", "12 (sleep) 5 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19"},
		{"negative start", "12 (sleep) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 -19"},
		{"start overflows", "12 (sleep) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 18446744073709551616"},
		{"start not a number", "12 (sleep) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x19"},
		{"only a paren", ")"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			state, start, err := proc.ParseStat([]byte(tt.line))
			if !errors.Is(err, proc.ErrMalformedStat) {
				t.Errorf("got %q, %d, %v; want an error wrapping ErrMalformedStat", state, start, err)
			}
		})
	}
}

func TestParseUUID(t *testing.T) {
	t.Parallel()
	want := [16]byte{0xcd, 0xdb, 0xe6, 0x2e, 0xc1, 0x8c, 0x4f, 0x84, 0x81, 0xaf, 0x57, 0x13, 0xd1, 0xef, 0x19, 0x44}
	for _, s := range []string{"cddbe62e-c18c-4f84-81af-5713d1ef1944\n", "CDDBE62E-C18C-4F84-81AF-5713D1EF1944"} {
		got, err := proc.ParseUUID([]byte(s))
		if err != nil || got != want {
			t.Errorf("ParseUUID(%q): got %x, %v; want %x, nil", s, got, err, want)
		}
	}
	for _, s := range []string{
		"",
		"cddbe62e-c18c-4f84-81af-5713d1ef194",   // short
		"cddbe62e-c18c-4f84-81af-5713d1ef19445", // long
		"cddbe62ec-18c-4f84-81af-5713d1ef1944",  // dash misplaced
		"cddbe62e-c18c-4f84-81af-5713d1ef194g",  // not hex
		"cddbe62e+c18c+4f84+81af+5713d1ef1944",  // no dashes
	} {
		if got, err := proc.ParseUUID([]byte(s)); err == nil {
			t.Errorf("ParseUUID(%q): got %x, want an error", s, got)
		}
	}
}

func TestParseBootTime(t *testing.T) {
	t.Parallel()
	stat := "cpu  1 2 3\nintr 5 6\nctxt 77\nbtime 1763789012\nprocesses 3\n"
	if got, err := proc.ParseBootTime([]byte(stat)); err != nil || got != 1763789012 {
		t.Errorf("got %d, %v; want 1763789012, nil", got, err)
	}
	for _, s := range []string{"", "cpu 1\n", "btime x\n", "xbtime 5\n"} {
		if got, err := proc.ParseBootTime([]byte(s)); err == nil {
			t.Errorf("ParseBootTime(%q): got %d, want an error", s, got)
		}
	}
}

func TestParseParent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, line string
		ppid       int
		ok         bool
	}{
		{"real", realStat, 3534, true},
		{"parens and spaces in comm", "12 (a) Z 1 (b c))" + afterComm, 3534, true},
		{"no comm", "12 S 7", 0, false},
		{"no parent", "12 (x) S", 0, false},
		{"parent not a number", "12 (x) S p 1", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ppid, err := proc.ParseParent([]byte(tt.line))
			if tt.ok != (err == nil) || ppid != tt.ppid {
				t.Errorf("got %d, %v; want %d, ok %v", ppid, err, tt.ppid, tt.ok)
			}
			if err != nil && !errors.Is(err, proc.ErrMalformedStat) {
				t.Errorf("error %v does not wrap ErrMalformedStat", err)
			}
		})
	}
}

// realStatus is the head of a /proc/<pid>/status of a process of a PID
// namespace two below that of the /proc read.
const realStatus = "Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t10926\nNgid:\t0\nPid:\t10926\nPPid:\t10925\nTracerPid:\t0\nNStgid:\t10926\t40\t2\nNSpid:\t10926\t40\t2\nNSpgid:\t10925\t39\t1\n"

func TestParseNSpid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, status string
		want         []uint32 // nil: malformed
	}{
		{"real", realStatus, []uint32{10926, 40, 2}},
		{"one namespace", "Pid:\t7\nNSpid:\t7\n", []uint32{7}},
		{"last line, no newline", "Pid:\t7\nNSpid:\t7 1", []uint32{7, 1}},
		{"largest pid", "NSpid:\t4194303\n", []uint32{proc.MaxPID}},
		{"kernel before 4.1", "Name:\tx\nPid:\t7\nPPid:\t1\n", nil},
		{"empty line", "NSpid:\t\nPid:\t7\n", nil},
		{"pid 0", "NSpid:\t7\t0\n", nil},
		{"pid too large", "NSpid:\t4194304\n", nil},
		{"negative", "NSpid:\t7\t-1\n", nil},
		{"not a number", "NSpid:\t7\tx\n", nil},
		{"NSpid inside a line", "Name:\tNSpid:\t5\n", nil},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := proc.ParseNSpid([]byte(tt.status))
			if !slices.Equal(got, tt.want) || (tt.want == nil) != errors.Is(err, proc.ErrMalformedStatus) {
				t.Errorf("got %v, %v; want %v (nil: an error wrapping ErrMalformedStatus)", got, err, tt.want)
			}
		})
	}
}

func TestParseProcHidesPIDs(t *testing.T) {
	t.Parallel()
	const (
		root = "21 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
		sys  = "23 21 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n"
	)
	tests := []struct {
		name, mountinfo string
		hides, ok       bool
	}{
		{"plain", root + "22 21 0:20 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw\n" + sys, false, true},
		{"hidepid=invisible", root + "22 21 0:20 / /proc rw,relatime - proc proc rw,hidepid=invisible\n", true, true},
		{"hidepid=2", root + "22 21 0:20 / /proc rw,relatime - proc proc rw,hidepid=2,gid=10\n", true, true},
		{"hidepid=noaccess", root + "22 21 0:20 / /proc rw - proc proc rw,hidepid=noaccess\n", true, true},
		{"hidepid=off", root + "22 21 0:20 / /proc rw - proc proc rw,hidepid=off\n", false, true},
		{"hidepid=0", root + "22 21 0:20 / /proc rw - proc proc rw,hidepid=0\n", false, true},
		{"subset=pid", root + "22 21 0:20 / /proc rw - proc proc rw,subset=pid\n", false, true},
		{"no optional fields", root + "22 21 0:20 / /proc rw - proc proc rw", false, true},
		{"several optional fields", root + "22 21 0:20 / /proc rw shared:5 master:1 - proc proc rw,hidepid=2\n", true, true},
		{"the last /proc counts", root + "22 21 0:20 / /proc rw - proc proc rw,hidepid=2\n45 22 0:39 / /proc rw - proc proc rw\n", false, true},
		{"the last /proc counts, hiding", root + "22 21 0:20 / /proc rw - proc proc rw\n45 22 0:39 / /proc rw - proc proc rw,hidepid=4\n", true, true},
		{"a mount under /proc is not /proc", root + "22 21 0:20 / /proc rw - proc proc rw\n30 22 0:40 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw,hidepid=2\n", false, true},
		{"no /proc", root + sys, false, false},
		{"a tmpfs on /proc", root + "22 21 0:20 / /proc rw - tmpfs tmpfs rw\n", false, false},
		{"no separator", root + "22 21 0:20 / /proc rw proc proc rw,hidepid=2\n", false, false},
		{"empty", "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hides, err := proc.ParseProcHidesPIDs([]byte(tt.mountinfo))
			if hides != tt.hides || tt.ok != (err == nil) {
				t.Errorf("got %v, %v; want %v, ok %v", hides, err, tt.hides, tt.ok)
			}
		})
	}
}
