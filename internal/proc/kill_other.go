//go:build !unix

package proc

import (
	"errors"
	"syscall"
)

// kill cannot probe a process here, so it never reports ESRCH: an owner is
// then always presumed alive.
var kill = func(int, syscall.Signal) error { return errors.ErrUnsupported }
