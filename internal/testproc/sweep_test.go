package testproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A segment whose creator is gone (reaped, or a zombie) is removed, a C
// test's too; a live creator's, this process's own, a name that is not a
// test segment's and a symlink stay.
func TestSweepDead(t *testing.T) {
	dir := t.TempDir()
	reaped := exec.Command("true")
	require.NoError(t, reaped.Run())
	zombie := exec.Command("true") // exits, and is not reaped until the test ends
	require.NoError(t, zombie.Start())
	t.Cleanup(func() { _ = zombie.Wait() })
	require.Eventually(t, func() bool { return gone(uint32(zombie.Process.Pid)) }, time.Minute, time.Millisecond)
	alive := exec.Command("sleep", "60")
	require.NoError(t, alive.Start())
	t.Cleanup(func() { _ = alive.Process.Kill(); _ = alive.Wait() })

	write := func(name string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, nil, 0o600))
		return p
	}
	dead := write("shmlock-test-" + strconv.Itoa(reaped.Process.Pid) + "-TestX-1")
	undead := write("shmlock-test-" + strconv.Itoa(zombie.Process.Pid) + "-TestX-6")
	live := write("shmlock-test-" + strconv.Itoa(alive.Process.Pid) + "-TestX-2")
	own := write(prefix() + "TestX-3")
	other := write("shmlock-demo")
	odd := write("shmlock-test-notapid-TestX-4")
	cDead := write("shmlock-ctest-upgrade-release-closed-" + strconv.Itoa(reaped.Process.Pid) + "-1714636915")
	cLive := write("shmlock-ctest-lockmgr-" + strconv.Itoa(alive.Process.Pid) + "-42")
	cOdd := write("shmlock-ctest-" + strconv.Itoa(reaped.Process.Pid))
	link := filepath.Join(dir, "shmlock-test-"+strconv.Itoa(reaped.Process.Pid)+"-TestX-5")
	require.NoError(t, os.Symlink(other, link))

	require.ElementsMatch(t, []string{dead, undead, cDead}, sweepDead(dir))
	for _, p := range []string{live, own, other, odd, link, cLive, cOdd} {
		_, err := os.Lstat(p)
		require.NoError(t, err, p)
	}
	for _, p := range []string{dead, undead, cDead} {
		_, err := os.Lstat(p)
		require.ErrorIs(t, err, os.ErrNotExist, p)
	}
}
