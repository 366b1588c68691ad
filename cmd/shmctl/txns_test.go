package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

func TestTxnsFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want txnsOptions
	}{
		{[]string{"jobs"}, txnsOptions{Segment: "jobs"}},
		{[]string{"jobs", "--all", "--json"}, txnsOptions{Segment: "jobs", All: true, JSON: true}},
		{[]string{"-a", "/x/y"}, txnsOptions{Segment: "/x/y", All: true}},
	}
	for _, tt := range tests {
		ios, _, _ := testIOStreams(false)
		var got *txnsOptions
		cmd := newCmdTxns(ios, func(o *txnsOptions) error { got = o; return nil })
		cmd.SetArgs(tt.args)
		require.NoError(t, cmd.Execute(), "args %q", tt.args)
		tt.want.IO = ios
		assert.Equal(t, &tt.want, got, "args %q", tt.args)
	}
}

// txnsSegment makes a segment of 4 records and 64 KiB of arena with:
//
//	record 0  open, pins mode, 1 KiB arena, two objects, 2 pins held
//	record 1  open, barrier mode, 2 KiB arena, one promotion cell on it
//	record 2  closed (one object, destroyed)
//	record 3  free
func txnsSegment(t *testing.T) (*shm.Segment, *txn.Space) {
	t.Helper()
	seg := newSegment(t, layout.Options{Slots: 4, TxnRecords: 4, TxnArenaBytes: 64 << 10})
	sp, err := txn.Open(seg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sp.Close() })
	a, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
	require.NoError(t, err)
	r, err := a.Alloc([]byte("hello"))
	require.NoError(t, err)
	_, err = a.Alloc(make([]byte, 40))
	require.NoError(t, err)
	b, err := sp.Begin(txn.BeginOptions{ArenaBytes: 2048, Barrier: true})
	require.NoError(t, err)
	_, err = b.Link(r)
	require.NoError(t, err)
	c, err := sp.Begin(txn.BeginOptions{ArenaBytes: 64})
	require.NoError(t, err)
	_, err = c.Alloc([]byte("x"))
	require.NoError(t, err)
	require.NoError(t, c.RequestCloseAndWait(context.Background()))
	for range 2 {
		p, err := sp.TryPin(r)
		require.NoError(t, err)
		t.Cleanup(p.Release)
	}
	return seg, sp
}

func TestTxnsText(t *testing.T) {
	t.Parallel()
	seg, _ := txnsSegment(t)
	pid := proc.Self().PID
	open := fmt.Sprintf(""+
		"0\t1\topen\tpins\t%[1]d\talive\t1024\t96\t2\t0\t%[1]d:2\n"+
		"1\t1\topen\tbarrier\t%[1]d\talive\t2048\t64\t1\t1\t-\n", pid)
	r := shmctl(t, false, "txns", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stderr)
	assert.Equal(t, open, r.stdout)

	r = shmctl(t, false, "txns", "--all", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, open+
		fmt.Sprintf("2\t1\tclosed\tpins\t%d\talive\t0\t32\t1\t0\t-\n", pid)+
		"3\t0\tfree\tpins\t0\t-\t0\t0\t0\t0\t-\n", r.stdout)

	r = shmctl(t, true, "txns", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "INDEX  GEN  STATE  MODE     PID")
}

func TestTxnsJSON(t *testing.T) {
	t.Parallel()
	seg, _ := txnsSegment(t)
	self := proc.Self()
	r := shmctl(t, false, "txns", "--json", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)

	var doc txnsJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.Equal(t, seg.Path(), doc.Path)
	assert.Equal(t, 4, doc.Records)
	assert.Nil(t, doc.BarrierLeader)
	assert.Equal(t, doc.ArenaSize-3072, doc.FreeSize, "two arenas in use")
	require.Len(t, doc.Txns, 2)
	mine := []txnPinsJSON{{PID: self.PID, StartTicks: self.StartTicks, OwnerState: "alive", Pins: 2}}
	want0 := txnJSON{Index: 0, Generation: 1, State: "open", Mode: "pins", PID: self.PID, StartTicks: self.StartTicks,
		OwnerState: "alive", ArenaOffset: doc.Txns[0].ArenaOffset, ArenaSize: 1024, Used: 96, Objects: 2,
		Pins: 2, PinsByProcess: mine}
	assert.Equal(t, want0, doc.Txns[0])
	assert.Equal(t, "barrier", doc.Txns[1].Mode)
	assert.Equal(t, uint32(1), doc.Txns[1].Promotions)
	assert.Empty(t, doc.Txns[1].PinsByProcess)
	require.Len(t, doc.Processes, 1)
	assert.Equal(t, txnProcJSON{Row: doc.Processes[0].Row, PID: self.PID, StartTicks: self.StartTicks, OwnerState: "alive", Pins: 2}, doc.Processes[0])

	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	assert.ElementsMatch(t, []string{"path", "records", "arena_bytes", "free_bytes", "barrier_leader", "txns", "processes"}, keys(raw))
	x := raw["txns"].([]any)[0].(map[string]any)
	assert.ElementsMatch(t, []string{"index", "generation", "state", "mode", "pid", "start_ticks", "owner_state",
		"arena_offset", "arena_size", "used", "objects", "promotions", "promoted", "destroyed", "pins", "pins_by_process"}, keys(x))
	assert.ElementsMatch(t, []string{"pid", "start_ticks", "owner_state", "pins"}, keys(x["pins_by_process"].([]any)[0].(map[string]any)))
	assert.ElementsMatch(t, []string{"row", "pid", "start_ticks", "owner_state", "pins", "global_pins"},
		keys(raw["processes"].([]any)[0].(map[string]any)))
}

func TestTxnsEmpty(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 2, TxnRecords: 2})
	r := shmctl(t, false, "txns", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stdout)

	// A segment without transaction tables is a one-line error.
	seg = newSegment(t, layout.Options{Slots: 2, TxnRecords: -1})
	line := requireOneLineError(t, shmctl(t, false, "txns", seg.Path()), exitError)
	assert.Contains(t, line, "transaction")
}
