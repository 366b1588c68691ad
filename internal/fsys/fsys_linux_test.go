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

// openTwice opens a new file twice for writing: two descriptions of it.
func openTwice(t *testing.T) (f, g *os.File) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []**os.File{&f, &g} {
		var err error
		if *p, err = os.OpenFile(file, os.O_RDWR, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = (*p).Close() })
	}
	return f, g
}

// byteLockOff is a byte far past the end of the files of the tests.
const byteLockOff = 1 << 40

// A byte lock excludes every other description of the file, not its own
// (a caller excludes its goroutines itself), until its unlock.
func TestTryLockByte(t *testing.T) {
	t.Parallel()
	f, g := openTwice(t)
	for _, step := range []struct {
		name   string
		f      *os.File
		unlock bool
		want   bool
	}{
		{name: "a free byte", f: f, want: true},
		{name: "the byte another description holds", f: g, want: false},
		{name: "the byte its own description holds", f: f, want: true},
		{name: "unlock", f: f, unlock: true},
		{name: "the byte after its unlock", f: g, want: true},
		{name: "the byte another description holds again", f: f, want: false},
		{name: "unlock again", f: g, unlock: true},
	} {
		if step.unlock {
			if err := fsys.UnlockByte(step.f, byteLockOff); err != nil {
				t.Fatalf("%s: UnlockByte: %v", step.name, err)
			}
			continue
		}
		if ok, err := fsys.TryLockByte(step.f, byteLockOff); err != nil || ok != step.want {
			t.Fatalf("%s: TryLockByte: ok %v, %v; want %v", step.name, ok, err, step.want)
		}
	}
}

// A byte lock and its unlock open and close no descriptor of the file: a
// close would drop the classic record lock (F_SETLK) the process holds on
// it. Another description of this process sees that lock as a conflict
// (F_OFD_GETLK), its owner being the process and not a description.
func TestTryLockByteKeepsClassicLocks(t *testing.T) {
	t.Parallel()
	f, g := openTwice(t)
	classic := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &classic); err != nil {
		t.Fatalf("F_SETLK: %v", err)
	}
	for _, h := range []*os.File{f, g} {
		if ok, err := fsys.TryLockByte(h, byteLockOff); err != nil || !ok {
			t.Fatalf("TryLockByte: ok %v, %v", ok, err)
		}
		if err := fsys.UnlockByte(h, byteLockOff); err != nil {
			t.Fatalf("UnlockByte: %v", err)
		}
	}
	probe := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 1}
	if err := unix.FcntlFlock(g.Fd(), unix.F_OFD_GETLK, &probe); err != nil {
		t.Fatalf("F_OFD_GETLK: %v", err)
	}
	if probe.Type != unix.F_WRLCK || probe.Pid != int32(os.Getpid()) {
		t.Fatalf("the classic lock after a byte lock and its unlock: type %d, pid %d; want F_WRLCK (%d) of this process (%d)",
			probe.Type, probe.Pid, unix.F_WRLCK, os.Getpid())
	}
}

// UnlockByte ends the lock even while its description has another
// reference, as it has in a child that another goroutine forks (os/exec)
// until the child's exec: a close alone would leave the lock held until
// then, and an operator's next force would find it taken.
func TestUnlockByteWithDescriptionShared(t *testing.T) {
	t.Parallel()
	f, g := openTwice(t)
	// What a fork does to the description: one more reference.
	dup, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatalf("dup: %v", err)
	}
	defer unix.Close(dup)
	if ok, err := fsys.TryLockByte(f, byteLockOff); err != nil || !ok {
		t.Fatalf("TryLockByte: ok %v, %v", ok, err)
	}
	if err := fsys.UnlockByte(f, byteLockOff); err != nil {
		t.Fatalf("UnlockByte: %v", err)
	}
	if ok, err := fsys.TryLockByte(g, byteLockOff); err != nil || !ok {
		t.Fatalf("TryLockByte after unlock, the description still referenced: ok %v, %v; want true", ok, err)
	}
}

// On a closed file, TryLockByte and UnlockByte fail with os.ErrClosed and
// leave alone the file opened since under the descriptor number it had:
// the unlock of a lock another file holds there would end that lock. Not
// parallel: the test reuses the number, the lowest free one.
func TestByteLockOfClosedFile(t *testing.T) {
	f, g := openTwice(t)
	fd := f.Fd()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if ok, err := fsys.TryLockByte(other, byteLockOff); err != nil || !ok {
		t.Fatalf("TryLockByte of the other file: ok %v, %v", ok, err)
	}
	if _, err := fsys.TryLockByte(f, byteLockOff); !errors.Is(err, os.ErrClosed) {
		t.Errorf("TryLockByte of a closed file: %v; want os.ErrClosed", err)
	}
	if err := fsys.UnlockByte(f, byteLockOff); !errors.Is(err, os.ErrClosed) {
		t.Errorf("UnlockByte of a closed file: %v; want os.ErrClosed", err)
	}
	probe, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if ok, err := fsys.TryLockByte(probe, byteLockOff); err != nil || ok {
		t.Fatalf("the other file's lock (at descriptor %d, the closed file's was %d) after the closed file's unlock: free (%v); want held",
			other.Fd(), fd, err)
	}
	if ok, err := fsys.TryLockByte(g, byteLockOff); err != nil || !ok {
		t.Fatalf("the closed file's byte: ok %v, %v; want free", ok, err)
	}
}
