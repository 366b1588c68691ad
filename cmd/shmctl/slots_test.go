package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

func TestSlotsFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want slotsOptions
	}{
		{[]string{"jobs"}, slotsOptions{Segment: "jobs"}},
		{[]string{"jobs", "--all", "--json"}, slotsOptions{Segment: "jobs", All: true, JSON: true}},
		{[]string{"-a", "/x/y"}, slotsOptions{Segment: "/x/y", All: true}},
		{[]string{"jobs", "--group"}, slotsOptions{Segment: "jobs", Group: true}},
	}
	for _, tt := range tests {
		got, ios := parsedOptions(t, newCmdSlots, tt.args)
		tt.want.IO = ios
		assert.Equal(t, &tt.want, got, "args %q", tt.args)
	}
}

// slotsSegment makes a segment of 6 slots, 4 of them in use:
//
//	0 "jobs"  claimed, held by this process in pid/tid mode
//	1 ""      claimed, held by a dead incarnation of this pid
//	2 ""      not claimed, but holding a token
//	3 ""      not claimed, owner recorded under a previous boot
func slotsSegment(t *testing.T) *shm.Segment {
	t.Helper()
	seg := newSegment(t, layout.Options{Slots: 6})
	self := proc.Self()

	i, err := seg.Claim(layout.KindOwnerSlots, "jobs")
	require.NoError(t, err)
	require.Equal(t, 0, i)
	s, err := seg.Slot(i)
	require.NoError(t, err)
	s.PID.Store(self.Pack())
	s.TID.Store(7)
	s.Token.Store(42)
	s.RecursionCount.Store(2)
	s.Pad.Store(1)

	i, err = seg.Claim(layout.KindOwnerSlots, "")
	require.NoError(t, err)
	require.Equal(t, 1, i)
	s, _ = seg.Slot(i)
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}
	s.PID.Store(dead.Pack())
	s.TID.Store(9)

	s, _ = seg.Slot(2)
	s.Token.Store(5)

	s, _ = seg.Slot(3)
	s.PID.Store(proc.MarkStale(self.Pack()))
	return seg
}

func TestSlotsText(t *testing.T) {
	t.Parallel()
	seg := slotsSegment(t)
	pid := proc.Self().PID
	inUse := fmt.Sprintf(""+
		"0\tjobs\t1\tpid/tid\t%[1]d\talive\t7\t-\t42\t2\t1\n"+
		"1\t\t1\tpid/tid\t%[1]d\tdead\t9\t-\t0\t0\t0\n"+
		"2\t\t0\ttoken\t-\t-\t-\t5\t-\t0\t0\n"+
		"3\t\t0\tpid/tid\t%[1]d\tstale\t-\t-\t0\t0\t0\n", pid)

	r := shmctl(t, false, "--no-header", "slots", seg.Path())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stderr)
	assert.Equal(t, inUse, r.stdout)

	r = shmctl(t, false, "--no-header", "slots", "--all", seg.Path())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, inUse+
		"4\t\t0\tfree\t-\t-\t-\t-\t-\t0\t0\n"+
		"5\t\t0\tfree\t-\t-\t-\t-\t-\t0\t0\n", r.stdout)

	r = shmctl(t, true, "slots", seg.Path())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	pidCol := fmt.Sprintf("%-*d", max(len(fmt.Sprint(pid)), len("PID"))+2, pid)
	assert.Contains(t, r.stdout, "INDEX  NAME  REFS  MODE     PID")
	assert.Contains(t, r.stdout, "\n0      jobs  1     pid/tid  "+pidCol+"alive  ")
	assert.Contains(t, r.stdout, "\n2            0     token    -")
}

func TestSlotsJSON(t *testing.T) {
	t.Parallel()
	seg := slotsSegment(t)
	self := proc.Self()
	r := shmctl(t, false, "slots", "--json", seg.Path())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)

	var doc slotsJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.Equal(t, seg.Path(), doc.Path)
	assert.Equal(t, docHeader{Schema: 1, Command: "slots"}, doc.docHeader)
	require.Len(t, doc.Slots, 4)
	for _, s := range doc.Slots {
		checkStarted(t, s.Process)
	}
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}
	want := []slotJSON{
		{Index: 0, Name: ptr("jobs"), Refs: 1, Mode: "pid/tid", Process: process(self, "alive"), TID: ptr("7"), Generation: ptr("42"), Recursion: 2, Waiters: 1},
		{Index: 1, Name: ptr(""), Refs: 1, Mode: "pid/tid", Process: process(dead, "dead"), TID: ptr("9"), Generation: ptr("0")},
		{Index: 2, Mode: "token", Token: ptr("5")},
		{Index: 3, Mode: "pid/tid", Process: process(self, "stale"), Generation: ptr("0")},
	}
	assert.Equal(t, want, doc.Slots)

	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	assert.ElementsMatch(t, []string{"schema", "command", "path", "slots"}, keys(raw))
	assert.ElementsMatch(t, []string{"index", "name", "refs", "mode", "process", "tid", "token", "generation",
		"recursion", "waiters", "inconsistent"}, keys(raw["slots"].([]any)[0].(map[string]any)))
}

func TestSlotsEmpty(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 2})
	r := shmctl(t, false, "--no-header", "slots", seg.Path())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stdout)

	r = shmctl(t, false, "--no-header", "slots", "--json", seg.Path())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, fmt.Sprintf("{\n  \"schema\": 1,\n  \"command\": \"slots\",\n  \"path\": %q,\n  \"slots\": []\n}\n", seg.Path()), r.stdout)
}
