package clib_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/stretchr/testify/require"
)

// make -C clib, the README's first step in C, builds the library and the
// helpers with the Makefile's warnings on (-Wall -Wextra ...) and prints
// nothing: a warning would be the first thing a new user of libshmlock sees.
func TestBuildPrintsNoWarning(t *testing.T) {
	require.Empty(t, buildOutput, "make -s all")
}

// make install puts the header, both libraries and shmlock.pc under
// PREFIX, and a program built with what pkg-config says links the shared
// library and runs.
func TestInstallAndPkgConfig(t *testing.T) {
	prefix := t.TempDir()
	install := exec.Command("make", "-s", "BUILD="+build, "PREFIX="+prefix, "install")
	out, err := install.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, f := range []string{"include/shmlock.h", "include/shmlock.hpp", "lib/libshmlock.a",
		"lib/libshmlock.so", "lib/libshmlock.so.1", "lib/pkgconfig/shmlock.pc"} {
		require.FileExists(t, filepath.Join(prefix, f))
	}

	pc := exec.Command("pkg-config", "--cflags", "--libs", "shmlock")
	pc.Env = append(os.Environ(), "PKG_CONFIG_PATH="+filepath.Join(prefix, "lib", "pkgconfig"))
	flags, err := pc.Output()
	require.NoError(t, err, "pkg-config (the pkg-config package is needed)")
	bin := filepath.Join(t.TempDir(), "quickstart")
	args := append([]string{"-std=gnu11", "-O2", "-o", bin, "examples/quickstart.c"}, strings.Fields(string(flags))...)
	out, err = exec.Command("cc", args...).CombinedOutput()
	require.NoError(t, err, "cc %v:\n%s", args, out)

	run := exec.Command(bin, testproc.SegmentPath(t), "100")
	run.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Join(prefix, "lib"))
	out, err = run.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "counter 100\n", string(out))
	ldd := exec.Command("ldd", bin)
	ldd.Env = run.Env
	lddOut, err := ldd.Output()
	require.NoError(t, err)
	require.Contains(t, string(lddOut), filepath.Join(prefix, "lib", "libshmlock.so.1"), "linked the shared library")
}
