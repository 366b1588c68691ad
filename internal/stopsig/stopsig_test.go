package stopsig_test

import (
	"os/signal"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/stopsig"
)

// A stop signal reaches the handler while it is installed; after stop, the
// handler is not called. Not parallel: it signals the test process.
func TestOn(t *testing.T) {
	if signal.Ignored(syscall.SIGHUP) {
		t.Skip("SIGHUP was ignored when the test started (nohup): On leaves it so")
	}
	got := make(chan syscall.Signal, 1)
	stop := stopsig.On(func(s syscall.Signal) { got <- s })
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGHUP))
	require.Equal(t, syscall.SIGHUP, <-got)
	stop()
	require.Equal(t, 129, stopsig.ExitStatus(syscall.SIGHUP))
}
