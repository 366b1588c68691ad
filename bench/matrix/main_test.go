package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// testBin holds the drivers the tests build (never bench/bin: a test does
// not touch the checkout).
var testBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "shmlock-bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testBin = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	// Every driver removes its shared file; the matrix removes what a
	// driver left.
	if left, _ := filepath.Glob(fmt.Sprintf("/dev/shm/shmlock-matrix-%d-*", os.Getpid())); len(left) > 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "left behind: %v\n", left)
		code = 1
	}
	os.Exit(code)
}

var (
	cDrivers     = []string{"pthread_mutex_robust", "pthread_mutex", "pthread_rwlock", "flock", "ofd", "cas_floor", "shmlock_spin_c", "shmlock_upgrade_c", "shmlock_lockmgr_c"}
	boostDrivers = []string{"boost_mutex", "boost_upgradable"}
)

// built is what buildOnce made; why says what it could not.
var built struct {
	once            sync.Once
	c, boost        bool
	whyNot, boostNo string
}

// buildDrivers builds the drivers into testBin once, with warnings as
// errors. It skips the test when there is no C compiler or make.
func buildDrivers(tb testing.TB) {
	tb.Helper()
	built.once.Do(func() {
		for _, tool := range []string{"make", "cc"} {
			if _, err := exec.LookPath(tool); err != nil {
				built.whyNot = fmt.Sprintf("no %s on PATH: the C drivers need a C compiler and make", tool)
				return
			}
		}
		mk := func(target string) (string, error) {
			cmd := exec.Command("make", "-s", "-C", "..", "BIN="+testBin,
				"CFLAGS=-O2 -Wall -Wextra -Werror", "CXXFLAGS=-O2 -Wall -Wextra -Werror", target)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		out, err := mk("c")
		if err != nil {
			built.whyNot = "make c failed: " + out
			return
		}
		built.c = true
		if !boostHeaders() {
			built.boostNo = "no C++ compiler with the Boost headers (Debian: apt-get install libboost-dev)"
			return
		}
		if out, err := mk("cpp"); err != nil {
			built.boostNo = "make cpp failed: " + out
			return
		}
		built.boost = true
	})
	if !built.c {
		if strings.HasPrefix(built.whyNot, "make c failed") {
			tb.Fatal(built.whyNot) // a compiler is there: the drivers must build
		}
		tb.Skip(built.whyNot)
	}
}

// boostHeaders says whether c++ compiles an include of Boost.Interprocess.
func boostHeaders() bool {
	if _, err := exec.LookPath("c++"); err != nil {
		return false
	}
	cmd := exec.Command("c++", "-std=gnu++17", "-fsyntax-only", "-x", "c++", "-")
	cmd.Stdin = strings.NewReader("#include <boost/interprocess/sync/interprocess_upgradable_mutex.hpp>\n")
	return cmd.Run() == nil
}
