package testproc

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// User is another user for CommandAs, by numbers alone: the kernel needs
// no /etc/passwd or /etc/group entry to run a process as them.
type User struct {
	UID, GID uint32   // the effective uid and gid
	Groups   []uint32 // supplementary groups
}

// CommandAs is Command run as user u: for tests of what another user may
// do. It skips tb unless this process is root, the only one that may
// switch users. The helper runs a copy of the test binary in a directory
// every user may read, made once per test binary and removed by Main: go
// test builds in a directory that only its own user may enter.
func CommandAs(tb testing.TB, u User, name string, args ...string) *exec.Cmd {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skipf("running a helper as uid %d needs root (this is uid %d)", u.UID, os.Geteuid())
	}
	exe, err := sharedBinary()
	if err != nil {
		tb.Fatalf("copying the test binary for uid %d: %v", u.UID, err)
	}
	cmd := Command(name, args...)
	cmd.Path, cmd.Args[0] = exe, exe
	cmd.Dir = filepath.Dir(exe) // the test's directory may be closed to u
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
	return cmd
}

var shared struct {
	once sync.Once
	dir  string
	exe  string
	err  error
}

// sharedBinary copies the test binary, once, into a new directory that
// every user may read and returns the copy's path.
func sharedBinary() (string, error) {
	shared.once.Do(func() {
		shared.exe, shared.err = copyBinary()
	})
	return shared.exe, shared.err
}

func copyBinary() (string, error) {
	dir, err := os.MkdirTemp("", "shmlock-testbin-")
	if err != nil {
		return "", err
	}
	shared.dir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.Open(os.Args[0])
	if err != nil {
		return "", err
	}
	defer src.Close()
	exe := filepath.Join(dir, filepath.Base(os.Args[0]))
	// No process may fork while the copy is open for writing: a child
	// would hold it open until its exec, and running the copy meanwhile
	// fails with ETXTBSY.
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	dst, err := os.OpenFile(exe, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return "", fmt.Errorf("copying %s: %w", os.Args[0], err)
	}
	return exe, dst.Close()
}

// removeSharedBinary removes what sharedBinary made, if anything.
func removeSharedBinary() {
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
}
