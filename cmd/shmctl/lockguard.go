package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/stopsig"
)

// The guard is the process between shmctl lock and its command: shmctl
// re-executed as the hidden "lock-guard" command. It is the hold's
// companion, and it keeps the command's whole subtree from outliving the
// hold: the kernel's parent-death signal reaches a process's child only,
// so a kill -9 of shmctl killed the command (a shell) but not the
// processes it had started, which ran on out of the lock.
//
// The guard is a child subreaper: a process of the subtree whose parent
// dies becomes the guard's child, not init's. When shmctl dies the kernel
// sends the guard guardDeathSignal, which it catches: it kills the command
// and every child it has with SIGKILL, reaps them, and starts again until
// it has no child left; only then does it exit, and only then is the hold
// (whose companion it is) free.
//
// shmctl lock is a child subreaper too, for a guard that is killed itself
// (kill -9, or the kernel's OOM killer, which picks by size and finds a
// guard no smaller than most commands): the command dies with its guard
// (its Pdeathsig is SIGKILL), and the orphans of the subtree become
// shmctl's children. A guard that ends without the command's status
// leaves shmctl to kill and reap them (killChildren), before it releases
// the lock. Only shmctl and its guard killed together let the subtree
// outlive the hold.
//
// shmctl lock and its guard talk through two pipes, at the descriptors
// the guard's --control-fd and --status-fd name: after those the command
// inherits, which keep their numbers (inheritedFiles).
//
//   - control, shmctl to guard: one byte once shmctl has recorded the
//     guard in the hold (the command starts only then; end of file before
//     it means shmctl gave up or died, and the guard exits without running
//     it), then one byte for each signal shmctl passes on to the command,
//     its number. shmctl keeps its end open until the guard has
//     exited, so end of file later means that shmctl died: the guard then
//     kills the subtree, as on its parent-death signal.
//   - status, guard to shmctl: the command's wait status in decimal,
//     written when the command has ended, so shmctl reports a command
//     killed by a signal exactly as one it ran itself. Nothing
//     there means the guard failed (it said why on stderr, and its exit
//     status is shmctl's) or was killed.
//
// Signals come to the command from shmctl through the pipe, not as
// signals to the guard, so that the command gets each exactly once: a
// signal sent to the process group (a ^C typed at the terminal, a kill of
// the group) reaches the command and the guard alike, and the guard must
// not pass its copy on as well. The guard catches SIGINT, SIGTERM, SIGHUP
// and SIGQUIT (those not ignored) so that they do not kill it, and uses
// its copies to tell a signal sent to the group, which the command had
// already, from one sent to shmctl alone, before it passes on what shmctl
// passes on (lockcopies.go).

// guardDeathSignal is the guard's parent-death signal: a signal the guard
// can catch, unlike the command's SIGKILL, and one that shmctl lock never
// passes on. Sent by anyone else while shmctl lives, it is ignored, as
// shmctl ignores it.
const guardDeathSignal = syscall.SIGUSR2

// newCmdLockGuard is the guard of the command shmctl lock runs (see
// above); it is hidden from help.
func newCmdLockGuard(ios *IOStreams) *cobra.Command {
	var parent, controlFD, statusFD int
	cmd := &cobra.Command{
		Use:    "lock-guard --parent PID --control-fd FD --status-fd FD -- PATH ARGV0 ARGS...",
		Short:  "Run shmctl lock's command and kill its whole subtree if shmctl lock dies",
		Hidden: true,
		// shmctl lock has warned of what the root's hook warns of.
		PersistentPreRun: func(*cobra.Command, []string) {},
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 || len(args) < 2 || parent <= 0 || controlFD <= 2 || statusFD <= 2 || controlFD == statusFD {
				return newUsageError(cmd, "lock-guard takes --parent PID --control-fd FD --status-fd FD -- PATH ARGV0 ARGS...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLockGuard(ios, parent, controlFD, statusFD, args[0], args[1:])
		},
	}
	cmd.Flags().IntVar(&parent, "parent", 0, "the pid of shmctl lock")
	cmd.Flags().IntVar(&controlFD, "control-fd", 0, "the descriptor of the control pipe, from shmctl lock")
	cmd.Flags().IntVar(&statusFD, "status-fd", 0, "the descriptor of the status pipe, to shmctl lock")
	return cmd
}

// runLockGuard runs the command path with argv as the guard of shmctl
// lock, process parent, which talks to it through descriptors controlFD
// and statusFD.
func runLockGuard(ios *IOStreams, parent, controlFD, statusFD int, path string, argv []string) error {
	// The pipes must not reach the command: a descendant that kept the
	// status pipe open would keep shmctl waiting for its end. The other
	// descriptors the guard inherited are the command's.
	syscall.CloseOnExec(controlFD)
	syscall.CloseOnExec(statusFD)
	control := os.NewFile(uintptr(controlFD), "lock-guard control")
	status := os.NewFile(uintptr(statusFD), "lock-guard status")

	// Every signal the guard waits for is caught before it looks whether
	// shmctl still lives, so none comes unseen in between.
	died := make(chan os.Signal, 1)
	signal.Notify(died, guardDeathSignal)
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	own := make(chan os.Signal, 8) // the guard's copies of group signals: see above
	if caught := caughtSignals(); len(caught) > 0 {
		signal.Notify(own, caught...)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		printError(ios.ErrOut, fmt.Errorf("prctl PR_SET_CHILD_SUBREAPER: %w", err))
		return exitStatus(exitCannotRun)
	}
	var b [1]byte
	if n, _ := control.Read(b[:]); n != 1 {
		return exitStatus(exitCannotRun) // shmctl said why, or died
	}
	if os.Getppid() != parent {
		return exitStatus(exitCannotRun) // shmctl died before the signal was caught
	}

	// The copies the guard has so far are of signals sent to the group
	// before the command was in it: the command has none of them, so they
	// are passed on to it once it runs, and shmctl's are dropped (as for
	// any copy), so that it has each once. A signal sent in the instant
	// before the start whose copy the runtime has not yet handed to the
	// channel is still taken for the command's, and lost; before, so was
	// every one sent while the guard waited for shmctl's go-ahead.
	testHookGuardStarting(own)
	missed := drainSignals(own)

	// The command's Pdeathsig fires when the thread that started it exits:
	// keep this goroutine, which never returns before the command is
	// reaped, on its thread.
	runtime.LockOSThread()
	p, err := startCommand(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		printError(ios.ErrOut, err)
		if notRunnable(err) {
			return exitStatus(exitNotRunnable)
		}
		return exitStatus(exitCannotRun)
	}
	passOn := make(chan syscall.Signal)
	go func() {
		defer close(passOn)
		var b [1]byte
		for {
			if n, _ := control.Read(b[:]); n != 1 {
				return
			}
			passOn <- syscall.Signal(b[0])
		}
	}()
	var copies groupCopies
	for _, s := range missed {
		copies.copied(s, time.Now())
		_ = p.Signal(s)
	}
	for {
		select {
		case s := <-own:
			copies.copied(s.(syscall.Signal), time.Now())
		case <-copies.wake():
			for _, s := range copies.due(time.Now()) {
				_ = p.Signal(s) // p's pidfd: never another process, even once reaped
			}
		case s, ok := <-passOn:
			if ok {
				if copies.passOn(s, time.Now(), inProcessGroup(p.Pid)) {
					_ = p.Signal(s)
				}
				continue
			}
			passOn = nil
			killSubtree(p) // end of file: shmctl died
			return exitStatus(stopsig.ExitStatus(syscall.SIGKILL))
		case <-died:
			if os.Getppid() != parent {
				killSubtree(p)
				return exitStatus(stopsig.ExitStatus(syscall.SIGKILL))
			}
		case <-children:
			ws, ok := reapChildren(p.Pid)
			if !ok {
				continue
			}
			// The command has ended. The processes it left behind are
			// not the lock's (flock(1)'s -o): they are left alone.
			_, _ = io.WriteString(status, strconv.FormatUint(uint64(ws), 10))
			_ = status.Close()
			switch {
			case ws.Signaled():
				return exitStatus(stopsig.ExitStatus(ws.Signal()))
			case ws.ExitStatus() != exitOK:
				return exitStatus(ws.ExitStatus())
			}
			return nil
		}
	}
}

// testHookGuardStarting runs in the guard just before it takes the
// copies of group signals that came before the command's start; tests
// stop the guard there and send the group a signal.
var testHookGuardStarting = func(copies <-chan os.Signal) {}

// drainSignals returns the signals waiting in c, each number once, in
// their order.
func drainSignals(c <-chan os.Signal) []syscall.Signal {
	var sigs []syscall.Signal
	for {
		select {
		case s := <-c:
			if sig := s.(syscall.Signal); !slices.Contains(sigs, sig) {
				sigs = append(sigs, sig)
			}
		default:
			return sigs
		}
	}
}

// startCommand starts the command path with argv as execvp(3) does for
// flock(1), and as sh(1) does: a file the kernel cannot run (ENOEXEC), a
// script without a #! line, runs with /bin/sh, as /bin/sh PATH ARGS. One
// that looks binary (a NUL in its first line, as bash(1) tells) is left
// to fail: sh would read it as a script and say nothing useful.
func startCommand(path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	p, err := os.StartProcess(path, argv, attr)
	if !errors.Is(err, syscall.ENOEXEC) || !shellScriptFile(path) {
		return p, err
	}
	return os.StartProcess(shellPath, append([]string{shellPath, path}, argv[1:]...), attr)
}

// shellPath is the shell that runs scripts without a #! line (execvp(3)'s
// _PATH_BSHELL).
const shellPath = "/bin/sh"

// shellScriptFile reports whether the file at path may be a shell script:
// readable, with no NUL in its first line (of 80 bytes at most: bash's
// test of a binary file).
func shellScriptFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [80]byte
	n, err := io.ReadFull(f, head[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false
	}
	line, _, _ := bytes.Cut(head[:n], []byte{'\n'})
	return bytes.IndexByte(line, 0) < 0
}

// reapChildren reaps the children of the guard that have ended (the
// command's orphans it adopted, the command) and returns the command's
// wait status, and whether the command was among them.
func reapChildren(command int) (ws unix.WaitStatus, ended bool) {
	for {
		var s unix.WaitStatus
		pid, err := unix.Wait4(-1, &s, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil || pid <= 0:
			return ws, ended
		case pid == command:
			ws, ended = s, true
		}
	}
}

// killSubtree kills the command p and every process of its subtree: the
// command, and every child of the guard (the orphans of the subtree, which
// the guard adopts as subreaper), with SIGKILL, again and again until the
// guard has no child left. A process of the subtree that is killed leaves
// its children to the guard, which kills them in the next round.
//
// Only this goroutine reaps, so a pid read from the list of children
// names that child until it is reaped here: no pid is signalled after
// another process could have taken it.
func killSubtree(p *os.Process) {
	_ = p.Signal(syscall.SIGKILL)
	killChildren()
}

// killChildren kills every child of this process with SIGKILL, and the
// children they leave to it as subreaper, again and again until it has no
// child left, reaping them. Its caller must be the process's only reaper
// by then.
func killChildren() {
	for {
		for _, pid := range proc.Children() {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		var s unix.WaitStatus
		_, err := unix.Wait4(-1, &s, 0, nil)
		if errors.Is(err, unix.ECHILD) {
			return
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return // cannot happen with these arguments
		}
	}
}
