package lockmgr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
)

// A process stopped inside a call into the manager (here a release, at a
// step under the entry lock) keeps the resource's entry lock for as long
// as it stays stopped. ForceRelease waits for it all that time;
// ForceReleaseContext gives up when its context ends, having changed
// nothing, with the context's error and the stopped process's pid. Once
// the process is dead its entry lock is taken over, and the waiting
// ForceRelease goes on.
func TestForceReleaseContextStoppedHolder(t *testing.T) {
	t.Parallel()
	m, _, path := newManagerAt(t, 8, lockmgr.Options{Logger: discard()})
	_, err := m.Acquire(context.Background(), "other", "o", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	c := testproc.Start(t, "crash-at", path, "endHold:process", "release", "r", "o")
	c.WaitLine(t, "at endHold:process")
	c.WaitStopped(t)
	before, err := m.Inspect("r")
	require.NoError(t, err)

	blocked := make(chan error, 1)
	go func() { _, err := m.ForceRelease("r"); blocked <- err }()

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	deadline, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer stop()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"deadline", deadline, context.DeadlineExceeded},
		{"cancelled before", cancelled, context.Canceled},
	} {
		ended, err := m.ForceReleaseContext(tc.ctx, "r")
		require.ErrorIs(t, err, tc.want, tc.name)
		require.ErrorContains(t, err, fmt.Sprintf("pid %d", c.PID()), tc.name)
		require.Empty(t, ended, tc.name)
		after, err := m.Inspect("r")
		require.NoError(t, err)
		require.Equal(t, before, after, "%s: the force changed the resource", tc.name)
	}
	// Not a timing check: a ForceRelease that returned while the entry
	// lock's holder lived would be a bug however soon it came.
	select {
	case err := <-blocked:
		t.Fatalf("ForceRelease returned (%v) while the entry lock's holder lived", err)
	default:
	}
	ended, err := m.ForceReleaseContext(context.Background(), "other")
	require.NoError(t, err, "another resource's entry is not held")
	require.Len(t, ended, 1)

	c.Kill(t)
	require.NoError(t, testproc.Receive(t, blocked, "ForceRelease after the holder's death"))
}
