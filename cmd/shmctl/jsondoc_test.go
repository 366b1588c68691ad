package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
)

func ptr[T any](v T) *T { return &v }

// process is the process object of id with liveness as a document shows
// it, less its start time (see checkStarted).
func process(id proc.Identity, liveness string) *processJSON {
	return &processJSON{PID: id.PID, StartTicks: id.StartTicks, Liveness: liveness}
}

// checkStarted checks the start time of p (if not nil) against its start
// ticks, null for a stale process, and clears it so that p compares with
// process(...). The time is the boot time plus the ticks, and the boot
// time /proc/stat gives may move by a second when the clock is set.
func checkStarted(tb testing.TB, p *processJSON) {
	tb.Helper()
	if p == nil {
		return
	}
	if p.Liveness == livenessStale {
		assert.Nil(tb, p.Started, "a stale process's start time")
		return
	}
	want, err := proc.Identity{PID: p.PID, StartTicks: p.StartTicks}.StartTime()
	require.NoError(tb, err)
	if assert.NotNil(tb, p.Started, "the start time of pid %d", p.PID) {
		assert.WithinDuration(tb, want, *p.Started, time.Second)
	}
	p.Started = nil
}
