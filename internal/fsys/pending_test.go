package fsys_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/proc"
)

// Without O_TMPFILE, a pending file has a hidden name that says who made
// it, pid, start time and PID namespace, and Publish and Discard remove that name. Not
// parallel: SetNoTmpfile is the process's.
func TestCreatePendingWithoutTmpfile(t *testing.T) {
	fsys.SetNoTmpfile(true)
	t.Cleanup(func() { fsys.SetNoTmpfile(false) })
	dir := t.TempDir()
	for _, publish := range []bool{false, true} {
		p, err := fsys.CreatePending(dir, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		names, _ := filepath.Glob(filepath.Join(dir, fsys.PendingPrefix+"*"))
		if len(names) != 1 {
			t.Fatalf("pending names: %q, want one", names)
		}
		self, err := fsys.SelfMaker()
		if err != nil {
			t.Fatal(err)
		}
		self.StartTicks &= proc.MaxStart
		if id, ok := fsys.ParsePendingName(filepath.Base(names[0])); !ok || id != self || id.PIDNamespace == 0 {
			t.Errorf("%s names %+v (%v), want this process, %+v", names[0], id, ok, self)
		}
		if publish {
			if err := p.Publish(filepath.Join(dir, "seg")); err != nil {
				t.Fatal(err)
			}
			_ = p.File().Close()
		} else {
			p.Discard()
		}
		if names, _ := filepath.Glob(filepath.Join(dir, fsys.PendingPrefix+"*")); len(names) != 0 {
			t.Errorf("publish=%v left %q", publish, names)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "seg")); err != nil {
		t.Errorf("published: %v", err)
	}
}

func TestParsePendingName(t *testing.T) {
	t.Parallel()
	id := proc.Identity{PID: 4242, StartTicks: 123456}
	creator := fsys.Maker{Identity: id, PIDNamespace: 4026531836}
	if got := fsys.PendingName(creator, 0xabc); got != ".shmlock-init-4242-123456-ns4026531836-abc" {
		t.Errorf("PendingName = %q", got)
	}
	for name, want := range map[string]*fsys.Maker{
		".shmlock-init-4242-123456-ns4026531836-abc": &creator,
		".shmlock-init-4242-123456-abc":              {Identity: id}, // the previous release's: no namespace
		".shmlock-init-4242-kq5z1c0b4w":              nil,            // an older release's: pid and time only
		".shmlock-init-4242-1a2b3c4d5e6f":            nil,            // libshmlock's older: pid and a random number
		".shmlock-init-0-1-a":                        nil,
		".shmlock-init-4194304-1-a":                  nil, // no pid is that large
		".shmlock-init-1-2199023255552-a":            nil, // more than the start bits
		".shmlock-init-1-2-a-b":                      nil,
		".shmlock-init-1-2-xyz":                      nil,
		".shmlock-init-1-2-ns3":                      nil, // no nonce
		".shmlock-init-1-2-ns3-":                     nil,
		".shmlock-init-1-2-ns-a":                     nil, // no namespace
		".shmlock-init-1-2-ns0-a":                    nil, // no namespace is 0
		".shmlock-init-1-2-nsx-a":                    nil,
		".shmlock-init-1-2-ns3-a-b":                  nil,
		".shmlock-init-1-2-ns18446744073709551616-a": nil, // more than 64 bits
		".shmlock-rm-4242-123456-ns4-abc-name":       nil,
	} {
		got, ok := fsys.ParsePendingName(name)
		if ok != (want != nil) || ok && got != *want {
			t.Errorf("ParsePendingName(%q) = %+v, %v; want %+v", name, got, ok, want)
		}
	}
}

// A pending name reads back as the creator it was made of, with or
// without a namespace; what reads as one names a process that could be,
// and reads as the same creator made anew.
func FuzzParsePendingName(f *testing.F) {
	f.Add(".shmlock-init-4242-123456-ns4026531836-abc", uint32(4242), uint64(123456), uint64(4026531836), uint64(0xabc))
	f.Add(".shmlock-init-4242-123456-abc", uint32(1), uint64(0), uint64(0), uint64(0))
	f.Add(".shmlock-init-1-2-ns-a", uint32(proc.MaxPID), uint64(proc.MaxStart), uint64(1<<64-1), uint64(1<<64-1))
	f.Fuzz(func(t *testing.T, name string, pid uint32, start, ns, nonce uint64) {
		if creator, ok := fsys.ParsePendingName(name); ok {
			if creator.PID == 0 || creator.PID > proc.MaxPID || creator.StartTicks > proc.MaxStart {
				t.Fatalf("%q reads as %+v", name, creator)
			}
			if again, ok := fsys.ParsePendingName(fsys.PendingName(creator, nonce)); !ok || again != creator {
				t.Fatalf("%q reads as %+v, made anew as %+v (%v)", name, creator, again, ok)
			}
		}
		if pid == 0 || pid > proc.MaxPID {
			return
		}
		creator := fsys.Maker{Identity: proc.Identity{PID: pid, StartTicks: start & proc.MaxStart}, PIDNamespace: ns}
		made := fsys.PendingName(creator, nonce)
		if got, ok := fsys.ParsePendingName(made); !ok || got != creator {
			t.Fatalf("%q reads as %+v (%v), made of %+v", made, got, ok, creator)
		}
	})
}
