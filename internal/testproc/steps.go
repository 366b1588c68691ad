package testproc

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Steps lets a helper process say how far it got and stop where its test
// tells it to: the test names the steps to stop at, reads each step's line
// from the helper's output, and writes a line to the helper's stdin to let
// it go on. A test of a race between processes puts one of them exactly
// where the race's window is, with no sleep.
type Steps struct {
	stops []string
	in    *bufio.Reader
}

// NewSteps reads stops, the steps to stop at (comma-separated, or "-" for
// none), as the helper's test passed them.
func NewSteps(stops string) *Steps {
	return &Steps{stops: strings.Split(stops, ","), in: bufio.NewReader(os.Stdin)}
}

// Hook returns the hook of step name: the first time it runs it prints
// name on a line of its own and, if name is a stop, waits for a line on
// stdin (the helper exits with status 1 if stdin fails); later runs do
// nothing, so that a hook on a retried path reports its step once.
func (s *Steps) Hook(name string) func() {
	done := false
	return func() {
		if done {
			return
		}
		done = true
		fmt.Println(name)
		if slices.Contains(s.stops, name) {
			if _, err := s.in.ReadString('\n'); err != nil {
				fmt.Println("error: stdin:", err)
				os.Exit(1)
			}
		}
	}
}

// Wait waits for one more line on stdin (or its end): a helper that must
// live on while its test looks at what it did.
func (s *Steps) Wait() { _, _ = s.in.ReadString('\n') }
