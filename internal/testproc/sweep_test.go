package testproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// A segment whose creator is gone is removed; a live creator's, this
// process's own, a name that is not a test segment's and a symlink stay.
func TestSweepDead(t *testing.T) {
	dir := t.TempDir()
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	alive := exec.Command("sleep", "60")
	require.NoError(t, alive.Start())
	t.Cleanup(func() { _ = alive.Process.Kill(); _ = alive.Wait() })

	write := func(name string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, nil, 0o600))
		return p
	}
	dead := write("shmlock-test-" + strconv.Itoa(gone.Process.Pid) + "-TestX-1")
	live := write("shmlock-test-" + strconv.Itoa(alive.Process.Pid) + "-TestX-2")
	own := write(prefix() + "TestX-3")
	other := write("shmlock-demo")
	odd := write("shmlock-test-notapid-TestX-4")
	link := filepath.Join(dir, "shmlock-test-"+strconv.Itoa(gone.Process.Pid)+"-TestX-5")
	require.NoError(t, os.Symlink(other, link))

	require.Equal(t, []string{dead}, sweepDead(dir))
	for _, p := range []string{live, own, other, odd, link} {
		_, err := os.Lstat(p)
		require.NoError(t, err, p)
	}
	_, err := os.Lstat(dead)
	require.ErrorIs(t, err, os.ErrNotExist)
}
