// Package clib holds libshmlock, the C library of shmlock (include/, src/,
// built by make; see README.md), and the Go tests that hold it to the Go
// packages: C and Go processes hammer the same locks of one segment, and C
// and Go holders are killed, with exact invariants.
//
// The package has no Go API: its tests build the library with the
// machine's C compiler (make) into a temporary directory and run the C
// unit tests under AddressSanitizer and UndefinedBehaviorSanitizer. A
// machine without cc or make fails these tests; it does not skip them.
package clib
