// Package closerace holds the tests that race a segment's Close against
// the operations in flight on it, for every lock package at once: an
// operation either completes, its hold real in the file, or fails with
// shm.ErrClosed having left nothing there, and no Close leaves a lock
// wedged for the other processes. It has no code of its own.
package closerace
