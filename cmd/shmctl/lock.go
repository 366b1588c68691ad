package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// minTTL is the shortest lease shmctl lock accepts: renewed every third of
// it, which a process descheduled for a few milliseconds must still meet.
const minTTL = 30 * time.Millisecond

// Exit statuses of shmctl lock besides the command's own.
const (
	exitCannotRun = 127 // the command was not found or could not be started, as in sh(1)
	exitSignalled = 128 // plus the signal that killed the command, as in sh(1)
)

type lockOptions struct {
	IO *IOStreams

	Segment  string
	Group    bool // --group: the segment is shared with a group (shm.Options.GroupAccess)
	Resource string
	Owner    string
	Mode     string
	TTL      time.Duration
	Wait     time.Duration
	Command  []string
}

func newCmdLock(ios *IOStreams, runF func(*lockOptions) error) *cobra.Command {
	opts := &lockOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "lock <segment> <resource> [flags] -- <command> [args...]",
		Short: "Run a command while holding a named resource lock (lockmgr)",
		Long: `Take the named resource lock, run the command, and release the lock when the
command exits; the command's exit status becomes shmctl's (128+N if a
signal N killed it, 127 if it could not be started).

The lock is never free while the command runs: the command is killed if
shmctl dies (even by kill -9), and the hold records both processes, so it
is reclaimed as a dead holder's only once neither lives. (flock(1) errs
the other way: a command's forked children keep its lock.) SIGINT,
SIGTERM, SIGHUP and SIGQUIT sent to shmctl are passed on to the command.

By default an exclusive conflict fails at once: exit status 1 and the
RESOURCE_LOCKED code on stderr. --wait D retries with the backoff of
the lock manager (100, 200, 400, 800, 1000 ms...), woken early by a release,
for up to D (then WAIT_TIMEOUT). --ttl D makes the hold a lease of D that
shmctl renews every D/3 while the command runs, so it lapses only if
shmctl stops renewing it (stopped or wedged). If the hold was lost when the
command ends (LOCK_TIMEOUT), that is reported on stderr and a zero exit
status becomes 1.`,
		Example: `  shmctl lock jobs backup -- tar czf /backup/home.tgz /home
  shmctl lock jobs deploy --wait 30s --owner ci-42 -- ./deploy.sh
  shmctl lock jobs report --mode collaborative -- ./append-report.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash != 2 || len(args) < 3 {
				return newUsageError(cmd, "lock takes a segment, a resource, then -- and a command")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segment, opts.Resource, opts.Command = args[0], args[1], args[2:]
			opts.Group = groupFlag(cmd)
			if _, err := lockmgr.ParseMode(opts.Mode); err != nil {
				return newUsageError(cmd, "--mode: %v", err)
			}
			if opts.TTL < 0 || opts.Wait < 0 {
				return newUsageError(cmd, "--ttl and --wait must not be negative")
			}
			if opts.TTL != 0 && opts.TTL < minTTL {
				// The hold is renewed every TTL/3: a shorter lease would lapse
				// between renewals on a busy machine.
				return newUsageError(cmd, "--ttl must be 0 (no lease) or at least %v, got %v", minTTL, opts.TTL)
			}
			if opts.Owner == "" {
				opts.Owner = "shmctl-" + strconv.Itoa(os.Getpid())
			}
			if runF != nil {
				return runF(opts)
			}
			return runLock(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Owner, "owner", "", `owner name of the hold (default "shmctl-PID")`)
	cmd.Flags().StringVar(&opts.Mode, "mode", "exclusive", "exclusive or collaborative")
	cmd.Flags().DurationVar(&opts.TTL, "ttl", 0, "lease of the hold, renewed while the command runs (0: none)")
	cmd.Flags().DurationVar(&opts.Wait, "wait", 0, "on a conflict, retry for up to this long (0: fail at once)")
	return cmd
}

func runLock(opts *lockOptions) error {
	mode, _ := lockmgr.ParseMode(opts.Mode)
	path, err := exec.LookPath(opts.Command[0])
	if err != nil {
		printError(opts.IO.ErrOut, err)
		return exitStatus(exitCannotRun)
	}
	seg, m, err := openLockTable(opts.Segment, shm.Options{GroupAccess: opts.Group})
	if err != nil {
		return err
	}
	defer seg.Close()
	// A signal that arrives while waiting for the lock ends the wait; later
	// ones go to the command. The watcher is gone before the command
	// starts, so no signal is taken by both or lost between them.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var interrupted os.Signal
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case interrupted = <-sigs:
			cancel()
		case <-stopWatch:
		}
	}()
	_, err = m.Acquire(ctx, opts.Resource, opts.Owner, mode, lockmgr.AcquireOptions{TTL: opts.TTL, Wait: opts.Wait})
	close(stopWatch)
	<-watchDone
	if interrupted != nil {
		if err == nil {
			err = m.Release(opts.Resource, opts.Owner)
		}
		return errors.Join(fmt.Errorf("interrupted by %v while taking the lock; the command did not run", interrupted), err)
	}
	if err != nil {
		return err
	}
	code, runErr := runLocked(m, opts, path, sigs)
	relErr := m.Release(opts.Resource, opts.Owner)
	if runErr != nil {
		printError(opts.IO.ErrOut, runErr)
	}
	if relErr != nil {
		printError(opts.IO.ErrOut, fmt.Errorf("releasing %q: %w", opts.Resource, relErr))
		if code == exitOK {
			code = exitError
		}
	}
	if code == exitOK {
		return nil
	}
	return exitStatus(code)
}

// runLocked runs the command while the lock is held and returns its exit
// status. The command starts as "shmctl lock-exec", which waits until its
// pid is recorded in the hold (SetCompanion) before it execs the command:
// from its first instruction the command keeps the hold alive. The pid and
// start time stay the same across exec, so the record names the command.
func runLocked(m *lockmgr.Manager, opts *lockOptions, path string, sigs chan os.Signal) (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return exitCannotRun, err
	}
	defer r.Close()
	defer w.Close()
	cmd, err := selfCommand(append([]string{"lock-exec", "--", path}, opts.Command...)...)
	if err != nil {
		return exitCannotRun, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, opts.IO.Out, opts.IO.ErrOut
	cmd.ExtraFiles = []*os.File{r} // fd 3 in the child
	// Pdeathsig fires when the thread that started the child exits, not
	// the process: keep this goroutine on its thread until the child is
	// reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return exitCannotRun, err
	}
	_ = r.Close()
	if err := m.SetCompanion(opts.Resource, opts.Owner, cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return exitError, fmt.Errorf("recording the command in the hold: %w", err)
	}
	if _, err := w.Write([]byte{1}); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return exitCannotRun, err
	}
	_ = w.Close()

	done := make(chan struct{}) // from here on, signals are the command's
	defer close(done)
	go forward(sigs, cmd.Process, done)
	if opts.TTL > 0 {
		go renew(m, opts, done)
	}
	err = cmd.Wait()
	if err == nil {
		return exitOK, nil
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exitSignalled + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	return exitError, err
}

// forward passes the signals shmctl receives on to the command.
func forward(sigs chan os.Signal, p *os.Process, done chan struct{}) {
	for {
		select {
		case s := <-sigs:
			_ = p.Signal(s)
		case <-done:
			return
		}
	}
}

// renew refreshes the lease every third of it until done.
func renew(m *lockmgr.Manager, opts *lockOptions, done chan struct{}) {
	t := time.NewTicker(opts.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if _, err := m.Refresh(opts.Resource, opts.Owner, opts.TTL); err != nil {
				printError(opts.IO.ErrOut, fmt.Errorf("renewing the lease of %q: %w", opts.Resource, err))
				return
			}
		case <-done:
			return
		}
	}
}

// newCmdLockExec is the first stage of the command shmctl lock runs; it is
// hidden from help.
func newCmdLockExec(ios *IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:    "lock-exec -- PATH ARGV0 ARGS...",
		Short:  "Wait for shmctl lock to record this process, then exec the command",
		Hidden: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 || len(args) < 2 {
				return newUsageError(cmd, "lock-exec takes -- PATH ARGV0 ARGS...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// fd 3 is the pipe from shmctl lock: one byte means go, end of
			// file means shmctl gave up or died.
			ready := os.NewFile(3, "lock-exec ready")
			var b [1]byte
			if n, _ := ready.Read(b[:]); n != 1 {
				return exitStatus(exitCannotRun)
			}
			_ = ready.Close()
			// Pdeathsig, which shmctl lock asked for when it started this
			// process, is a setting of the thread it was set on, this
			// process's first. Go may run this goroutine on another
			// thread, and an exec from a thread that is not the first
			// keeps only the calling thread's setting: none, so the
			// command would outlive a killed shmctl lock and keep its
			// hold. Set it again on the thread that execs. (Should
			// shmctl lock die before this, the first thread's setting
			// kills the whole process.)
			runtime.LockOSThread()
			if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
				printError(ios.ErrOut, fmt.Errorf("prctl PR_SET_PDEATHSIG: %w", err))
				return exitStatus(exitCannotRun)
			}
			err := syscall.Exec(args[0], args[1:], os.Environ())
			printError(ios.ErrOut, fmt.Errorf("exec %s: %w", args[0], err))
			return exitStatus(exitCannotRun)
		},
	}
}
