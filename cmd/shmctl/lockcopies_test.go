package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// groupCopies holds each signal shmctl passes on against the guard's own
// copies of the same signal, arrived before or after it within
// copyWindow; what finds none goes to the command once its wait is over,
// in order; one copy covers every pass-on of its signal in its window
// (signals of one number merge, so counts would not match); a command
// out of the group gets everything at once.
func TestGroupCopies(t *testing.T) {
	const (
		intr = syscall.SIGINT
		term = syscall.SIGTERM
	)
	type event struct {
		at      time.Duration // since the start
		copy    bool          // the guard's own copy; else shmctl's pass-on
		sig     syscall.Signal
		inGroup bool // for a pass-on: the command is in the group
	}
	ms := time.Millisecond
	for _, tt := range []struct {
		name   string
		events []event
		end    time.Duration
		want   []syscall.Signal // reach the command, in order
	}{
		{"copy first", []event{{0, true, intr, true}, {10 * ms, false, intr, true}}, time.Second, nil},
		{"pass-on first", []event{{0, false, intr, true}, {copyWindow - ms, true, intr, true}}, time.Second, nil},
		{"alone", []event{{0, false, term, true}}, time.Second, []syscall.Signal{term}},
		{"alone, before its wait is over", []event{{0, false, term, true}}, copyWindow - ms, nil},
		{"copy expired", []event{{0, true, intr, true}, {copyWindow + ms, false, intr, true}}, time.Second, []syscall.Signal{intr}},
		{"copy too late", []event{{0, false, intr, true}, {copyWindow + ms, true, intr, true}}, time.Second, []syscall.Signal{intr}},
		{"one copy covers the pass-ons after it", []event{{0, true, intr, true}, {ms, false, intr, true}, {2 * ms, false, intr, true}}, time.Second, nil},
		{"one copy cancels the pass-ons before it", []event{{0, false, intr, true}, {ms, false, intr, true}, {2 * ms, true, intr, true}}, time.Second, nil},
		{"a copy cancels its own signal only", []event{{0, false, term, true}, {ms, false, intr, true}, {2 * ms, true, intr, true}}, time.Second, []syscall.Signal{term}},
		{"another signal's copy", []event{{0, true, intr, true}, {ms, false, term, true}}, time.Second, []syscall.Signal{term}},
		{"in order", []event{{0, false, intr, true}, {ms, false, term, true}}, time.Second, []syscall.Signal{intr, term}},
		{"out of the group", []event{{0, true, intr, true}, {ms, false, intr, false}}, ms, []syscall.Signal{intr}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var g groupCopies
			start := time.Unix(1e9, 0)
			var got []syscall.Signal
			for _, e := range tt.events {
				now := start.Add(e.at)
				got = append(got, g.due(now)...)
				if e.copy {
					g.copied(e.sig, now)
				} else if g.passOn(e.sig, now, e.inGroup) {
					got = append(got, e.sig)
				}
			}
			got = append(got, g.due(start.Add(tt.end))...)
			require.Equal(t, tt.want, got)
			require.Equal(t, len(g.pending) > 0, g.wake() != nil, "a timer is armed exactly while a pass-on waits")
		})
	}
}
