package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
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
		got, ios := parsedOptions(t, newCmdTxns, tt.args)
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
	r := shmctl(t, false, "--no-header", "txns", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stderr)
	assert.Equal(t, open, r.stdout)

	r = shmctl(t, false, "--no-header", "txns", "--all", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, open+
		fmt.Sprintf("2\t1\tclosed\tpins\t%d\talive\t0\t32\t1\t0\t-\n", pid)+
		"3\t0\tfree\tpins\t-\t-\t0\t0\t0\t0\t-\n", r.stdout)

	r = shmctl(t, true, "txns", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "INDEX  GENERATION  STATE  MODE     PID")
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
	assert.Equal(t, docHeader{Schema: 1, Command: "txns"}, doc.docHeader)
	assert.Equal(t, 4, doc.Records)
	assert.Nil(t, doc.BarrierLeader)
	assert.Equal(t, doc.DataBytes-3072, doc.FreeBytes, "two arenas in use")
	require.Len(t, doc.Txns, 2)
	for _, x := range doc.Txns {
		checkStarted(t, x.Process)
		for _, p := range x.PinsByProcess {
			checkStarted(t, p.Process)
		}
	}
	require.Len(t, doc.Processes, 1)
	checkStarted(t, doc.Processes[0].Process)
	require.NotNil(t, doc.Txns[0].ArenaOffset, "an open transaction's arena")
	mine := []txnPinsJSON{{Process: process(self, "alive"), Pins: 2}}
	want0 := txnJSON{Index: 0, Generation: "1", State: "open", Mode: "pins",
		Process:     process(self, "alive"),
		ArenaOffset: doc.Txns[0].ArenaOffset, ArenaBytes: 1024, UsedBytes: 96, Objects: 2,
		Pins: 2, PinsByProcess: mine}
	assert.Equal(t, want0, doc.Txns[0])
	assert.Equal(t, "barrier", doc.Txns[1].Mode)
	assert.Equal(t, uint32(1), doc.Txns[1].Promotions)
	assert.Empty(t, doc.Txns[1].PinsByProcess)
	assert.Equal(t, txnProcJSON{Row: doc.Processes[0].Row, Process: process(self, "alive"), Pins: 2}, doc.Processes[0])

	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	assert.ElementsMatch(t, []string{"schema", "command", "path", "records", "data_bytes", "free_bytes", "barrier_leader", "txns", "processes"}, keys(raw))
	x := raw["txns"].([]any)[0].(map[string]any)
	assert.ElementsMatch(t, []string{"index", "generation", "state", "mode", "process",
		"arena_offset", "arena_bytes", "used_bytes", "objects", "promotions", "promoted", "destroyed", "pins", "pins_by_process"}, keys(x))
	assert.ElementsMatch(t, []string{"process", "pins"}, keys(x["pins_by_process"].([]any)[0].(map[string]any)))
	assert.ElementsMatch(t, []string{"row", "process", "pins", "global_pins"},
		keys(raw["processes"].([]any)[0].(map[string]any)))

	// A record without an arena has no offset.
	r = shmctl(t, false, "txns", "--all", "--json", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	doc = txnsJSON{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.Len(t, doc.Txns, 4)
	assert.Equal(t, "free", doc.Txns[3].State)
	assert.Nil(t, doc.Txns[3].ArenaOffset)
	assert.Nil(t, doc.Txns[3].Process)
}

func TestTxnsEmpty(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 2, TxnRecords: 2})
	r := shmctl(t, false, "--no-header", "txns", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stdout)

	// A segment without transaction tables is a one-line error.
	seg = newSegment(t, layout.Options{Slots: 2, TxnRecords: -1})
	line := requireOneLineError(t, shmctl(t, false, "--no-header", "txns", seg.Path()), exitError)
	assert.Contains(t, line, "transaction")
}

func txnOwnerHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	sp, err := txn.Open(seg)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024, Barrier: args[1] == "barrier"})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ref, err := tx.Alloc([]byte("orphan"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ref", ref)
	select {}
}

// deadOwnerTxn runs txn-owner on seg, kills it once it printed its ref,
// and returns the ref and the dead process's pid.
func deadOwnerTxn(t *testing.T, seg *shm.Segment, mode string) (txn.Ref, int) {
	t.Helper()
	cmd := testproc.Command("txn-owner", seg.Path(), mode)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ref ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("txn-owner: %q, %v", line, err)
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	ref, err := txn.ParseRef(strings.TrimSpace(strings.TrimPrefix(line, "ref ")))
	require.NoError(t, err)
	return ref, cmd.Process.Pid
}

// TestReclaimTxns: transactions whose owner was killed are listed by
// txns, left alone by --dry-run, wait for a live reader's pin (timing out
// with --wait), and are closed by reclaim.
func TestReclaimTxns(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 8, TxnRecords: 4, TxnArenaBytes: 16 << 10})
	pr, pid1 := deadOwnerTxn(t, seg, "pins")
	br, pid2 := deadOwnerTxn(t, seg, "barrier")

	r := shmctl(t, false, "--no-header", "txns", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, fmt.Sprintf("%d\t1\topen\tpins\t%d\tdead\t1024\t32\t1\t0\t-\n", pr.Txn, pid1))
	assert.Contains(t, r.stdout, fmt.Sprintf("%d\t1\topen\tbarrier\t%d\tdead\t1024\t32\t1\t0\t-\n", br.Txn, pid2))

	r = shmctl(t, false, "--no-header", "reclaim", "--dry-run", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, fmt.Sprintf("txn\t%d\t1\tpins\t%d\tdead\twould reclaim\n", pr.Txn, pid1)+
		fmt.Sprintf("txn\t%d\t1\tbarrier\t%d\tdead\twould reclaim\n", br.Txn, pid2), r.stdout)

	// A live reader (this process) pins the first: its close waits, and
	// gives up after --wait, leaving it open.
	sp, err := txn.Open(seg)
	require.NoError(t, err)
	defer sp.Close()
	b, err := sp.Borrow(context.Background(), pr)
	require.NoError(t, err)
	// shmctl runs as a process of its own here, as it would: when it
	// gives up, the record it took over names a process that exited.
	out, err := testproc.Command("shmctl", "reclaim", "--json", "--wait", "150ms", seg.Path()).Output()
	require.NoError(t, err)
	var doc reclaimJSON
	require.NoError(t, json.Unmarshal(out, &doc))
	require.Len(t, doc.Txns, 2)
	for _, x := range doc.Txns {
		require.NotNil(t, x.Process)
		checkStarted(t, x.Process)
	}
	assert.Equal(t, reclaimTxnJSON{Index: int(pr.Txn), Generation: "1", Mode: "pins",
		Process: process(proc.Identity{PID: uint32(pid1), StartTicks: doc.Txns[0].Process.StartTicks}, "dead"),
		Action:  "timed out"}, doc.Txns[0])
	assert.Equal(t, reclaimTxnJSON{Index: int(br.Txn), Generation: "1", Mode: "barrier",
		Process: process(proc.Identity{PID: uint32(pid2), StartTicks: doc.Txns[1].Process.StartTicks}, "dead"),
		Action:  "reclaimed"}, doc.Txns[1])
	assert.Equal(t, "orphan", string(b.Bytes()), "the pinned object is intact")
	_, err = sp.TryPin(br)
	require.ErrorIs(t, err, txn.ErrClosed)

	// Once the reader is done, the next reclaim closes it.
	b.Release()
	r = shmctl(t, false, "--no-header", "reclaim", "--json", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	doc = reclaimJSON{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.Len(t, doc.Txns, 1)
	assert.Equal(t, int(pr.Txn), doc.Txns[0].Index)
	assert.Equal(t, "reclaimed", doc.Txns[0].Action)
	_, err = sp.TryPin(pr)
	require.ErrorIs(t, err, txn.ErrClosed)
	r = shmctl(t, false, "--no-header", "txns", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stdout, "no transaction left open")
}
