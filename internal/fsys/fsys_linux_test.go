package fsys_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/fsys"
)

func TestOpenNoFollow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, readOnly := range []bool{false, true} {
		f, err := fsys.OpenNoFollow(file, readOnly)
		if err != nil {
			t.Fatalf("OpenNoFollow(%q, %v): %v", file, readOnly, err)
		}
		got, err := f.Stat()
		if err != nil || !os.SameFile(got, want) {
			t.Errorf("OpenNoFollow(%q, %v) opened %v (%v), want the file itself", file, readOnly, got, err)
		}
		if _, err := f.WriteAt([]byte("x"), 0); (err == nil) == readOnly {
			t.Errorf("OpenNoFollow(%q, readOnly=%v): write: got %v", file, readOnly, err)
		}
		_ = f.Close()
	}

	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.OpenNoFollow(link, true); !fsys.IsSymlinkError(err) {
		t.Errorf("OpenNoFollow(symlink): got %v, want ELOOP", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, typ := range map[string]fs.FileMode{dir: fs.ModeDir, fifo: fs.ModeNamedPipe} {
		for _, readOnly := range []bool{false, true} {
			_, err := fsys.OpenNoFollow(path, readOnly)
			if got, ok := fsys.NotRegular(err); !ok || got != typ {
				t.Errorf("OpenNoFollow(%q, %v): got %v, want a NotRegularError of type %v", path, readOnly, err, typ)
			}
		}
	}
	if _, err := fsys.OpenNoFollow(filepath.Join(dir, "none"), true); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenNoFollow(missing): got %v, want fs.ErrNotExist", err)
	}
}

// Where /proc is not mounted, the reopen through /proc/self/fd fails with
// ErrNoProcFS, which a caller must not take for a missing file: an
// OpenOrCreate would then try to create the segment, find it exists, and
// open again for ever. Where something else is mounted there, whatever its
// self/fd/N names is not taken for the file checked.
func TestOpenNoFollowWithoutProc(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A fake /proc whose self/fd holds a regular file for every
	// descriptor number the open may get.
	fake := func() error {
		if err := os.MkdirAll("/proc/self/fd", 0o700); err != nil {
			return err
		}
		for n := range fakeDescriptors {
			if err := os.WriteFile("/proc/self/fd/"+strconv.Itoa(n), []byte("data"), 0o600); err != nil {
				return err
			}
		}
		return nil
	}
	for name, setup := range map[string]func() error{"unmounted": func() error { return nil }, "fake": fake} {
		err := withoutProc(t, func() error {
			if err := setup(); err != nil {
				return err
			}
			f, err := fsys.OpenNoFollow(file, false)
			if err == nil {
				_ = f.Close()
				err = errors.New("opened")
			}
			return err
		})
		if !errors.Is(err, fsys.ErrNoProcFS) || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("OpenNoFollow with a %s /proc: got %v, want fsys.ErrNoProcFS and not fs.ErrNotExist", name, err)
		}
	}
}

// fakeDescriptors bounds the descriptor numbers a fake /proc provides.
const fakeDescriptors = 1024

// withoutProc runs f with an empty tmpfs mounted on /proc, in a mount
// namespace of its own, on a thread that is never given back to the
// runtime. It skips the test if it may not make the namespace.
func withoutProc(t *testing.T, f func() error) error {
	t.Helper()
	result := make(chan error, 1)
	skip := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			skip <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			skip <- err
			return
		}
		if err := unix.Mount("none", "/proc", "tmpfs", 0, ""); err != nil {
			skip <- err
			return
		}
		result <- f()
	}()
	select {
	case err := <-skip:
		t.Skipf("cannot mount a tmpfs on /proc in a mount namespace of its own (not root?): %v", err)
		return nil
	case err := <-result:
		return err
	}
}

// TryLockByte's unlock ends the lock even while its description has
// another reference, as it has in a child that another goroutine forks
// (os/exec) until the child's exec: a close alone would leave the lock
// held until then, and an operator's next force would find it taken.
func TestTryLockByteUnlockWithDescriptionShared(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const off = 1 << 40
	dup := -1
	restore := fsys.SetByteLockedHook(func(fd int) {
		// What a fork does to the description: one more reference.
		var err error
		if dup, err = unix.Dup(fd); err != nil {
			t.Errorf("dup: %v", err)
		}
	})
	unlock, ok, err := fsys.TryLockByte(f, off)
	restore()
	if err != nil || !ok {
		t.Fatalf("TryLockByte: ok %v, %v", ok, err)
	}
	defer unix.Close(dup)
	if _, ok, err := fsys.TryLockByte(f, off); err != nil || ok {
		t.Fatalf("TryLockByte while held: ok %v, %v; want false", ok, err)
	}
	unlock()
	again, ok, err := fsys.TryLockByte(f, off)
	if err != nil || !ok {
		t.Fatalf("TryLockByte after unlock, the description still referenced: ok %v, %v; want true", ok, err)
	}
	again()
}
