package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// inheritedFiles returns the descriptors above stderr that shmctl lock's
// command is to inherit, as flock(1)'s does: those this process has
// without close-on-exec, which are the ones it inherited (Go opens its own
// with close-on-exec), a script's exec 3>>log. They are in the form of
// exec.Cmd.ExtraFiles, indexed by descriptor number minus 3, nil where
// there is none to pass on; each is a close-on-exec duplicate, which close
// closes (the originals are not this function's to close). The guard's
// pipes go after the last, so that they take no number the command
// expects to find its own file at.
func inheritedFiles() (files []*os.File, close func(), err error) {
	close = func() {
		for _, f := range files {
			if f != nil {
				_ = f.Close()
			}
		}
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, close, fmt.Errorf("listing the descriptors to pass on: %w", err)
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // closed since the listing (the listing's own), or not to be inherited
		}
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if errors.Is(err, unix.EBADF) {
			continue
		}
		if err != nil {
			close()
			return nil, func() {}, fmt.Errorf("passing on descriptor %d: %w", fd, err)
		}
		for len(files) <= fd-3 {
			files = append(files, nil)
		}
		files[fd-3] = os.NewFile(uintptr(dup), "inherited "+e.Name())
	}
	return files, close, nil
}
