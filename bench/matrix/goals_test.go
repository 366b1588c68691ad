package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func samples(ops ...float64) []Sample {
	s := make([]Sample, len(ops))
	for i, x := range ops {
		s[i] = Sample{Round: i + 1, OpsPerSec: x}
	}
	return s
}

// A goal against several references divides, round by round, by the best
// of them in that round; an absolute goal judges the lock's own figure; a
// cell without the lock or a reference gives no row.
func TestGoalJudge(t *testing.T) {
	t.Parallel()
	c := Cell{Workload: "counter", Procs: 2, Entries: []Entry{
		{Name: "shmlock_spin", Samples: samples(30, 15, 20)},
		{Name: "pthread_mutex", Samples: samples(10, 10, 40)},
		{Name: "boost_mutex", Samples: samples(20, 5, 10)},
	}}
	for _, tc := range []struct {
		name   string
		g      goal
		values []float64
		median float64
		met    bool
	}{
		{"best of two per round", goal{Lock: "shmlock_spin", Against: []string{"pthread_mutex", "boost_mutex"}, Min: 1.5}, []float64{1.5, 1.5, 0.5}, 1.5, true},
		{"one reference", goal{Lock: "shmlock_spin", Against: []string{"pthread_mutex"}, Min: 1.6}, []float64{3, 1.5, 0.5}, 1.5, false},
		{"throughput bound", goal{Lock: "shmlock_spin", Min: 20}, []float64{30, 15, 20}, 20, true},
		{"time bound", goal{Lock: "shmlock_spin", MaxNs: 5e7}, []float64{1e9 / 30, 1e9 / 15, 1e9 / 20}, 5e7, true},
		{"time bound missed", goal{Lock: "shmlock_spin", MaxNs: 4e7}, []float64{1e9 / 30, 1e9 / 15, 1e9 / 20}, 5e7, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := tc.g.judge(&c)
			require.NotNil(t, row)
			require.InDeltaSlice(t, tc.values, row.Values, 1e-9)
			require.InDelta(t, tc.median, row.Median, 1e-9)
			require.Equal(t, tc.met, row.Met)
		})
	}
	require.Nil(t, goal{Lock: "shmlock_upgrade", Against: []string{"pthread_mutex"}}.judge(&c), "no such lock in the cell")
	require.Nil(t, goal{Lock: "shmlock_spin", Against: []string{"pthread_rwlock"}}.judge(&c), "no such reference in the cell")
}

// The table lists every goal whose cell the run has, with its verdict.
func TestWriteGoals(t *testing.T) {
	t.Parallel()
	res := Results{Cells: []Cell{{Workload: "pingpong_retry", Procs: 2, Entries: []Entry{
		{Name: "shmlock_spin", Samples: samples(9, 11, 10)},
		{Name: "shmlock_spin_token", Samples: samples(12, 12, 12)},
		{Name: "pthread_mutex_robust", Samples: samples(10, 10, 10)},
	}}}}
	var b strings.Builder
	res.writeGoals(&b)
	out := b.String()
	require.Contains(t, out, "| spinlock pingpong_retry at least pthread's robust mutex | pingpong_retry P=2 | shmlock_spin | pthread_mutex_robust | 0.90-1.10x (1.000x) | yes |")
	require.Contains(t, out, "| token mode's pingpong_retry at least pid/tid mode's | pingpong_retry P=2 | shmlock_spin_token | shmlock_spin | 1.09-1.33x (1.200x) | yes |")
	require.NotContains(t, out, "libshmlock", "no row for a lock the run does not have")
	require.NotContains(t, out, "counter", "nor for a cell it does not have")

	var none strings.Builder
	(&Results{}).writeGoals(&none)
	require.Empty(t, none.String())
}
