package proc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
)

// CPUTime counts this process's work: it grows while the caller computes.
func TestCPUTime(t *testing.T) {
	before, err := proc.CPUTime()
	require.NoError(t, err)
	require.Positive(t, before, "a running process has used some CPU")
	x := uint64(1)
	for after := before; after == before; after, err = proc.CPUTime() {
		require.NoError(t, err)
		for range 1_000_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	after, err := proc.CPUTime()
	require.NoError(t, err)
	require.Greater(t, after, before, "work (%d) adds CPU time", x%2)
}
