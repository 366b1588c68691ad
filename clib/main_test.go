package clib_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/shmlock/shmlock/internal/testproc"
)

// helpers are the Go helper processes of this package's tests; each test
// file adds its own in an init function.
var helpers = map[string]func(args []string) int{}

// build is the directory make built the library and its helpers into, for
// this test binary.
var build string

// buildOutput is what that make printed: nothing, as make -s prints for a
// build without a compiler warning.
var buildOutput string

func TestMain(m *testing.M) { testproc.MainWith(m, helpers, buildLibrary) }

func init() { helpers["exec-c"] = execCHelper }

// execCHelper replaces this helper process with the C program args[0]
// (same pid, same start time): so a test starts, stops, kills and waits
// for C processes as testproc does Go ones (startC).
func execCHelper(args []string) int {
	err := syscall.Exec(args[0], args, os.Environ())
	fmt.Fprintf(os.Stderr, "exec %s: %v\n", args[0], err)
	return 1
}

// startC starts the C helper program (tests/helpers/program.c) with args
// as a testproc.Child.
func startC(tb testing.TB, program string, args ...string) *testproc.Child {
	tb.Helper()
	return testproc.Start(tb, "exec-c", append([]string{helper(program)}, args...)...)
}

// startCWithStdin is startC with the child's standard input a pipe.
func startCWithStdin(tb testing.TB, program string, args ...string) *testproc.Child {
	tb.Helper()
	return testproc.StartWithStdin(tb, "exec-c", append([]string{helper(program)}, args...)...)
}

// buildLibrary runs make into a temporary directory once per test binary.
func buildLibrary() (func(), error) {
	dir, err := os.MkdirTemp("", "shmlock-clib-")
	if err != nil {
		return nil, err
	}
	build = dir
	cmd := exec.Command("make", "-s", "-j", fmt.Sprint(runtime.NumCPU()), "BUILD="+dir, "all")
	cmd.Dir = sourceDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("clib: make failed (a C compiler and make are needed): %v\n%s", err, out)
	}
	buildOutput = string(out)
	return func() { os.RemoveAll(dir) }, nil
}

// sourceDir is this package's directory: go test runs in it.
func sourceDir() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return wd
}

// helper is the path of the C helper program name (tests/helpers/name.c).
func helper(name string) string { return filepath.Join(build, "helpers", name) }

// TestCUnit runs the C unit tests (tests/test_*.c) under AddressSanitizer
// and UndefinedBehaviorSanitizer.
func TestCUnit(t *testing.T) {
	cmd := exec.Command("make", "-s", "BUILD="+build, "test")
	cmd.Dir = sourceDir()
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("C unit tests: %v", err)
	}
}
