package main

import (
	"io"
	"os"
	"time"

	"github.com/shmlock/shmlock/internal/fsys"
)

// IOStreams is where a command writes and how it should format for that
// place. Commands get it from the root; tests build one on buffers and say
// whether stdout is to look like a terminal.
type IOStreams struct {
	Out    io.Writer
	ErrOut io.Writer

	stdoutTTY bool
	stderrTTY bool           // progress lines go to a terminal only
	noHeader  bool           // --no-header: tables without their header row
	location  *time.Location // zone of terminal times; nil means time.Local
}

// newIOStreams wraps the process's stdout and stderr, or a test's buffers.
func newIOStreams(stdout, stderr io.Writer) *IOStreams {
	return &IOStreams{Out: stdout, ErrOut: stderr, stdoutTTY: isTerminal(stdout), stderrTTY: isTerminal(stderr)}
}

// isTerminal reports whether w is a terminal (internal/fsys asks the
// kernel for its terminal settings: /dev/null and other character devices
// are not terminals).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && fsys.IsTerminal(f.Fd())
}

// IsStdoutTTY reports whether output is for a person: aligned columns and
// local times rather than tab-separated rows and RFC 3339.
func (s *IOStreams) IsStdoutTTY() bool { return s.stdoutTTY }

// SetStdoutTTY overrides the terminal detection (for tests).
func (s *IOStreams) SetStdoutTTY(tty bool) { s.stdoutTTY = tty }

// terminalTimeFormat is how a person sees a time: local, to the second.
const terminalTimeFormat = "2006-01-02 15:04:05 MST"

// FormatTime formats t for stdout: local and readable on a terminal,
// RFC 3339 in UTC with nanoseconds otherwise (as in the JSON documents).
func (s *IOStreams) FormatTime(t time.Time) string {
	if s.stdoutTTY {
		loc := s.location
		if loc == nil {
			loc = time.Local
		}
		return t.In(loc).Format(terminalTimeFormat)
	}
	return t.UTC().Format(time.RFC3339Nano)
}
