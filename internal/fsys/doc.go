// Package fsys holds the few file-system system calls that package shm (and
// the bench driver, for its shared file) needs beyond package os: unnamed
// files published by link, files whose memory is reserved up front, opens
// that never follow a symlink nor open anything but a regular file, file
// owners and groups, the groups of this process, and advisory locks.
package fsys
