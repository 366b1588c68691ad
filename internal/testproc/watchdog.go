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

// CloseAfter calls closeFn after d, or when stop is called, whichever
// comes first; stop returns once closeFn has returned. It is for fuzz
// targets whose input makes a live process (this one, say) the holder of
// a lock word their calls wait for: the calls wait until the segment is
// closed under them, and then give up with shm.ErrClosed.
func CloseAfter(closeFn func() error, d time.Duration) (stop func()) {
	done := make(chan struct{})
	t := time.AfterFunc(d, func() { _ = closeFn(); close(done) })
	return func() {
		if t.Stop() {
			_ = closeFn()
			return
		}
		<-done
	}
}
