package clib_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() { helpers["example-counter"] = exampleCounterHelper }

// exampleCounterHelper is the Go side of the examples' counter: the same
// lock, the same region, plain reads and writes under the lock.
func exampleCounterHelper(args []string) int {
	n, _ := strconv.Atoi(args[1])
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer seg.Close()
	lock, err := spinlock.Named(seg, "counter", spinlock.PIDTID)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer lock.Close()
	region, err := seg.Data("counter", 8)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	word := region.Bytes()
	me := spinlock.NewHolder()
	for range n {
		g, err := lock.Lock(me)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		binary.LittleEndian.PutUint64(word, binary.LittleEndian.Uint64(word)+1)
		if err := g.Release(); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	return 0
}

// compile builds one of examples/ against the static library.
func compile(t *testing.T, compiler, src string, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), filepath.Ext(src)))
	args := append(flags, "-O2", "-Iinclude", "-o", bin, src, filepath.Join(build, "libshmlock.a"), "-pthread")
	out, err := exec.Command(compiler, args...).CombinedOutput()
	require.NoError(t, err, "%s %v:\n%s", compiler, args, out)
	return bin
}

// The Python example says in one line what went wrong, as the C one does,
// and exits 1: a library it cannot load (SHMLOCK_LIB wrong, or not built
// yet), a segment it cannot open. A traceback is no answer to a new user.
func TestPythonExampleFailsInOneLine(t *testing.T) {
	notSegment := filepath.Join(t.TempDir(), "not-a-segment")
	require.NoError(t, os.WriteFile(notSegment, make([]byte, 4096), 0o600))
	for _, tc := range []struct {
		lib, segment, want string
	}{
		{"/nonexistent/libshmlock.so", testproc.SegmentPath(t), "cannot load libshmlock"},
		{filepath.Join(build, "libshmlock.so"), notSegment, "open: "},
	} {
		cmd := exec.Command("python3", "examples/python/counter.py", tc.segment, "1")
		cmd.Env = append(cmd.Environ(), "SHMLOCK_LIB="+tc.lib)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s", out)
		assert.Equal(t, 1, exit.ExitCode(), "%s", out)
		assert.True(t, strings.HasPrefix(string(out), "counter.py: "+tc.want), "%q", out)
		assert.Equal(t, 1, strings.Count(string(out), "\n"), "one line: %q", out)
	}
}

// The README's examples in C, C++ and Python count in one segment beside a
// Go process, all under one spinlock: the counter is exactly the sum.
func TestExamplesCountTogether(t *testing.T) {
	cBin := compile(t, "cc", "examples/quickstart.c", "-std=gnu11", "-Wall", "-Werror")
	cxxBin := compile(t, "c++", "examples/quickstart.cpp", "-std=c++17", "-Wall", "-Werror")
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	defer seg.Close()

	const n = 3000
	cmds := []*exec.Cmd{
		exec.Command(cBin, path, strconv.Itoa(n)),
		exec.Command(cBin, path, strconv.Itoa(n)),
		exec.Command(cxxBin, path, strconv.Itoa(n)),
		exec.Command("python3", "examples/python/counter.py", path, strconv.Itoa(n/10)),
		testproc.Command("example-counter", path, strconv.Itoa(n)),
	}
	cmds[3].Env = append(cmds[3].Environ(), "SHMLOCK_LIB="+filepath.Join(build, "libshmlock.so"))
	want := uint64(4*n + n/10)

	var wg sync.WaitGroup
	outs := make([]string, len(cmds))
	for i, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			outs[i] = string(out)
			if err != nil {
				outs[i] += "error: " + err.Error()
			}
		}()
	}
	wg.Wait()
	for i, out := range outs {
		require.NotContains(t, out, "error:", "%v", cmds[i].Args)
	}
	require.Contains(t, outs[2], "report version", "the C++ example's lock-manager hold")

	lock, err := spinlock.Named(seg, "counter", spinlock.PIDTID)
	require.NoError(t, err)
	defer lock.Close()
	region, err := seg.Data("counter", 8)
	require.NoError(t, err)
	g, err := lock.Lock(spinlock.NewHolder())
	require.NoError(t, err)
	got := binary.LittleEndian.Uint64(region.Bytes())
	require.NoError(t, g.Release())
	require.Equal(t, want, got)

	// The C++ example's upgrade mutex was left free: its claim, released
	// when the example closed its handle, went with it (a claim whose lock
	// is still held stays).
	_, err = seg.Lookup(layout.KindUpgrades, "record")
	require.ErrorIs(t, err, shm.ErrNotFound, "the upgrade mutex was left held")
}
