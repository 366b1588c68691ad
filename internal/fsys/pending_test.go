package fsys_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/proc"
)

// Without O_TMPFILE, a pending file has a hidden name that says who made
// it, pid and start time, and Publish and Discard remove that name. Not
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
		if id, ok := fsys.ParsePendingName(filepath.Base(names[0])); !ok || id.PID != proc.Self().PID || id.StartTicks != proc.Self().StartTicks&proc.MaxStart {
			t.Errorf("%s names %+v (%v), want this process, %+v", names[0], id, ok, proc.Self())
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
	if got := fsys.PendingName(id, 0xabc); got != ".shmlock-init-4242-123456-abc" {
		t.Errorf("PendingName = %q", got)
	}
	for name, ok := range map[string]bool{
		".shmlock-init-4242-123456-abc":    true,
		".shmlock-init-4242-kq5z1c0b4w":    false, // an older release's: pid and time only
		".shmlock-init-4242-1a2b3c4d5e6f":  false, // libshmlock's older: pid and a random number
		".shmlock-init-0-1-a":              false,
		".shmlock-init-4194304-1-a":        false, // no pid is that large
		".shmlock-init-1-2199023255552-a":  false, // more than the start bits
		".shmlock-init-1-2-a-b":            false,
		".shmlock-init-1-2-xyz":            false,
		".shmlock-rm-4242-123456-abc-name": false,
	} {
		got, parsed := fsys.ParsePendingName(name)
		if parsed != ok || ok && got != id {
			t.Errorf("ParsePendingName(%q) = %+v, %v; want ok %v", name, got, parsed, ok)
		}
	}
}
