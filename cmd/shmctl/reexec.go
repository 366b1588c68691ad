package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// selfCommand returns a command, not yet started, that runs this program
// again with args: the worker processes of bench and demo. A worker is
// killed if this process dies (Pdeathsig), so none outlives its driver.
//
// Tests replace it: under go test, os.Executable is the test binary, which
// runs the same code through its "shmctl" helper (see main_test.go).
var selfCommand = func(args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to start workers: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

// workerOutput is where workers' output goes when it is w: w itself if it
// is a file (the workers then write to it directly), or else w behind a
// mutex, since exec copies each worker's output from its own goroutine.
func workerOutput(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
