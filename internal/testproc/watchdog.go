package testproc

import (
	"fmt"
	"time"
)

// Watchdog crashes the process if stop is not called within d. It is for
// fuzz targets whose calls wait (with deadlines far shorter than d): an
// input that hangs one would stall its worker with nothing reported,
// while a crash makes the fuzzer save the input as a failure.
func Watchdog(d time.Duration, what string) (stop func()) {
	t := time.AfterFunc(d, func() {
		panic(fmt.Sprintf("%s: still running after %v: a hang", what, d))
	})
	return func() { t.Stop() }
}
