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

// envOwnProc tells a helper to mount a /proc of its own PID namespace
// before it runs (StartInNewPIDNamespace).
const envOwnProc = "SHMLOCK_TEST_OWN_PROC"

// ownProcLine is the line a helper prints once it has its own /proc.
const ownProcLine = "testproc: own /proc"

// StartInNewPIDNamespace is StartWithStdin with the helper in a new PID
// namespace, as in a container that shares /dev/shm with the test (docker
// --ipc=host, a bind mount): the helper is pid 1 there, and it has a
// mount namespace and a /proc of its own, which shows the processes of its
// namespace only, as a container's does. The helper's first line of output
// is ownProcLine, which this waits for. Not a helper that stops itself: a
// signal that the init of a namespace sends itself, SIGSTOP too, is
// dropped; it waits for a line on its stdin instead.
//
// A test that is not root runs it as a rootless container runs: in a user
// namespace of its own too, where it is root mapped to the test's user,
// which lets it have the other two. The kernel then starts it with a fork
// that copies this process's mappings and descriptors (no vfork, which
// shares them and which internal/proc tells apart), which it holds until
// its exec: a test that calls this must not run in parallel with one that
// looks for the users of a file this process has mapped or open.
//
// It skips tb where the kernel refuses the namespaces (EPERM, or ENOSPC
// where user namespaces are limited to 0; EINVAL without them) or the
// helper its /proc (ExitCannotMount).
func StartInNewPIDNamespace(tb testing.TB, name string, args ...string) *Child {
	tb.Helper()
	c, err := startChild(tb, true, func(cmd *exec.Cmd) {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS
		if os.Geteuid() != 0 {
			asNamespaceRoot(cmd.SysProcAttr)
		}
		cmd.Env = append(cmd.Env, envOwnProc+"=1")
	}, name, args)
	switch {
	case namespacesRefused(err):
		tb.Skipf("no PID and mount namespace for helper %s: %v", name, err)
	case err != nil:
		tb.Fatalf("start helper %s in a new PID namespace: %v", name, err)
	}
	var exit *exec.ExitError
	WaitFor(tb, func() bool {
		if _, ok := Line(c.Out.String(), ownProcLine); ok {
			return true
		}
		select {
		case <-c.done:
			if _, ok := Line(c.Out.String(), ownProcLine); ok {
				return true
			}
			if errors.As(c.err, &exit) && exit.ExitCode() == ExitCannotMount {
				tb.Skipf("helper %s may not mount a /proc of its PID namespace: %s", name, c.Out)
			}
			tb.Fatalf("helper %s exited (%v) before it had its own /proc; output:\n%s", name, c.err, c.Out)
		default:
		}
		return false
	}, "helper %s to mount its own /proc", name)
	return c
}

// mountOwnProc mounts, in a helper started by StartInNewPIDNamespace, a
// /proc of its PID namespace over the one it inherited, which shows the
// test's namespace. Every mount is made private first, so that the new
// one stays in the helper's mount namespace and goes with it.
func mountOwnProc() error {
	if err := makeMountsPrivate(); err != nil {
		return err
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting a /proc: %w", err)
	}
	return nil
}

// ownProcIfAsked runs in every helper before it starts: mountOwnProc,
// where StartInNewPIDNamespace asked for it.
func ownProcIfAsked() {
	if os.Getenv(envOwnProc) == "" {
		return
	}
	if err := mountOwnProc(); err != nil {
		fmt.Println("testproc:", err)
		if MountRefused(err) {
			os.Exit(ExitCannotMount)
		}
		os.Exit(2)
	}
	fmt.Println(ownProcLine)
}

// StartInNewPIDNamespaceSharingProc is StartInNewPIDNamespace with no
// mount namespace and no /proc of the helper's own: it sees this
// process's /proc, as a process started with unshare --pid but without
// --mount-proc does, where its own pid names another process (its pid 1,
// this namespace's init) or none. It skips tb where the kernel refuses the
// namespaces.
func StartInNewPIDNamespaceSharingProc(tb testing.TB, name string, args ...string) *Child {
	tb.Helper()
	c, err := startChild(tb, true, func(cmd *exec.Cmd) {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
		if os.Geteuid() != 0 {
			asNamespaceRoot(cmd.SysProcAttr)
		}
	}, name, args)
	switch {
	case namespacesRefused(err):
		tb.Skipf("no PID namespace for helper %s: %v", name, err)
	case err != nil:
		tb.Fatalf("start helper %s in a new PID namespace: %v", name, err)
	}
	return c
}
