package main

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/stopsig"
)

// fakeDriver makes its --path and a sidecar, as a driver does, then runs
// until a signal: on SIGTERM it notes the signal in the directory of its
// first argument and exits 143 without removing its files, as a driver
// killed mid-run (or shmctl before it removed them) does.
const fakeDriver = `#!/bin/sh
marks=$1
trap 'kill $! 2>/dev/null; echo TERM > "$marks/signal"; exit 143' TERM
while [ $# -gt 0 ]; do [ "$1" = --path ] && path=$2; shift; done
: > "$path"; : > "$path.shm"
sleep 1000 >/dev/null 2>&1 &
wait
`

// A matrix that SIGTERM stops mid-run sends the running driver the signal,
// removes the files it left (its shared file and sidecar) and exits
// 128+15 once they are gone. Before, the matrix died at once and left the
// driver running and its files in place.
func TestMatrixStoppedBySignal(t *testing.T) {
	bin, marks, shm := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "fake"), []byte(fakeDriver), 0o755))
	exited := make(chan int, 1)
	var log bytes.Buffer
	s, stop := newStopper(&log, func(code int) { exited <- code })
	defer stop()
	r := &runner{bin: bin, shmDir: shm, timeout: waitLimit, stop: s}
	ran := make(chan outcome, 1)
	go func() {
		ran <- r.run(contender{Name: "fake", Argv: []string{"fake", marks}}, cell{Workload: "counter", Procs: 2}, 1)
	}()
	require.Eventually(t, func() bool {
		files, _ := filepath.Glob(filepath.Join(shm, "*"))
		return len(files) == 2
	}, waitLimit, waitPoll, "the fake driver's two files")

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	code := <-exited
	require.Equal(t, stopsig.ExitStatus(syscall.SIGTERM), code)
	left, err := os.ReadDir(shm)
	require.NoError(t, err)
	require.Empty(t, left, "the driver's files are gone before the matrix exits")
	got, err := os.ReadFile(filepath.Join(marks, "signal"))
	require.NoError(t, err, "the driver got the matrix's signal")
	require.Equal(t, "TERM\n", string(got))
	require.Equal(t, "stopped by SIGTERM", (<-ran).fail)
	require.Contains(t, log.String(), "matrix: stopped by SIGTERM")
}
