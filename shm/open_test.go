package shm_test

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
)

// Opening a FIFO or a device runs its driver's open, which may do things
// of its own (a tape rewinds, a terminal becomes a controlling terminal).
// What is not a regular file is refused before it is opened: the FIFO's
// reader never sees a writer come and go (a POLLHUP once the writer has
// gone), and the kernel reports no other open of either than the one that
// only looks at the file's type (O_PATH, of which kernels since 6.5
// report nothing). Before, Open opened the path O_RDWR|O_NONBLOCK and
// refused the file after: the reader saw POLLHUP, and inotify an IN_OPEN
// and an IN_CLOSE_WRITE (an IN_CLOSE_NOWRITE for Remove and read-only
// opens).
func TestOpenOpensNoFIFOOrDevice(t *testing.T) {
	t.Parallel()
	fifo := testproc.SegmentPath(t)
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	paths := []string{fifo}
	device := testproc.SegmentPath(t)
	null := int(unix.Mkdev(1, 3)) // /dev/null's numbers: a device every Linux has
	if err := syscall.Mknod(device, syscall.S_IFCHR|0o600, null); err == nil {
		paths = append(paths, device)
	} else {
		t.Logf("no device node (mknod: %v): the FIFO only", err)
	}
	calls := map[string]func(path string) error{
		"Open": func(path string) error { _, err := shm.Open(path, shm.Options{}); return err },
		"Open read-only": func(path string) error {
			_, err := shm.Open(path, shm.Options{ReadOnly: true})
			return err
		},
		"OpenOrCreate": func(path string) error { _, err := shm.OpenOrCreate(path, shm.Options{}); return err },
		"Remove":       shm.Remove,
	}
	for _, path := range paths {
		typeOnly := openEvents(t, path, func() {
			fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			require.NoError(t, err)
			require.NoError(t, unix.Close(fd))
		})
		for name, call := range calls {
			var err error
			got := openEvents(t, path, func() { err = call(path) })
			require.ErrorIs(t, err, shm.ErrNotRegular, "%s(%s)", name, path)
			require.Equal(t, typeOnly, got, "%s(%s): inotify events: got %v, want those of an O_PATH open", name, path, got)
		}
	}

	reader, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(reader)
	_, err = shm.Open(fifo, shm.Options{})
	require.ErrorIs(t, err, shm.ErrNotRegular)
	fds := []unix.PollFd{{Fd: int32(reader), Events: unix.POLLIN}}
	_, err = unix.Poll(fds, 0)
	require.NoError(t, err)
	require.Zero(t, fds[0].Revents&unix.POLLHUP, "the FIFO's reader saw a writer come and go")
}

// openEvents returns the masks of the inotify events of opens and closes
// of path while f ran.
func openEvents(t *testing.T, path string, f func()) []uint32 {
	t.Helper()
	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(in)
	_, err = unix.InotifyAddWatch(in, path, unix.IN_OPEN|unix.IN_CLOSE_WRITE|unix.IN_CLOSE_NOWRITE)
	require.NoError(t, err)
	f()
	masks := []uint32{}
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(in, buf)
		if errors.Is(err, unix.EAGAIN) {
			return masks
		}
		require.NoError(t, err)
		// struct inotify_event: wd, mask, cookie, len, then len bytes of name.
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			masks = append(masks, binary.NativeEndian.Uint32(buf[off+4:]))
			off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
		}
	}
}

// Replaced tells a segment whose path still names its file from one
// removed, and from one removed and made again under its path; ErrClosed
// after Close.
func TestReplaced(t *testing.T) {
	t.Parallel()
	path, ro := readOnlyLook(t)
	replaced, err := ro.Replaced()
	require.NoError(t, err)
	require.False(t, replaced)
	require.NoError(t, shm.Remove(path))
	replaced, err = ro.Replaced()
	require.NoError(t, err)
	require.True(t, replaced, "removed")
	again, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	defer again.Close()
	replaced, err = ro.Replaced()
	require.NoError(t, err)
	require.True(t, replaced, "made again")
	replaced, err = again.Replaced()
	require.NoError(t, err)
	require.False(t, replaced, "the new file's own segment")
	require.NoError(t, ro.Close())
	_, err = ro.Replaced()
	require.ErrorIs(t, err, shm.ErrClosed)
}

// Replaced racing the Segment's Close fails with ErrClosed, as it does
// after Close: a Close between its check and the stat closed the file
// under it, and the caller got "file already closed", in which errors.Is
// finds no ErrClosed.
func TestReplacedRacingClose(t *testing.T) {
	_, ro := readOnlyLook(t)
	defer shm.SetTestHookReplaced(func() { require.NoError(t, ro.Close()) })()
	_, err := ro.Replaced()
	require.ErrorIs(t, err, shm.ErrClosed)
}

// readOnlyLook creates a segment at a new path, closed when the test ends,
// and opens a read-only look at it, which the caller closes.
func readOnlyLook(t *testing.T) (path string, ro *shm.Segment) {
	t.Helper()
	path = testproc.SegmentPath(t)
	w, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	ro, err = shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	return path, ro
}
