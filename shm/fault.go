package shm

import (
	"fmt"
	"runtime/debug"
)

// CatchFault runs f with a memory fault on this goroutine (the SIGBUS of a
// segment file cut short while mapped) turned into an ErrFault error
// instead of the end of the process. For readers on goroutines of their
// own, a monitor's scrape or a lease's renewal: a fault there kills the
// process with a runtime trace whatever the rest of the program recovers.
// Other panics go on.
func CatchFault(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			ferr, ok := FaultOf(r)
			if !ok {
				panic(r)
			}
			err = ferr
		}
	}()
	return f()
}

// FaultOf is the ErrFault error of r, a value recovered from a panic, if r
// is a memory fault (debug.SetPanicOnFault makes one a panic whose value
// has the faulting address); ok false for any other panic.
func FaultOf(r any) (err error, ok bool) {
	f, ok := r.(interface{ Addr() uintptr })
	if !ok {
		return nil, false
	}
	return fmt.Errorf("memory fault at %#x: %w", f.Addr(), ErrFault), true
}
