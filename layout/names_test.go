package layout_test

import (
	"strings"
	"testing"

	"github.com/shmlock/shmlock/layout"
)

func TestCheckName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ok   bool
	}{
		{"", false},
		{"a", true},
		{"jobs/queue-1", true},
		{strings.Repeat("x", layout.MaxNameLen), true},
		{strings.Repeat("x", layout.MaxNameLen+1), false},
		{"größe", true},
		{"日本語のロック", true},
		{"🔒 lock", true},
		{strings.Repeat("é", layout.MaxNameLen/2), true},        // 40 bytes, 20 runes
		{strings.Repeat("é", layout.MaxNameLen/2) + "x", false}, // 41 bytes
		{"bad\xffutf8", false},
		{"\xc3", false}, // a truncated two-byte sequence
		{"tab\there", false},
		{"new\nline", false},
		{"nul\x00", false},
		{"del\x7f", false},
		{"c1\u0085control", false},
		{"with space", true},
	}
	for _, tc := range tests {
		err := layout.CheckName(tc.name)
		if tc.ok {
			if err != nil {
				t.Errorf("CheckName(%q): got error %v, want nil", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("CheckName(%q): got nil, want %v", tc.name, layout.ErrBadName)
			continue
		}
		checkFormatError(t, err, layout.ErrBadName)
	}
}

func TestNameOf(t *testing.T) {
	t.Parallel()
	full := strings.Repeat("n", layout.MaxNameLen)
	tests := []struct {
		name    string
		stored  string
		nameLen uint32
		want    string
	}{
		{"unnamed", "", 0, ""},
		{"named", "jobs/queue-1", uint32(len("jobs/queue-1")), "jobs/queue-1"},
		{"full length", full, layout.MaxNameLen, full},
		{"length shorter than the bytes", "queue-12", 5, "queue"},
		{"torn length", full, layout.MaxNameLen + 1, ""},
		{"huge length", full, ^uint32(0), ""},
	}
	for _, tc := range tests {
		var e layout.DirEntry
		copy(e.Name[:], tc.stored)
		e.NameLen.Store(tc.nameLen)
		if got := layout.NameOf(&e); got != tc.want {
			t.Errorf("NameOf(%s): got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestClaimTargetRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k layout.Kind
		i int
	}{{layout.KindOwnerSlots, 0}, {layout.KindUpgrades, 15}, {layout.KindOwnerSlots, layout.MaxSlots - 1}, {layout.KindUpgrades, layout.MaxUpgrades - 1}} {
		k, i := layout.SplitClaimTarget(layout.ClaimTarget(tc.k, tc.i))
		if k != tc.k || i != tc.i {
			t.Errorf("SplitClaimTarget(ClaimTarget(%v, %d)) = %v, %d", tc.k, tc.i, k, i)
		}
	}
}
