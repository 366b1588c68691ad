package shm_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// On a goroutine of its own (shmctl lock's lease renewal, a monitor's
// scrape), a fault on a segment cut short under the mapping is ErrFault
// under CatchFault: there it killed the process with a runtime trace.
// Without a fault, f's own error (or none) comes back; other panics go on.
func TestCatchFault(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 1024}})
	require.NoError(t, os.Truncate(path, 0))
	done := make(chan error, 1)
	go func() {
		done <- shm.CatchFault(func() error {
			s, err := seg.Slot(1023)
			if err != nil {
				return err
			}
			_ = s.PID.Load()
			return errors.New("the load did not fault")
		})
	}()
	err := <-done
	require.ErrorIs(t, err, shm.ErrFault)
	require.True(t, strings.HasPrefix(err.Error(), "memory fault at 0x"), "error %q", err)
	require.NoError(t, shm.CatchFault(func() error { return nil }))
	errOwn := errors.New("f's own")
	require.ErrorIs(t, shm.CatchFault(func() error { return errOwn }), errOwn)
	require.PanicsWithValue(t, "not a fault", func() { _ = shm.CatchFault(func() error { panic("not a fault") }) })
	_, ok := shm.FaultOf("not a fault")
	require.False(t, ok)
}
