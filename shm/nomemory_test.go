package shm_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
)

// A process whose address space has no room left for a segment's mapping
// (its RLIMIT_AS reached here; vm.max_map_count does the same) fails
// Open and Create with ErrNoMemory, which wraps ENOMEM too, and Create
// leaves no file. It came back as a bare errno.
// The helper's runtime shares the address space the limit leaves no room
// in: when it needs a mapping of its own meanwhile (the allocator's
// metadata, or the heap's growth, as the helper allocates), it dies (in 1
// or 2 runs in 100), having said nothing about Open and Create. Such a
// run is made again; any other outcome is the test's.
func TestMapWithoutAddressSpace(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, bigOptions)
	if err != nil {
		t.Fatal(err)
	}
	_ = seg.Close()
	const runs = 20
	for run := 1; ; run++ {
		dir := t.TempDir()
		out, err := testproc.Command("map-limited", path, filepath.Join(dir, "new")).CombinedOutput()
		if run < runs && runtimeOutOfMemory(out) {
			t.Logf("run %d: the helper's runtime ran out of address space:\n%s", run, out)
			continue
		}
		want := "open nomemory=true enomem=true\ncreate nomemory=true enomem=true files=[]\n"
		if first, _, _ := strings.Cut(string(out), "\n\t"); err != nil || !strings.HasPrefix(string(out), want) {
			t.Fatalf("helper: %v; got %q, want %q", err, first, want)
		}
		return
	}
}

// runtimeOutOfMemory reports whether out is that of a helper whose
// runtime died for want of memory before it printed a line of its own.
func runtimeOutOfMemory(out []byte) bool {
	return bytes.HasPrefix(out, []byte("fatal error: runtime: cannot allocate memory\n")) ||
		bytes.HasPrefix(out, []byte("runtime: out of memory: ")) ||
		bytes.HasPrefix(out, []byte("fatal error: out of memory\n"))
}

// mapLimitedHelper OPEN_PATH CREATE_PATH limits this process's address
// space to what it uses now, then opens the segment at OPEN_PATH and
// creates one at CREATE_PATH. It prints "open nomemory=B enomem=B" and
// "create nomemory=B enomem=B files=[...]" (what CREATE_PATH's directory
// holds after it), then the errors, each on a line of its own beginning
// with a tab.
func mapLimitedHelper(args []string) int {
	vm, err := vmSize()
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &lim); err != nil {
		fmt.Println("error", err)
		return 2
	}
	lim.Cur = vm
	if err := unix.Setrlimit(unix.RLIMIT_AS, &lim); err != nil {
		fmt.Println("error", err)
		return 2
	}
	_, openErr := shm.Open(args[0], shm.Options{})
	_, createErr := shm.Create(args[1], bigOptions)
	names, dirErr := filepath.Glob(filepath.Join(filepath.Dir(args[1]), "*"))
	if dirErr != nil {
		names = []string{dirErr.Error()}
	}
	hidden, _ := filepath.Glob(filepath.Join(filepath.Dir(args[1]), ".*"))
	fmt.Printf("open nomemory=%t enomem=%t\n", errors.Is(openErr, shm.ErrNoMemory), errors.Is(openErr, syscall.ENOMEM))
	fmt.Printf("create nomemory=%t enomem=%t files=%q\n", errors.Is(createErr, shm.ErrNoMemory), errors.Is(createErr, syscall.ENOMEM), append(names, hidden...))
	fmt.Printf("\t%v\n\t%v\n", openErr, createErr)
	return 0
}

// vmSize is this process's address space in bytes (VmSize of
// /proc/self/status).
func vmSize() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmSize:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmSize in /proc/self/status")
}
