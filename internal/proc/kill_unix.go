//go:build unix

package proc

import "golang.org/x/sys/unix"

// kill sends a signal; tests replace it.
var kill = unix.Kill
