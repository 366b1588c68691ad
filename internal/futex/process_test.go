//go:build linux

package futex_test

// unsafe is needed to view words of the shared test segment as
// *atomic.Uint32, the type futex.Wait and futex.Wake take.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/futex"
)

// helperEnv marks the re-executed test binary as the helper process; its
// value is the path of the shared segment to map.
const helperEnv = "FUTEX_TEST_HELPER_SEGMENT"

// Layout of the test segment.
const (
	segmentSize = 4096
	offWake     = 0 // word 0: the futex; the parent stores 1 and wakes
	offReady    = 4 // word 1: the child stores 1 just before it sleeps
)

// Exit codes of the helper process.
const (
	helperWoken    = 0
	helperTimedOut = 2
	helperFailed   = 3
)

// TestHelperProcess is not a test: it is the body of the child process that
// TestWakeOtherProcess starts by re-running the test binary.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		return
	}
	os.Exit(runHelper(path))
}

func runHelper(path string) int {
	mem, err := mapSegment(path, os.O_RDWR)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return helperFailed
	}
	word, ready := wordAt(mem, offWake), wordAt(mem, offReady)
	ready.Store(1)
	for word.Load() == 0 {
		err := futex.Wait(word, 0, testTimeout)
		switch {
		case errors.Is(err, futex.ErrTimeout):
			fmt.Println("timed out")
			return helperTimedOut
		case err != nil:
			fmt.Fprintln(os.Stderr, err)
			return helperFailed
		}
	}
	fmt.Println("woken")
	return helperWoken
}

func TestWakeOtherProcess(t *testing.T) {
	t.Parallel()
	path := newSegment(t)
	mem, err := mapSegment(path, os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	word, ready := wordAt(mem, offWake), wordAt(mem, offReady)

	ctx, cancel := context.WithTimeout(t.Context(), 3*testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.After(testTimeout)
	for ready.Load() == 0 {
		select {
		case err := <-exited:
			t.Fatalf("child exited before waiting: %v; output:\n%s", err, &out)
		case <-deadline:
			t.Fatal("child never got ready")
		case <-time.After(time.Millisecond):
		}
	}
	// The child's address for the word differs from ours, so match any.
	asleep := waitAsleep(t, cmd.Process.Pid, nil, 1)

	word.Store(1)
	if n := wake(t, word, 1); asleep && n != 1 {
		t.Errorf("Wake: got %d woken, want 1 (the child)", n)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("child: %v; output:\n%s", err, &out)
		}
	case <-ctx.Done():
		t.Fatal("child did not exit")
	}
	if !strings.Contains(out.String(), "woken") {
		t.Errorf("child output: got %q, want \"woken\"", &out)
	}
}

// newSegment creates a zeroed segment file in /dev/shm, removed when the
// test ends.
func newSegment(tb testing.TB) string {
	tb.Helper()
	f, err := os.CreateTemp("/dev/shm", "futex-test-*")
	if errors.Is(err, os.ErrNotExist) {
		tb.Skip("no /dev/shm")
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.Remove(f.Name()) })
	defer f.Close()
	if err := f.Truncate(segmentSize); err != nil {
		tb.Fatal(err)
	}
	return f.Name()
}

func mapSegment(path string, flag int) ([]byte, error) {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the mapping outlives the descriptor
	mem, err := unix.Mmap(int(f.Fd()), 0, segmentSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	return mem, nil
}

// wordAt views mem[off:off+4] as an atomic word; off must be 4-byte aligned.
func wordAt(mem []byte, off int) *atomic.Uint32 {
	if off%4 != 0 || off+4 > len(mem) {
		panic(fmt.Sprintf("futex_test: bad word offset %d", off))
	}
	return (*atomic.Uint32)(unsafe.Pointer(&mem[off]))
}
