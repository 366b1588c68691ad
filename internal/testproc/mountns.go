package testproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// ExitCannotMount is the exit status of a helper run by RunWithOwnMounts
// whose MountTmpfs was refused (EPERM, EACCES): a kernel or security module
// that lets an unprivileged process make a user namespace but denies it
// the namespace's capabilities. RunWithOwnMounts skips the test then.
const ExitCannotMount = 77

// RunWithOwnMounts runs helper name with args in a new user and mount
// namespace, where it is root and may mount file systems no other process
// sees (MountTmpfs), and returns its combined output and exit error. A
// user namespace needs no privilege, so the test runs as any user; it is
// skipped only where the kernel refuses the namespaces (unprivileged user
// namespaces disabled: EPERM, or ENOSPC when their limit is 0; EINVAL
// without them) or the helper its mount (ExitCannotMount).
func RunWithOwnMounts(tb testing.TB, name string, args ...string) ([]byte, error) {
	tb.Helper()
	cmd := Command(name, args...)
	cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNS
	asNamespaceRoot(cmd.SysProcAttr)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr) && exitErr.ExitCode() == ExitCannotMount:
		tb.Skipf("helper %s may not mount in its own namespaces: %s", name, out)
	case err != nil && exitErr == nil:
		if namespacesRefused(err) {
			tb.Skipf("no user and mount namespace for helper %s: %v", name, err)
		}
		tb.Fatalf("starting helper %s in its own namespaces: %v", name, err)
	}
	return out, err
}

// MountTmpfs mounts a tmpfs of size bytes on dir, in a helper run by
// RunWithOwnMounts. Every mount is made private first, so that the new one
// stays in the helper's namespace and goes with it. A refused mount is an
// error wrapping syscall.EPERM or EACCES (see ExitCannotMount).
func MountTmpfs(dir string, size int64) error {
	if err := makeMountsPrivate(); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// MountRefused reports whether err, from MountTmpfs, is a refusal: the
// helper should exit with ExitCannotMount.
func MountRefused(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES)
}

// asNamespaceRoot puts a helper started with attr in a user namespace of
// its own, where it is root mapped to the test's user: that lets a test
// that is not root give it the other namespaces.
func asNamespaceRoot(attr *syscall.SysProcAttr) {
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
}

// namespacesRefused reports whether err, from starting a helper in new
// namespaces, is the kernel's refusal of them (EPERM; ENOSPC where user
// namespaces are limited to 0; EINVAL without them): the test is skipped.
func namespacesRefused(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EINVAL)
}

// makeMountsPrivate makes every mount of a helper's own mount namespace
// private, so that a mount it makes stays in the namespace and goes with
// it.
func makeMountsPrivate() error {
	if err := unix.Mount("none", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	return nil
}
