package proc

import "testing"

// SetReadStatFile replaces the reader of /proc/<pid>/stat until tb ends.
// Tests that call it must not run in parallel.
func SetReadStatFile(tb testing.TB, f func(path string) ([]byte, error)) {
	tb.Helper()
	Self() // compute it from the real /proc first
	old := readStatFile
	readStatFile = f
	tb.Cleanup(func() { readStatFile = old })
}

// SharesOurVM is sharesOurVM, for its test.
var SharesOurVM = sharesOurVM
