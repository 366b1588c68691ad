package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/stopsig"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

func runLock(opts *lockOptions) error {
	var path string
	if opts.HoldFor == 0 {
		p, err := lookCommand(opts.Command[0])
		if err != nil {
			code := exitCannotRun
			if notRunnable(err) {
				code = exitNotRunnable
			}
			return &statusError{code: code, err: err}
		}
		path = p
	}
	owner := opts.Owner
	var holder proc.Identity // --hold-for's process
	if opts.HoldFor > 0 {
		id, err := holdProcess(opts.HoldFor)
		if err != nil {
			return err
		}
		holder = id
		if owner == "" {
			owner = holdOwner(id)
		}
	}
	t, closeTable, err := openLockRunTable(opts)
	if err != nil {
		return err
	}
	defer closeTable()
	m := t.l
	// A signal that arrives while waiting for the lock ends the wait; later
	// ones go to the command. The watcher is gone before the command
	// starts, so no signal is taken by both or lost between them.
	sigs := make(chan os.Signal, 4)
	if caught := caughtSignals(); len(caught) > 0 { // none would mean all
		signal.Notify(sigs, caught...)
	}
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
	mode, _ := lockmgr.ParseMode(opts.Mode)
	ao := lockmgr.AcquireOptions{TTL: opts.TTL}
	if opts.Block {
		ao.Retries, ao.Wait = lockmgr.RetryForever, opts.Timeout
	}
	began := time.Now()
	info, err := m.Acquire(ctx, opts.Resource, owner, mode, ao)
	close(stopWatch)
	<-watchDone
	if interrupted != nil {
		if err == nil {
			err = m.Release(opts.Resource, owner)
		}
		sig := interrupted.(syscall.Signal)
		if errors.Is(err, context.Canceled) {
			err = nil // the signal's own cancel: "context canceled" would say nothing more
		}
		se := &statusError{code: stopsig.ExitStatus(sig),
			err: errors.Join(fmt.Errorf("interrupted by %s while waiting for the lock; the command did not run", unix.SignalName(sig)), err)}
		if sig == syscall.SIGINT {
			return &signalExit{sig: sig, err: se}
		}
		return se
	}
	switch {
	case errors.Is(err, lockmgr.ErrResourceLocked), errors.Is(err, lockmgr.ErrTimeout), errors.Is(err, lockmgr.ErrTooManyHolders):
		return &statusError{code: opts.ConflictExit, err: err}
	case err != nil:
		return err
	}
	if opts.Verbose {
		fmt.Fprintf(opts.IO.ErrOut, "shmctl: took %s %q (%s) after %v: version %d, reclaimed %s\n",
			opts.Mode, opts.Resource, t.where, time.Since(began).Round(time.Microsecond), info.Version, reclaimedEnv(info))
	}
	if opts.HoldFor > 0 {
		return holdForProcess(t.shm, opts, holder, info)
	}
	code, killedBy, runErr := runLocked(t, opts, info, path, sigs)
	if runErr != nil {
		printError(opts.IO.ErrOut, runErr)
	}
	var relErr error
	if code == exitOK && (info.Reclaimed || info.Inconsistent) {
		// The command was told SHMLOCK_RECLAIMED=1 and succeeded: the
		// data is as it wants it.
		relErr = m.MarkConsistent(opts.Resource, owner)
	}
	relErr = errors.Join(relErr, m.Release(opts.Resource, owner))
	if relErr != nil {
		printError(opts.IO.ErrOut, fmt.Errorf("releasing %q: %w", opts.Resource, relErr))
		if code == exitOK {
			code = exitError
		}
	}
	switch {
	case code == exitOK:
		return nil
	case killedBy == syscall.SIGINT:
		return &signalExit{sig: killedBy, err: exitStatus(code)}
	}
	return exitStatus(code)
}

// caughtSignals are the signals shmctl lock catches, to end its wait or
// pass them on to the command: SIGINT, SIGTERM, SIGHUP and SIGQUIT, but for
// one that was ignored when shmctl started. That one stays ignored, for
// shmctl and for the command, which inherits the disposition, as with
// flock(1): nohup's SIGHUP, the SIGINT a shell ignores for a command it
// runs with & (without job control). Catching it would undo the ignore,
// and the command would die of the hang-up it was started to survive.
// (Go keeps only an ignored SIGHUP or SIGINT ignored at start, so those
// are the two signal.Ignored sees: an ignored SIGTERM or SIGQUIT, the
// SIGQUIT a shell ignores beside that SIGINT, is lost before main runs,
// and the help says so.)
func caughtSignals() []os.Signal {
	var sigs []os.Signal
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	return sigs
}

// reclaimedEnv is SHMLOCK_RECLAIMED's value: "1" if an earlier hold of the
// resource ended without its release and no holder has since said that the
// data is consistent.
func reclaimedEnv(info lockmgr.LockInfo) string {
	if info.Reclaimed || info.Inconsistent {
		return "1"
	}
	return "0"
}

// lockEnv is what the command's environment adds to env: the hold's facts
// and where the table is (where: SHMLOCK_SEGMENT=PATH or
// SHMLOCK_ETCD=ENDPOINTS).
func lockEnv(env []string, where string, info lockmgr.LockInfo) []string {
	return append(env,
		envVersion+"="+strconv.FormatUint(info.Version, 10),
		envReclaimed+"="+reclaimedEnv(info),
		where,
		envResource+"="+info.Resource)
}

// lockRunTable is the lock table shmctl lock takes its lock in: a
// segment's, or etcd's.
type lockRunTable struct {
	l     lockmgr.Locker
	where string // for messages: the segment's path, or etcd://...
	env   string // SHMLOCK_SEGMENT=PATH or SHMLOCK_ETCD=ENDPOINTS
	// shm is the segment's Manager; nil on etcd, where the command needs
	// no companion record: it dies with shmctl (Pdeathsig) and the hold
	// with shmctl's session.
	shm *lockmgr.Manager
}

// openLockRunTable opens the table opts name: the segment, created if
// missing, or etcd's.
func openLockRunTable(opts *lockOptions) (*lockRunTable, func(), error) {
	if opts.Etcd.on() {
		ctx, cancel := context.WithTimeout(context.Background(), etcdDialTimeout)
		defer cancel()
		m, closeAll, err := opts.Etcd.open(ctx)
		if err != nil {
			return nil, nil, err
		}
		return &lockRunTable{l: m, where: opts.Etcd.where(), env: envEtcd + "=" + strings.Join(opts.Etcd.endpoints(), ",")}, closeAll, nil
	}
	seg, err := shm.OpenOrCreate(opts.Segment, shm.Options{GroupAccess: opts.Group})
	if err != nil {
		return nil, nil, err
	}
	if err := needTables(seg, layout.KindLockMgr); err != nil {
		_ = seg.Close()
		return nil, nil, err
	}
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	if err != nil {
		_ = seg.Close()
		return nil, nil, err
	}
	return &lockRunTable{l: m, where: seg.Path(), env: envSegment + "=" + seg.Path(), shm: m}, func() { _ = seg.Close() }, nil
}

// runLocked runs the command while the lock is held and returns its exit
// status, and the signal that killed it (or 0).
//
// The command runs under a guard (see lockguard.go): shmctl's child,
// shmctl again as the hidden lock-guard command, which runs the command as
// its own child. The guard is recorded in the hold as its companion before
// the command starts, and it outlives every process of the command's
// subtree when shmctl dies (even by kill -9): the kernel signals the guard
// (Pdeathsig), which kills the whole subtree, waits until the last of it
// is gone, and only then exits. So the hold is never reclaimable while a
// process the command started runs: until the record is made, shmctl's own
// life keeps the hold, then the guard's. A command that gains privileges
// (set-user-ID, set-group-ID, file capabilities), whose Pdeathsig the
// kernel clears at exec, is killed by the guard just the same. A guard
// killed itself leaves the subtree to shmctl, which kills it before the
// release.
//
// On etcd there is no record: the hold lives on shmctl's session, so it
// ends when the session's lease lapses after shmctl died; the guard kills
// the subtree at shmctl's death, long before.
func runLocked(t *lockRunTable, opts *lockOptions, info lockmgr.LockInfo, path string, sigs chan os.Signal) (int, syscall.Signal, error) {
	controlR, controlW, err := os.Pipe()
	if err != nil {
		return exitNotRunnable, 0, err
	}
	defer controlR.Close()
	defer controlW.Close() // only once the guard is reaped: see lockguard.go
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return exitNotRunnable, 0, err
	}
	defer statusR.Close()
	defer statusW.Close()
	inherited, closeInherited, err := inheritedFiles()
	defer closeInherited()
	if err != nil {
		return exitNotRunnable, 0, err
	}
	controlFD := 3 + len(inherited) // the guard's pipes, after the command's descriptors
	guard, err := selfCommand(append([]string{"lock-guard", "--parent", strconv.Itoa(os.Getpid()),
		"--control-fd", strconv.Itoa(controlFD), "--status-fd", strconv.Itoa(controlFD + 1), "--", path}, opts.Command...)...)
	if err != nil {
		return exitNotRunnable, 0, err
	}
	// In shmctl's process group (the terminal's foreground one), as the
	// command; told of shmctl's death by a signal it catches, so that it
	// can kill the subtree before it dies.
	guard.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: guardDeathSignal}
	guard.ExtraFiles = append(inherited, controlR, statusW)
	guard.Env = lockEnv(guard.Environ(), t.env, info)
	guard.Stdin, guard.Stdout, guard.Stderr = os.Stdin, opts.IO.Out, opts.IO.ErrOut
	// Pdeathsig fires when the thread that started the child exits, not
	// the process: keep this goroutine on its thread until the child is
	// reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The subtree's orphans come here if the guard is killed (lockguard.go).
	if wholeProcess {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return exitCannotRun, 0, fmt.Errorf("prctl PR_SET_CHILD_SUBREAPER: %w", err)
		}
	}
	if err := guard.Start(); err != nil {
		return exitNotRunnable, 0, err
	}
	_ = controlR.Close()
	_ = statusW.Close()
	closeInherited()
	if t.shm != nil {
		if err := t.shm.SetCompanion(opts.Resource, info.Owner, guard.Process.Pid); err != nil {
			_ = guard.Process.Kill()
			_ = guard.Wait()
			return exitError, 0, fmt.Errorf("recording the command's guard in the hold: %w", err)
		}
	}
	if _, err := controlW.Write([]byte{1}); err != nil { // go ahead
		_ = guard.Process.Kill()
		_ = guard.Wait()
		return exitNotRunnable, 0, err
	}

	done := make(chan struct{}) // from here on, signals are the command's
	defer close(done)
	go forward(sigs, controlW, done)
	if opts.TTL > 0 {
		go renew(t.l, opts, info.Owner, done)
	}
	err = guard.Wait()
	// The guard was the only writer: its exit ends the report.
	report, _ := io.ReadAll(statusR)
	if w, perr := strconv.ParseUint(string(report), 10, 32); perr == nil {
		ws := syscall.WaitStatus(w)
		if ws.Signaled() {
			return stopsig.ExitStatus(ws.Signal()), ws.Signal(), nil
		}
		return ws.ExitStatus(), 0, nil
	}
	// No report: the guard could not run the command (it said why on
	// stderr), or it was killed; its own status is shmctl's. The command
	// died with it, and the processes it started are shmctl's now: they
	// go before the lock does.
	if wholeProcess {
		killChildren()
	}
	if err == nil {
		return exitOK, 0, nil
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return stopsig.ExitStatus(ws.Signal()), ws.Signal(), nil
		}
		return exit.ExitCode(), 0, nil
	}
	return exitError, 0, err
}

// forward passes the signals shmctl receives on to the command, through
// its guard's control pipe.
func forward(sigs chan os.Signal, control *os.File, done chan struct{}) {
	for {
		select {
		case s := <-sigs:
			if !typedAtTerminal(s) {
				_, _ = control.Write([]byte{byte(s.(syscall.Signal))})
			}
		case <-done:
			return
		}
	}
}

// typedAtTerminal reports whether s is a SIGINT or SIGQUIT that shmctl got
// in the foreground process group of its controlling terminal: the
// terminal's ^C or ^\, which the kernel sent to the whole group, and so to
// the command too. Passed on, it reached the command twice, and many
// programs take a second SIGINT for "stop at once, without cleaning up".
// (The price: in that case a kill of shmctl alone with one of these
// signals does not reach the command, as with flock(1).)
func typedAtTerminal(s os.Signal) bool {
	if s != syscall.SIGINT && s != syscall.SIGQUIT {
		return false
	}
	tty, err := os.Open("/dev/tty") // the controlling terminal, if any
	if err != nil {
		return false
	}
	defer tty.Close()
	pgrp, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// renew refreshes the lease every third of it until done.
func renew(m lockmgr.Locker, opts *lockOptions, owner string, done chan struct{}) {
	t := time.NewTicker(opts.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			err := shm.CatchFault(func() error {
				_, err := m.Refresh(opts.Resource, owner, opts.TTL)
				return err
			})
			if err != nil {
				printError(opts.IO.ErrOut, fmt.Errorf("renewing the lease of %q: %w", opts.Resource, err))
				return
			}
		case <-done:
			return
		}
	}
}

// lookCommand finds the command name names as sh(1) and execvp(3) (so
// flock(1)) do, in every directory of PATH: a relative one (".", an empty
// entry, bin) too, which exec.LookPath refuses (exec.ErrDot) to guard
// programs that run commands of their own choosing; shmctl lock runs the
// one its user named, through the PATH its user set. With PATH unset (env
// -i) it looks where execvp(3) looks, not nowhere.
func lookCommand(name string) (string, error) {
	if _, set := os.LookupEnv("PATH"); !set && !strings.Contains(name, "/") {
		return lookCommandIn(defaultPATH, name)
	}
	p, err := exec.LookPath(name)
	if !errors.Is(err, exec.ErrDot) {
		return p, err
	}
	if !strings.Contains(p, "/") {
		p = "./" + p // a path, not a name for the guard's /bin/sh to search PATH for
	}
	return p, nil
}

// defaultPATH is where execvp(3) looks for a command when PATH is unset
// (env -i): glibc's confstr(_CS_PATH).
var defaultPATH = []string{"/bin", "/usr/bin"}

// lookCommandIn finds the command name in the first of dirs that has it
// as an executable file, as exec.LookPath does in PATH's.
func lookCommandIn(dirs []string, name string) (string, error) {
	for _, dir := range dirs {
		if p, err := exec.LookPath(filepath.Join(dir, name)); err == nil {
			return p, nil
		}
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// notRunnable reports whether err says a command was found but cannot be
// run (sh(1)'s 126: not executable, a directory, not an executable format),
// rather than not found (127).
func notRunnable(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOEXEC)
}
