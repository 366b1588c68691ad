package main

import (
	"errors"
	"fmt"
	"io"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/shm"
)

// Exit statuses.
const (
	exitOK          = 0
	exitError       = 1 // the command failed
	exitUsage       = 2 // bad flags, arguments or command name
	exitUnsupported = 3 // bench: the lock does not support the workload (the driver contract's 3)
)

// errSilent is returned by a command that has already reported its errors
// on stderr (rm, one line per path); it only sets the exit status.
var errSilent = errors.New("shmctl: error already reported")

// errRefused is the error of a command that would destroy what it did not
// make, or what is in use; it changed nothing.
var errRefused = errors.New("refused")

// exitStatus is returned by a command that has already said what happened
// in its output (bench prints the contract's JSON line, also for a failed
// run); it only sets the exit status, and nothing goes to stderr.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("shmctl: exit status %d", int(e)) }

// statusError is a failure reported on stderr, like any other, with an
// exit status of its own: shmctl lock's conflict status (-E) and the
// 128+N of a signal that ended its wait.
type statusError struct {
	code int
	err  error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// usageError is a mistake on the command line, reported with exit status
// exitUsage and a pointer to the command's help.
type usageError struct {
	cmd string // "shmctl info"
	err error
}

func (e *usageError) Error() string {
	return fmt.Sprintf("%v (see '%s --help')", e.err, e.cmd)
}

func (e *usageError) Unwrap() error { return e.err }

func newUsageError(cmd *cobra.Command, format string, args ...any) error {
	return &usageError{cmd: cmd.CommandPath(), err: fmt.Errorf(format, args...)}
}

// run is the whole program: it parses args, runs the command and returns
// the exit status. main only connects it to the process.
func run(args []string, stdout, stderr io.Writer) int {
	wholeProcess = true
	ios := newIOStreams(stdout, stderr)
	code, sig := executeSignal(newCmdRoot(ios), args, ios)
	if sig != 0 {
		dieOf(sig)
	}
	return code
}

// wholeProcess says that shmctl is a process of its own (run), not a
// guest in another program's (the tests run its commands in theirs): only
// then may shmctl lock adopt orphans as a subreaper and kill every child
// it has, since it starts none but the guard (lockguard.go).
var wholeProcess bool

// signalExit asks the process to end by signal sig, once the command is
// done: shmctl lock's, when SIGINT killed its command or ended its wait. A
// shell waiting for a command on Ctrl-C stops its script only if the
// command died of SIGINT too (bash's "wait and cooperative exit"); an exit
// with status 130 says the command handled the signal, and the script
// goes on, as a loop of shmctl lock commands did. flock(1) dies of the
// SIGINT. In process (tests) the exit status is err's, 128+N.
type signalExit struct {
	sig syscall.Signal
	err error // an exitStatus or *statusError
}

func (e *signalExit) Error() string { return e.err.Error() }
func (e *signalExit) Unwrap() error { return e.err }

// dieOf ends the process by sig, with the signal's default action, and
// returns only if sig is ignored (it was ignored when shmctl started).
func dieOf(sig syscall.Signal) {
	signal.Reset(sig) // Go's runtime then dies of a SIGINT, SIGTERM or SIGHUP
	// Sent to this thread, the signal is handled before tgkill returns.
	runtime.LockOSThread()
	_ = syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), sig)
}

// execute runs root with args and turns what happened into an exit status
// and at most one line per error on stderr. A panic, a bug in shmctl or in a
// package it calls, becomes one line too: a stack trace is no message for
// the user of a command.
//
// So does a memory fault: reading a segment whose file was truncated while
// mapped raises SIGBUS, which would otherwise kill the process with a
// runtime trace. Commands run on this goroutine, so SetPanicOnFault turns
// such a fault into a panic that the deferred recover sees.
func execute(root *cobra.Command, args []string, ios *IOStreams) int {
	code, _ := executeSignal(root, args, ios)
	return code
}

// executeSignal is execute, and also returns the signal the process is to
// end by, if the command asked for one (signalExit), else 0.
func executeSignal(root *cobra.Command, args []string, ios *IOStreams) (code int, sig syscall.Signal) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		// A fault has an address; a nil dereference is a plain runtime.Error.
		r := recover()
		if r == nil {
			return
		}
		err, fault := shm.FaultOf(r)
		if !fault {
			err = fmt.Errorf("internal error (a bug in shmctl, please report it): %v", r)
		}
		printError(ios.ErrOut, err)
		code = exitError
	}()
	root.SetArgs(args)
	_, err := root.ExecuteC()
	if err == nil {
		return exitOK, 0
	}
	if se, ok := errors.AsType[*signalExit](err); ok {
		sig = se.sig
	}
	if errors.Is(err, errSilent) {
		return exitError, sig
	}
	if status, ok := errors.AsType[exitStatus](err); ok {
		return int(status), sig
	}
	if se, ok := errors.AsType[*statusError](err); ok {
		printError(ios.ErrOut, se.err)
		return se.code, sig
	}
	printError(ios.ErrOut, err)
	if _, ok := errors.AsType[*usageError](err); ok {
		return exitUsage, sig
	}
	return exitError, sig
}

// printError writes err as the one line "shmctl: <message>": a multi-line
// message (errors.Join, a panic value) has its lines joined with "; ".
func printError(w io.Writer, err error) {
	var lines []string
	for line := range strings.Lines(err.Error()) {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, escapeControls(line))
		}
	}
	fmt.Fprintf(w, "shmctl: %s\n", strings.Join(lines, "; "))
}

// escapeControls writes the control characters and invalid UTF-8 of s as
// Go escapes (\x1b, \u0085): an error often quotes what the user typed or
// what a segment holds (a path, a name), and raw, an escape sequence in it
// would reach the terminal and act there.
func escapeControls(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r == utf8.RuneError || unicode.IsControl(r) }) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// exactArgs requires exactly n positional arguments, named what in the
// error ("a segment").
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return newUsageError(cmd, "%s takes %s, got %d arguments", cmd.Name(), what, len(args))
		}
		return nil
	}
}

// minArgs requires at least n positional arguments.
func minArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return newUsageError(cmd, "%s takes %s", cmd.Name(), what)
		}
		return nil
	}
}
