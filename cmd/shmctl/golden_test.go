package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/txn"
	"github.com/shmlock/shmlock/upgrade"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of testdata/json from the commands' output")

// goldenDir holds one file per command line of TestJSONGolden: the
// command's JSON document with the values no run can repeat (paths, pids,
// times, the boot) replaced by placeholders such as "<self>" and "<time>"
// (see normalizer).
const goldenDir = "testdata/json"

// Identifiers above 2^53, written into the golden segment so that a field
// that stopped being a string would show in the golden files and fail
// TestJSONGolden's check of every number.
const (
	bigGeneration = 1<<60 + 42
	bigTID        = 1<<61 + 7
	bigToken      = 1<<62 + 0x1234
	bigUpgradeGen = 1<<59 + 3
)

// Every command that prints a document, on segments built for it, with the
// output compared with testdata/json. Run with -update to rewrite them.
func TestJSONGolden(t *testing.T) {
	t.Parallel()
	seg, tids := goldenSegment(t)
	damaged := newSegment(t, layout.Options{Slots: 2, Upgrades: 1, TxnRecords: -1, LockMgrEntries: -1})
	_, err := damaged.Claim(layout.KindOwnerSlots, "jobs")
	require.NoError(t, err)
	dirEntry(t, damaged, layout.KindSlotDirectory, 1).State.Store(7)
	unlocks := unlockSegment(t)
	created := testproc.SegmentPath(t)

	n := newNormalizer(t)
	n.exact["path"] = map[string]string{
		strconv.Quote(seg.Path()): "<segment>", strconv.Quote(damaged.Path()): "<damaged>",
		strconv.Quote(unlocks.Path()): "<unlocks>", strconv.Quote(created): "<created>",
	}
	for v, name := range tids {
		n.exact["tid"][strconv.Quote(idString(v))] = name
	}

	tests := []struct {
		golden string
		args   []string
		code   int
	}{
		{"create", []string{"create", created, "--json", "--slots", "4", "--upgrades", "2", "--upgrade-readers", "2",
			"--txn-records", "2", "--txn-arena", "4KiB", "--lockmgr-entries", "4"}, exitOK},
		{"version", []string{"version", "--json"}, exitOK},
		{"info", []string{"info", "--json", seg.Path()}, exitOK},
		{"slots", []string{"slots", "--json", seg.Path()}, exitOK},
		{"slots-all", []string{"slots", "--all", "--json", seg.Path()}, exitOK},
		{"rwlocks", []string{"rwlocks", "--json", seg.Path()}, exitOK},
		{"rwlocks-all", []string{"rwlocks", "--all", "--json", seg.Path()}, exitOK},
		{"txns", []string{"txns", "--json", seg.Path()}, exitOK},
		{"txns-all", []string{"txns", "--all", "--json", seg.Path()}, exitOK},
		{"locks", []string{"locks", "--json", seg.Path()}, exitOK},
		{"locks-all", []string{"locks", "--all", "--json", seg.Path()}, exitOK},
		{"stats", []string{"stats", "--json", seg.Path()}, exitOK},
		{"data", []string{"data", "--json", seg.Path()}, exitOK},
		{"check", []string{"check", "--json", seg.Path()}, exitOK},
		{"check-damaged", []string{"check", "--json", damaged.Path()}, exitError},
		{"reclaim-dry-run", []string{"reclaim", "--dry-run", "--json", seg.Path()}, exitOK},
		{"reclaim", []string{"reclaim", "--json", seg.Path()}, exitOK}, // changes seg: the last on it
		{"unlock-slot", []string{"unlock", unlocks.Path(), "queue", "--force", "--json"}, exitOK},
		{"unlock-token", []string{"unlock", unlocks.Path(), "tokened", "--force", "--json"}, exitOK},
		{"unlock-upgrade", []string{"unlock", unlocks.Path(), "table", "--force", "--json"}, exitOK},
		{"unlock-resource", []string{"unlock", unlocks.Path(), "deploy", "--force", "--json"}, exitOK},
		{"unlock-free", []string{"unlock", unlocks.Path(), "queue", "--force", "--json"}, exitOK},
		{"bench", []string{"bench", "--workload", "uncontended", "--procs", "1", "--iters", "1000"}, exitOK},
		{"bench-unsupported", []string{"bench", "--workload", "rw90", "--procs", "1", "--iters", "1000", "--lock", "spin"}, bench3},
	}
	for _, tt := range tests {
		r := shmctl(t, false, tt.args...)
		require.Equal(t, tt.code, r.code, "%q: stderr: %s", tt.args, r.stderr)
		requireSafeNumbers(t, tt.golden, r.stdout)
		out := r.stdout
		if tt.args[0] == "bench" { // one line, as the contract wants: indent it to read
			var b bytes.Buffer
			require.NoError(t, json.Indent(&b, []byte(out), "", "  "))
			out = b.String()
		}
		compareGolden(t, tt.golden, n.normalize(t, out))
	}
}

// bench3 is bench's exit status for a workload its lock does not run.
const bench3 = 3

// compareGolden compares got with testdata/json/name.json, or writes it
// there with -update.
func compareGolden(tb testing.TB, name, got string) {
	tb.Helper()
	path := filepath.Join(goldenDir, name+".json")
	if *updateGolden {
		require.NoError(tb, os.MkdirAll(goldenDir, 0o755))
		require.NoError(tb, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(tb, err, "no golden file: run go test ./cmd/shmctl -run TestJSONGolden -update")
	require.Equal(tb, string(want), got, "%s differs (go test ./cmd/shmctl -run TestJSONGolden -update rewrites it)", path)
}

// requireSafeNumbers checks that every number of the JSON document doc
// (or documents, one after the other) is exact in jq and JavaScript:
// below 2^53 in magnitude. Larger values must be strings.
func requireSafeNumbers(tb testing.TB, name, doc string) {
	tb.Helper()
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(tb, err, "%s: not JSON: %s", name, doc)
		walkNumbers(v, "", func(path string, n json.Number) {
			f, err := n.Float64()
			require.NoError(tb, err, "%s: %s", name, path)
			require.Less(tb, abs(f), float64(1<<53), "%s: %s = %s: a number jq and JavaScript round; make it a string", name, path, n)
			if !strings.ContainsAny(n.String(), ".eE") {
				_, err := strconv.ParseInt(n.String(), 10, 64)
				require.NoError(tb, err, "%s: %s = %s", name, path, n)
			}
		})
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

func walkNumbers(v any, path string, f func(string, json.Number)) {
	switch v := v.(type) {
	case json.Number:
		f(path, v)
	case map[string]any:
		for k, x := range v {
			walkNumbers(x, path+"."+k, f)
		}
	case []any:
		for i, x := range v {
			walkNumbers(x, fmt.Sprintf("%s[%d]", path, i), f)
		}
	}
}

// normalizer replaces, in a document as writeJSON prints it (one key and
// scalar value a line), the values that differ from run to run by
// placeholders: exact ones (this process's pid, the segment's path) by
// their name, and times and measured seconds by a kind, after checking
// that the value is one (an RFC 3339 string, a number). Any other value
// is kept, so a field that changes shows as a difference.
type normalizer struct {
	exact  map[string]map[string]string // key -> value as printed -> placeholder
	times  map[string]bool              // keys whose RFC 3339 values become "<time>"
	nums   map[string]bool              // keys whose numbers but 0 become "<measured>"
	within map[string]string            // in any other string: text -> placeholder
}

func newNormalizer(tb testing.TB) *normalizer {
	self := proc.Self()
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	require.NoError(tb, err)
	ns, err := proc.PIDNamespace()
	require.NoError(tb, err)
	return &normalizer{
		exact: map[string]map[string]string{
			"pid":           {fmt.Sprint(self.PID): "<self>"},
			"start_ticks":   {fmt.Sprint(self.StartTicks): "<self>", fmt.Sprint(self.StartTicks + 1): "<self+1>"},
			"boot_id":       {strconv.Quote(strings.TrimSpace(string(boot))): "<boot>"},
			"pid_namespace": {strconv.Quote(idString(ns)): "<pid namespace>"},
			"tid":           {},
			// as the toolchain stamped the binary: "(devel)" in a test
			"shmctl_version": {strconv.Quote(moduleVersion()): "<module version>"},
		},
		within: map[string]string{" " + moduleVersion() + ";": " <module version>;"}, // bench's detail
		times:  map[string]bool{"created": true, "started": true, "acquired": true, "expires": true},
		nums: map[string]bool{"age_seconds": true, "left_seconds": true, "average_hold_seconds": true,
			"seconds": true, "ops_per_sec": true, "ns_per_op": true, "cpu_seconds": true},
	}
}

var scalarLine = regexp.MustCompile(`^(\s*"([a-z_]+)": )(.*?)(,?)$`)

func (n *normalizer) normalize(tb testing.TB, doc string) string {
	tb.Helper()
	var b strings.Builder
	for line := range strings.Lines(doc) {
		m := scalarLine.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
		if m == nil {
			b.WriteString(line)
			continue
		}
		prefix, key, value, comma := m[1], m[2], m[3], m[4]
		switch {
		case n.exact[key][value] != "":
			value = strconv.Quote(n.exact[key][value])
		case n.times[key] && value != "null":
			s, err := strconv.Unquote(value)
			require.NoError(tb, err, "%s is not a string: %s", key, line)
			_, err = time.Parse(time.RFC3339Nano, s)
			require.NoError(tb, err, "%s is not RFC 3339: %s", key, line)
			require.True(tb, strings.HasSuffix(s, "Z"), "%s is not in UTC: %s", key, line)
			value = `"<time>"`
		case n.nums[key] && value != "null" && value != "0": // 0: not measured
			_, err := strconv.ParseFloat(value, 64)
			require.NoError(tb, err, "%s is not a number: %s", key, line)
			value = `"<measured>"`
		case strings.HasPrefix(value, `"`):
			for from, to := range n.within {
				value = strings.ReplaceAll(value, from, to)
			}
		}
		b.WriteString(prefix + value + comma + "\n")
	}
	return b.String()
}

// goldenSegment builds a segment with something in every table, all of it
// deterministic but for what the normalizer replaces, and returns it with
// the random holder ids it holds, named for the golden files:
//
//	slots     0 "jobs" held by this process (a generation and a tid above
//	          2^53), 1 claimed unnamed and held by a dead process, 2
//	          "tokened" held in token mode (a token above 2^53), 3 "orphan",
//	          claimed by a dead process, 4 a token word unclaimed, 5 a holder
//	          of a previous boot
//	rwlocks   as rwlocksSegment, the dead writer's mutex with a generation
//	          above 2^53
//	txns      as txnsSegment
//	locks     "db" held by this process with this process as companion and
//	          a TTL of an hour, "doc" held collaboratively by two owners,
//	          "lease" expired, "free" released, "declared" declared; one
//	          conflict
func goldenSegment(t *testing.T) (*shm.Segment, map[uint64]string) {
	t.Helper()
	seg := newSegment(t, layout.Options{Slots: 6, Upgrades: 4, UpgradeReaders: 4, TxnRecords: 4,
		TxnArenaBytes: 64 << 10, LockMgrEntries: 8, DataBytes: 4 << 10, DataRegions: 4})
	for _, r := range []struct {
		name string
		size int
	}{{"queue", 100}, {"stats", 64}} {
		_, err := seg.Data(r.name, r.size)
		require.NoError(t, err)
	}
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}

	i, err := seg.Claim(layout.KindOwnerSlots, "jobs")
	require.NoError(t, err)
	require.Equal(t, 0, i)
	s, _ := seg.Slot(0)
	s.PID.Store(self.Pack())
	s.TID.Store(bigTID)
	s.Token.Store(bigGeneration)
	s.RecursionCount.Store(2)
	i, err = seg.Claim(layout.KindOwnerSlots, "")
	require.NoError(t, err)
	require.Equal(t, 1, i)
	s, _ = seg.Slot(1)
	s.PID.Store(dead.Pack())
	s.TID.Store(9)
	s.Token.Store(10)
	tl, err := spinlock.Named(seg, "tokened", spinlock.Token)
	require.NoError(t, err)
	require.Equal(t, 2, tl.Index())
	_, err = tl.Lock(spinlock.Identity{Token: bigToken})
	require.NoError(t, err)
	i, err = seg.Claim(layout.KindOwnerSlots, "orphan")
	require.NoError(t, err)
	require.Equal(t, 3, i)
	orphanRef(t, seg, dead)
	s, _ = seg.Slot(4)
	s.Token.Store(5)
	s, _ = seg.Slot(5)
	s.PID.Store(proc.MarkStale(self.Pack()))

	rwlocksOn(t, seg)
	e, err := seg.Upgrade(1)
	require.NoError(t, err)
	e.Generation.Store(bigUpgradeGen)
	st, err := upgrade.Inspect(seg, 0)
	require.NoError(t, err)
	tids := map[uint64]string{st.UpgraderTID: "<upgrade handle>"}

	txnsOn(t, seg)

	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = m.Acquire(ctx, "db", "agent-1", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, m.SetCompanion("db", "agent-1", os.Getpid()))
	for _, o := range []string{"a", "b"} {
		_, err = m.Acquire(ctx, "doc", o, lockmgr.Collaborative, lockmgr.AcquireOptions{})
		require.NoError(t, err)
	}
	_, err = m.Acquire(ctx, "free", "x", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.NoError(t, m.Release("free", "x"))
	_, err = m.Acquire(ctx, "db", "agent-2", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrResourceLocked)
	require.NoError(t, m.Declare("declared"))
	_, err = m.Acquire(ctx, "lease", "lapsed", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Millisecond})
	require.NoError(t, err)
	for ri, err := m.Inspect("lease"); ri.State != lockmgr.Expired; ri, err = m.Inspect("lease") {
		require.NoError(t, err)
		time.Sleep(time.Millisecond) // until its TTL has passed
	}
	return seg, tids
}

// orphanRef makes the claim reference of this process's last claim one
// of process id's, as if id had claimed it and died.
func orphanRef(t *testing.T, seg *shm.Segment, id proc.Identity) {
	t.Helper()
	refs, err := seg.Region(layout.KindClaimRefs)
	require.NoError(t, err)
	last := -1
	for j := range seg.Len(layout.KindClaimRefs) {
		rec, err := memview.At[layout.ClaimRef](refs, uint64(j)*layout.ClaimRefSize)
		require.NoError(t, err)
		if rec.Owner.Load() == proc.Self().Pack() {
			last = j
		}
	}
	require.GreaterOrEqual(t, last, 0, "no claim reference of this process")
	rec, err := memview.At[layout.ClaimRef](refs, uint64(last)*layout.ClaimRefSize)
	require.NoError(t, err)
	rec.Owner.Store(id.Pack())
}

// unlockSegment makes a segment whose locks this process holds: the slot
// "queue" (pid/tid mode, holder id above 2^53), the token-mode slot
// "tokened", the upgrade mutex "table" (its unique lock) and the resource
// "deploy".
func unlockSegment(t *testing.T) *shm.Segment {
	t.Helper()
	seg := newSegment(t, layout.Options{Slots: 4, Upgrades: 2, TxnRecords: -1, LockMgrEntries: 4})
	l, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	_, err = l.Lock(spinlock.Identity{PID: proc.Self().Pack(), TID: bigTID})
	require.NoError(t, err)
	tl, err := spinlock.Named(seg, "tokened", spinlock.Token)
	require.NoError(t, err)
	_, err = tl.Lock(spinlock.Identity{Token: bigToken})
	require.NoError(t, err)
	u, err := upgrade.Named(seg, "table")
	require.NoError(t, err)
	require.NoError(t, u.Lock())
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	_, err = m.Acquire(context.Background(), "deploy", "stuck", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	return seg
}

// txnsOn begins on seg what txnsSegment does: two open transactions (one
// in barrier mode), one closed, pins of this process.
func txnsOn(t *testing.T, seg *shm.Segment) {
	t.Helper()
	sp, err := txn.Open(seg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sp.Close() })
	a, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
	require.NoError(t, err)
	r, err := a.Alloc([]byte("hello"))
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
	p, err := sp.TryPin(r)
	require.NoError(t, err)
	t.Cleanup(p.Release)
}
