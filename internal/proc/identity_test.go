package proc_test

import (
	"fmt"
	"testing"

	"github.com/shmlock/shmlock/internal/proc"
)

func TestLayout(t *testing.T) {
	t.Parallel()
	if got := proc.PIDBits + proc.StartBits + 1; got != 64 {
		t.Errorf("pid, start and stale bits: got %d, want 64", got)
	}
	const pidMaxLimit = 4194304 // PID_MAX_LIMIT on 64-bit Linux
	if proc.MaxPID != pidMaxLimit-1 {
		t.Errorf("MaxPID: got %d, want %d", proc.MaxPID, pidMaxLimit-1)
	}
	if proc.StaleBit != 1<<(proc.PIDBits+proc.StartBits) {
		t.Errorf("StaleBit: got %#x, want the bit above the start field", proc.StaleBit)
	}
}

func TestPackUnpack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   proc.Identity
		want proc.Identity // after the round trip
		word uint64
	}{
		{"zero", proc.Identity{}, proc.Identity{}, 0},
		{"init", proc.Identity{PID: 1}, proc.Identity{PID: 1}, 1},
		{"typical", proc.Identity{PID: 1234, StartTicks: 5678}, proc.Identity{PID: 1234, StartTicks: 5678}, 5678<<22 | 1234},
		{"max", proc.Identity{PID: proc.MaxPID, StartTicks: proc.MaxStart}, proc.Identity{PID: proc.MaxPID, StartTicks: proc.MaxStart}, 1<<63 - 1},
		{"truncated", proc.Identity{PID: 7, StartTicks: proc.MaxStart + 1 + 42}, proc.Identity{PID: 7, StartTicks: 42}, 42<<22 | 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := tt.id.Pack()
			if w != tt.word {
				t.Errorf("Pack: got %#x, want %#x", w, tt.word)
			}
			got, stale := proc.Unpack(w)
			if got != tt.want || stale {
				t.Errorf("Unpack: got %v, %v; want %v, false", got, stale, tt.want)
			}
			got, stale = proc.Unpack(proc.MarkStale(w))
			if got != tt.want || stale != (w != 0) {
				t.Errorf("Unpack(MarkStale): got %v, %v; want %v, %v", got, stale, tt.want, w != 0)
			}
		})
	}
}

func TestPackPanicsOnHugePID(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("Pack of pid MaxPID+1 did not panic")
		}
	}()
	proc.Identity{PID: proc.MaxPID + 1}.Pack()
}

func TestMarkStale(t *testing.T) {
	t.Parallel()
	if got := proc.MarkStale(0); got != 0 {
		t.Errorf("MarkStale(0): got %#x, want 0", got)
	}
	w := proc.Identity{PID: 42, StartTicks: 99}.Pack()
	s := proc.MarkStale(w)
	if s != w|proc.StaleBit {
		t.Errorf("MarkStale(%#x): got %#x, want %#x", w, s, w|proc.StaleBit)
	}
	if again := proc.MarkStale(s); again != s {
		t.Errorf("MarkStale twice: got %#x, want %#x", again, s)
	}
}

func TestAlivePackedNoOwnerOrStale(t *testing.T) {
	t.Parallel()
	me := proc.Self().Pack()
	tests := []struct {
		name string
		word uint64
		want bool
	}{
		{"no owner", 0, false},
		{"stale bit alone", proc.StaleBit, false},
		{"self", me, true},
		{"self, stale", proc.MarkStale(me), false},
	}
	for _, tt := range tests {
		if got := proc.AlivePacked(tt.word); got != tt.want {
			t.Errorf("%s: AlivePacked(%#x): got %v, want %v", tt.name, tt.word, got, tt.want)
		}
	}
	if proc.Alive(proc.Identity{}) {
		t.Error("Alive(Identity{}): got true, want false")
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	got := proc.Identity{PID: 1234, StartTicks: 5678}.String()
	if want := "pid 1234 (start 5678)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func ExampleIdentity_Pack() {
	id := proc.Identity{PID: 1234, StartTicks: 5678}
	w := id.Pack()
	fmt.Printf("%#x\n", w)

	back, stale := proc.Unpack(proc.MarkStale(w))
	fmt.Println(back, stale)
	// Output:
	// 0x58b8004d2
	// pid 1234 (start 5678) true
}

func ExampleAlivePacked() {
	owner := proc.Self().Pack() // what a lock records in its owner word
	fmt.Println(proc.AlivePacked(owner))
	fmt.Println(proc.AlivePacked(proc.MarkStale(owner))) // recorded before a reboot
	fmt.Println(proc.AlivePacked(0))                     // no owner
	// Output:
	// true
	// false
	// false
}

// Holder ids are never 0 (which means no holder) and do not repeat.
func TestHolderID(t *testing.T) {
	seen := make(map[uint64]bool)
	for range 1000 {
		id := proc.HolderID()
		if id == 0 || seen[id] {
			t.Fatalf("HolderID returned %#x: zero or a repeat", id)
		}
		seen[id] = true
	}
}
