package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

func TestRWLocksFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want rwlocksOptions
	}{
		{[]string{"jobs"}, rwlocksOptions{Segment: "jobs"}},
		{[]string{"jobs", "--all", "--json"}, rwlocksOptions{Segment: "jobs", All: true, JSON: true}},
		{[]string{"-a", "/x/y"}, rwlocksOptions{Segment: "/x/y", All: true}},
	}
	for _, tt := range tests {
		got, ios := parsedOptions(t, newCmdRWLocks, tt.args)
		tt.want.IO = ios
		assert.Equal(t, &tt.want, got, "args %q", tt.args)
	}
	line := requireOneLineError(t, shmctl(t, false, "rwlocks"), exitUsage)
	assert.Contains(t, line, "rwlocks takes one segment, got 0 arguments")
}

// The state bits of package upgrade (upgrade/state.go), to fake the words
// a dead holder leaves.
const (
	testStateWrite   = 1 << 31
	testStateUpgrade = 1 << 30
)

// rwlocksSegment makes a segment of 4 upgrade mutexes with 4 reader
// records each, 3 of them in use:
//
//	0 "jobs"  the upgrade lock held by a handle of this process, and two
//	          shared holds by another handle (record 0)
//	1 ""      not claimed; a dead writer (tid 9) set the write bit and waits
//	          for a dead reader (record 0, one hold) to leave
//	2 ""      free
//	3 ""      not claimed; an upgrade holder recorded under a previous boot
//	          (tid 5) held the unique lock
//
// It returns the upgrade holder's handle too, which the test must leave as
// it is.
func rwlocksSegment(t *testing.T) (*shm.Segment, *upgrade.Mutex) {
	t.Helper()
	seg := newSegment(t, layout.Options{Upgrades: 4, UpgradeReaders: 4})
	return seg, rwlocksOn(t, seg)
}

// rwlocksOn sets up the first 4 upgrade mutexes of seg as rwlocksSegment
// says, and returns the upgrade holder's handle.
func rwlocksOn(t *testing.T, seg *shm.Segment) *upgrade.Mutex {
	t.Helper()
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack()

	u, err := upgrade.Named(seg, "jobs")
	require.NoError(t, err)
	require.Equal(t, 0, u.Index())
	r, err := upgrade.Open(seg, 0)
	require.NoError(t, err)
	require.NoError(t, u.LockUpgrade())
	require.NoError(t, r.LockShared())
	require.NoError(t, r.LockShared())
	t.Cleanup(func() {
		assert.NoError(t, r.UnlockShared())
		assert.NoError(t, r.UnlockShared())
		assert.NoError(t, u.UnlockUpgrade())
		assert.NoError(t, r.Close())
		assert.NoError(t, u.Close())
	})

	e, err := seg.Upgrade(1)
	require.NoError(t, err)
	e.Writer.Store(dead)
	e.WriterTID.Store(9)
	e.State.Store(testStateWrite)
	rec, err := seg.UpgradeReader(1, 0)
	require.NoError(t, err)
	rec.Owner.Store(dead)
	rec.Count.Store(1)
	rec.Pad.Store(1) // record 0 in the drain mask, as a claim marks it

	e, err = seg.Upgrade(3)
	require.NoError(t, err)
	e.Upgrader.Store(proc.MarkStale(self.Pack()))
	e.UpgraderTID.Store(5)
	e.State.Store(testStateUpgrade | testStateWrite)
	return u
}

func TestRWLocksText(t *testing.T) {
	t.Parallel()
	seg, _ := rwlocksSegment(t)
	pid := proc.Self().PID
	inUse := fmt.Sprintf(""+
		"0\tjobs\t1\tupgrade+shared\t%[1]d:2\t-\t%[1]d\tno\t0\t0\t0\t0\n"+
		"1\t\t0\tshared\t%[1]d (dead):1\t%[1]d (dead) (waiting)\t-\tno\t0\t0\t0\t2\n"+
		"3\t\t0\tupgraded\t-\t-\t%[1]d (stale)\tno\t0\t0\t0\t1\n", pid)

	r := shmctl(t, false, "--no-header", "rwlocks", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stderr)
	assert.Equal(t, inUse, r.stdout)

	r = shmctl(t, false, "--no-header", "rwlocks", "--all", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, fmt.Sprintf(""+
		"0\tjobs\t1\tupgrade+shared\t%[1]d:2\t-\t%[1]d\tno\t0\t0\t0\t0\n"+
		"1\t\t0\tshared\t%[1]d (dead):1\t%[1]d (dead) (waiting)\t-\tno\t0\t0\t0\t2\n"+
		"2\t\t0\tfree\t-\t-\t-\tno\t0\t0\t0\t0\n"+
		"3\t\t0\tupgraded\t-\t-\t%[1]d (stale)\tno\t0\t0\t0\t1\n", pid), r.stdout)

	r = shmctl(t, true, "rwlocks", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "INDEX  NAME  REFS  HELD            READERS")
	assert.Contains(t, r.stdout, "\n0      jobs  1     upgrade+shared  ")
}

func TestRWLocksJSON(t *testing.T) {
	t.Parallel()
	seg, u := rwlocksSegment(t)
	self := proc.Self()
	res := shmctl(t, false, "rwlocks", "--json", seg.Path())
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)

	var doc rwlocksJSON
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	assert.Equal(t, seg.Path(), doc.Path)
	assert.Equal(t, docHeader{Schema: 1, Command: "rwlocks"}, doc.docHeader)
	require.Len(t, doc.RWLocks, 3)
	for _, l := range doc.RWLocks {
		for _, h := range []*holderJSON{l.Writer, l.Upgrader} {
			if h != nil {
				checkStarted(t, h.Process)
			}
		}
		for _, r := range l.Readers {
			checkStarted(t, r.Process)
		}
	}
	gen0 := fmt.Sprint(u.Generation())
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}
	require.NotNil(t, doc.RWLocks[0].Upgrader)

	want := []rwlockJSON{
		{
			Index: 0, Name: ptr("jobs"), Refs: 1, Held: "upgrade+shared", StateWord: testStateUpgrade, UpgradeBit: true,
			Upgrader:      &holderJSON{Process: process(self, "alive"), TID: doc.RWLocks[0].Upgrader.TID},
			SharedHolds:   2,
			Readers:       []readerJSON{{Record: 0, Process: process(self, "alive"), Count: 2}},
			ReaderRecords: 4, Generation: gen0,
		},
		{
			Index: 1, Held: "shared", StateWord: testStateWrite, WriteBit: true,
			Writer:        &holderJSON{Process: process(dead, "dead"), TID: ptr("9")},
			WriterWaiting: true, SharedHolds: 1,
			Readers:       []readerJSON{{Record: 0, Process: process(dead, "dead"), Count: 1}},
			ReaderRecords: 4, Generation: "0", Dead: 2,
		},
		{
			Index: 3, Held: "upgraded", StateWord: testStateUpgrade | testStateWrite, WriteBit: true, UpgradeBit: true,
			Upgrader: &holderJSON{Process: process(self, "stale"), TID: ptr("5")},
			Readers:  []readerJSON{}, ReaderRecords: 4, Generation: "0", Dead: 1,
		},
	}
	assert.Equal(t, want, doc.RWLocks)
	assert.NotNil(t, doc.RWLocks[0].Upgrader.TID, "the handle's id")

	// The field names are an interface (docs/JSON.md); this pins them.
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &raw))
	assert.ElementsMatch(t, []string{"schema", "command", "path", "rwlocks"}, keys(raw))
	l := raw["rwlocks"].([]any)[1].(map[string]any)
	assert.ElementsMatch(t, []string{"index", "name", "refs", "held", "state_word", "write_bit", "upgrade_bit", "pending",
		"writer", "writer_waiting", "handoff", "upgrader", "shared_holds", "readers", "reader_records", "shared_waiters",
		"unique_waiters", "writer_waiters", "generation", "inconsistent", "dead"}, keys(l))
	assert.ElementsMatch(t, []string{"process", "tid"}, keys(l["writer"].(map[string]any)))
	assert.ElementsMatch(t, []string{"pid", "start_ticks", "started", "liveness"}, keys(l["writer"].(map[string]any)["process"].(map[string]any)))
	assert.Nil(t, l["upgrader"])
	assert.ElementsMatch(t, []string{"record", "process", "count"},
		keys(l["readers"].([]any)[0].(map[string]any)))
}

// A pending upgrade and sleepers show, with a real waiter.
func TestRWLocksPending(t *testing.T) {
	t.Parallel()
	seg, u, r := twoHandles(t)
	require.NoError(t, r.LockShared())
	require.NoError(t, u.LockUpgrade())
	done := make(chan error)
	go func() { done <- u.UpgradeToUnique() }()
	doc := waitRWLocks(t, seg.Path(), func(l rwlockJSON) bool { return l.UniqueWaiters == 1 }) // asleep on the unique gate
	assert.True(t, doc.RWLocks[0].Pending)
	assert.Equal(t, "upgrade+shared", doc.RWLocks[0].Held)
	require.NoError(t, r.UnlockShared())
	require.NoError(t, <-done)
	require.NoError(t, u.UniqueToUpgrade())
	require.NoError(t, u.UnlockUpgrade())
	require.NoError(t, u.Close())
	require.NoError(t, r.Close())
}

func TestRWLocksBroken(t *testing.T) {
	t.Parallel()
	notSeg := writeFile(t, []byte("not a segment\n"))
	for _, args := range [][]string{{"rwlocks"}, {"rwlocks", "--json"}} {
		line := requireOneLineError(t, shmctl(t, false, append(args, notSeg)...), exitError)
		assert.Contains(t, line, notSeg)
	}
	// None in use lists nothing (a segment with no upgrade table is
	// TestMissingTable's).
	seg := newSegment(t, layout.Options{Upgrades: 2})
	res := shmctl(t, false, "rwlocks", "--json", seg.Path())
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)
	var doc rwlocksJSON
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	assert.Empty(t, doc.RWLocks)
	assert.NotNil(t, doc.RWLocks, "an empty array, not null")
}

// A writer queued behind another shows among the writers' sleepers.
func TestRWLocksWriterWaiting(t *testing.T) {
	t.Parallel()
	seg, w1, w2 := twoHandles(t)
	require.NoError(t, w1.Lock())
	done := make(chan error)
	go func() { done <- w2.Lock() }()
	doc := waitRWLocks(t, seg.Path(), func(l rwlockJSON) bool { return l.WriterWaiters == 1 })
	assert.Equal(t, "unique", doc.RWLocks[0].Held)
	assert.False(t, doc.RWLocks[0].WriterWaiting, "the holder's own Writer word")
	r := shmctl(t, false, "rwlocks", seg.Path())
	assert.Contains(t, r.stdout, "\tno\t0\t0\t1\t0\n")
	require.NoError(t, w1.Unlock())
	require.NoError(t, <-done)
	require.NoError(t, w2.Unlock())
	require.NoError(t, w1.Close())
	require.NoError(t, w2.Close())
}

// twoHandles makes a segment of one upgrade mutex and opens two handles
// on it, which the test closes.
func twoHandles(t *testing.T) (*shm.Segment, *upgrade.Mutex, *upgrade.Mutex) {
	t.Helper()
	seg := newSegment(t, layout.Options{Upgrades: 1, UpgradeReaders: 4})
	a, err := upgrade.Open(seg, 0)
	require.NoError(t, err)
	b, err := upgrade.Open(seg, 0)
	require.NoError(t, err)
	return seg, a, b
}

// waitRWLocks runs 'shmctl rwlocks --json' on path until done holds for
// the first mutex listed, and returns that document.
func waitRWLocks(tb testing.TB, path string, done func(rwlockJSON) bool) rwlocksJSON {
	tb.Helper()
	for {
		var doc rwlocksJSON
		res := shmctl(tb, false, "rwlocks", "--json", path)
		require.Equal(tb, exitOK, res.code, "stderr: %s", res.stderr)
		require.NoError(tb, json.Unmarshal([]byte(res.stdout), &doc))
		require.NotEmpty(tb, doc.RWLocks)
		if done(doc.RWLocks[0]) {
			return doc
		}
		time.Sleep(time.Millisecond)
	}
}

// A unique lock taken uncontended is held in its one-CAS form (the Writer
// word's bit 61, the state word 0): rwlocks shows it held, its writer not
// waiting, and says so of the raw words it prints.
func TestRWLocksOneCASUniqueHold(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Upgrades: 2})
	m, err := upgrade.Open(seg, 1)
	require.NoError(t, err)
	require.NoError(t, m.Lock())
	defer func() { require.NoError(t, m.Unlock()) }()

	res := shmctl(t, false, "rwlocks", "--json", seg.Path())
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)
	var doc rwlocksJSON
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Len(t, doc.RWLocks, 1)
	l := doc.RWLocks[0]
	assert.Equal(t, 1, l.Index)
	assert.Equal(t, heldUnique, l.Held)
	assert.True(t, l.WriteBit, "write_bit: the unique lock is held")
	assert.Zero(t, l.StateWord, "the one-CAS form leaves the state word alone")
	require.NotNil(t, l.Writer)
	assert.False(t, l.WriterWaiting)
}
