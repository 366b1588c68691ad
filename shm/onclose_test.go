package shm_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/shm"
)

// Close runs the functions of OnClose once Closed reports true and waits
// for them before it detaches: until they return, what they (or the
// goroutines they wait for) write reaches the file.
func TestOnClose(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	slot, err := seg.Slot(0)
	require.NoError(t, err)

	started, release := make(chan struct{}), make(chan struct{})
	_, ok := seg.OnClose(func() {
		close(started)
		<-release
	})
	require.True(t, ok)
	ran := false
	stop, ok := seg.OnClose(func() { ran = true })
	require.True(t, ok)
	require.True(t, stop(), "stopped before Close")
	require.False(t, stop(), "stopped once")

	closed := make(chan error, 1)
	go func() { closed <- seg.Close() }()
	<-started
	require.True(t, seg.Closed(), "Closed is true while the functions run")
	select {
	case <-closed:
		t.Fatal("Close returned before its OnClose function")
	default:
	}
	slot.Token.Store(42) // the goroutine Close waits for still writes to the file
	close(release)
	require.NoError(t, <-closed)
	require.False(t, ran, "a stopped function does not run")

	stop, ok = seg.OnClose(func() { t.Error("ran after Close") })
	require.False(t, ok, "too late once Close has begun")
	require.False(t, stop())

	again, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer again.Close()
	s, err := again.Slot(0)
	require.NoError(t, err)
	require.Equal(t, uint64(42), s.Token.Load())
}

// A nil function is nothing to run: Close goes on as before (it used to
// start a goroutine that called nil).
func TestOnCloseNil(t *testing.T) {
	t.Parallel()
	seg, err := shm.Create(testproc.SegmentPath(t), shm.Options{})
	require.NoError(t, err)
	stop, ok := seg.OnClose(nil)
	require.True(t, ok)
	require.False(t, stop())
	_, ok = seg.OnClose(nil)
	require.True(t, ok)
	require.NoError(t, seg.Close())
	_, ok = seg.OnClose(nil)
	require.False(t, ok, "Close has begun")
}
