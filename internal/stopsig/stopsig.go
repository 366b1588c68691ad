// Package stopsig lets a command that made files or started processes end
// cleanly when a signal stops it: SIGINT (Ctrl-C), SIGTERM (timeout(1), a
// service manager) or SIGHUP (a closed terminal), whose default action
// kills the process at once and leaves its files behind.
package stopsig

import (
	"os"
	"os/signal"
	"syscall"
)

// Signals are the signals that stop a command.
var Signals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// ExitStatus is the exit status of a command that sig stopped: 128 plus
// the signal, as a shell reports a process the signal killed.
func ExitStatus(sig syscall.Signal) int { return 128 + int(sig) }

// On calls stopped, on a goroutine of its own, with the first of Signals
// to arrive, until stop is called; stopped is expected to end the process
// (the signal no longer does). A signal that was ignored when the program
// started stays ignored, as it would be without the handler: a
// non-interactive shell starts its background jobs with SIGINT ignored.
func On(stopped func(syscall.Signal)) (stop func()) {
	sigs := make(chan os.Signal, 1)
	for _, s := range Signals {
		if !signal.Ignored(s) {
			signal.Notify(sigs, s)
		}
	}
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			stopped(s.(syscall.Signal))
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}
