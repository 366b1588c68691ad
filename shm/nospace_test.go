package shm_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// The segment of the full-file-system tests: 1 MiB of data area alone, four
// times the tmpfs they make it in (fullTmpfsSize), whose first pages still
// hold the few a sparse segment's header and directories touch.
var (
	bigOptions    = shm.Options{Options: layout.Options{DataBytes: 1 << 20}}
	fullTmpfsSize = int64(256 << 10)
)

// createFullHelper DIR mounts a tmpfs too small for the segment on DIR (in
// the helper's own mount namespace) and creates the segment there. It
// prints "nospace=B enospc=B files=[...]" for a Create that failed (the
// error's sentinels and what DIR holds after it), with the error on the
// next line. A Create that succeeds is followed by writes to each page of
// the data area, which on a sparse file raise SIGBUS once the file system
// is full: a build that only sized the file died there.
func createFullHelper(args []string) int {
	dir := args[0]
	if code, ok := mountFor(dir, fullTmpfsSize); !ok {
		return code
	}
	seg, err := shm.Create(filepath.Join(dir, "seg"), bigOptions)
	if err == nil {
		fillData(seg)
		fmt.Println("created a segment larger than its file system, and wrote all its data area")
		return 1
	}
	names, dirErr := filepath.Glob(filepath.Join(dir, "*"))
	if dirErr != nil {
		names = []string{dirErr.Error()}
	}
	hidden, _ := filepath.Glob(filepath.Join(dir, ".*")) // a pending file's name, without O_TMPFILE
	fmt.Printf("nospace=%t enospc=%t files=%q\n%v\n", errors.Is(err, shm.ErrNoSpace),
		errors.Is(err, syscall.ENOSPC), append(names, hidden...), err)
	return 0
}

// openSparseHelper DIR mounts a roomy tmpfs on DIR and a small one on
// DIR/small, and makes in the small one the sparse segment a build of
// shmlock that only sized its files left: the pages of a new segment that
// are not zero, at their offsets, in a file of its size. It then opens it
// writable and prints "nospace=B enospc=B" and the error, as
// createFullHelper for a Create; an Open that succeeds is
// followed by the same writes, and the SIGBUS of a build that took the
// sparse file as it was.
func openSparseHelper(args []string) int {
	dir := args[0]
	small := filepath.Join(dir, "small")
	if code, ok := mountFor(dir, 4<<20); !ok {
		return code
	}
	if err := os.Mkdir(small, 0o700); err != nil {
		fmt.Println(err)
		return 2
	}
	if code, ok := mountFor(small, fullTmpfsSize); !ok {
		return code
	}
	full := filepath.Join(dir, "full")
	seg, err := shm.Create(full, bigOptions)
	if err != nil {
		fmt.Println("create:", err)
		return 2
	}
	_ = seg.Close()
	sparse := filepath.Join(small, "seg")
	if err := copySparse(full, sparse); err != nil {
		fmt.Println(err)
		return 2
	}
	seg, err = shm.Open(sparse, shm.Options{})
	if err == nil {
		fillData(seg)
		fmt.Println("opened a sparse segment larger than its file system, and wrote all its data area")
		return 1
	}
	fmt.Printf("nospace=%t enospc=%t\n%v\n", errors.Is(err, shm.ErrNoSpace), errors.Is(err, syscall.ENOSPC), err)
	return 0
}

// mountFor mounts a tmpfs of size bytes on dir, or says why not and gives
// the helper's exit status.
func mountFor(dir string, size int64) (code int, ok bool) {
	if err := testproc.MountTmpfs(dir, size); err != nil {
		fmt.Println(err)
		if testproc.MountRefused(err) {
			return testproc.ExitCannotMount, false
		}
		return 2, false
	}
	return 0, true
}

// fillData claims the whole data area as one region and writes each of
// its pages, more than the file system has room for.
func fillData(seg *shm.Segment) {
	size, _, err := seg.DataArea()
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := seg.Data("end", size)
	if err != nil {
		fmt.Println(err)
		return
	}
	b := r.Bytes()
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
}

// copySparse writes the pages of src that are not all zero into a new file
// dst of src's size, leaving the others holes.
func copySparse(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(int64(len(data))); err != nil {
		return err
	}
	zero := make([]byte, os.Getpagesize())
	for off := 0; off < len(data); off += len(zero) {
		page := data[off:min(off+len(zero), len(data))]
		if bytes.Equal(page, zero[:len(page)]) {
			continue
		}
		if _, err := f.WriteAt(page, int64(off)); err != nil {
			return err
		}
	}
	return nil
}

// allocated is how many bytes of the file at path have memory or blocks.
func allocated(tb testing.TB, path string) int64 {
	tb.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

// checkNoSpace checks the first line of a helper's report.
func checkNoSpace(t *testing.T, out []byte, err error, want string) {
	t.Helper()
	if first, _, _ := strings.Cut(string(out), "\n"); err != nil || first != want {
		t.Fatalf("helper: %v; got %q, want %q; output:\n%s", err, first, want, out)
	}
}

// Create on a full file system fails with ErrNoSpace, which also wraps
// ENOSPC, and leaves no file: the segment's memory is reserved before it
// gets a name. A segment that was only sized got it and a SIGBUS later.
func TestCreateOnFullFileSystem(t *testing.T) {
	t.Parallel()
	out, err := testproc.RunWithOwnMounts(t, "create-full", t.TempDir())
	checkNoSpace(t, out, err, `nospace=true enospc=true files=[]`)
}

// A writable Open of a sparse segment (made by a build that only sized the
// file) reserves its memory, and on a full file system fails with
// ErrNoSpace rather than let a first write to a page raise SIGBUS.
func TestOpenSparseOnFullFileSystem(t *testing.T) {
	t.Parallel()
	out, err := testproc.RunWithOwnMounts(t, "open-sparse", t.TempDir())
	checkNoSpace(t, out, err, `nospace=true enospc=true`)
}

// A new segment has all its memory; a sparse one gets it from a writable
// Open, not from a read-only one, which may not write.
func TestSegmentMemoryReserved(t *testing.T) {
	t.Parallel()
	full := testproc.SegmentPath(t)
	seg, err := shm.Create(full, bigOptions)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(seg.Header().TotalSize)
	_ = seg.Close()
	if got := allocated(t, full); got < size {
		t.Errorf("Create: got %d bytes allocated, want %d", got, size)
	}

	sparse := testproc.SegmentPath(t)
	if err := copySparse(full, sparse); err != nil {
		t.Fatal(err)
	}
	before := allocated(t, sparse)
	if before >= size {
		t.Fatalf("copySparse: got %d bytes allocated, want fewer than %d", before, size)
	}
	ro, err := shm.Open(sparse, shm.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = ro.Close()
	if got := allocated(t, sparse); got != before {
		t.Errorf("read-only Open: got %d bytes allocated, want %d as before", got, before)
	}
	rw, err := shm.Open(sparse, shm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = rw.Close()
	if got := allocated(t, sparse); got < size {
		t.Errorf("writable Open: got %d bytes allocated, want %d", got, size)
	}
}
