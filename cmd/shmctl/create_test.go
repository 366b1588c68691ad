package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

func TestCreateFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want createOptions
	}{
		{[]string{"jobs"}, createOptions{Segment: "jobs"}},
		{[]string{"jobs", "--slots", "10", "--group"}, createOptions{Segment: "jobs", Sizes: layout.Options{Slots: 10}, Group: true}},
		{
			[]string{"/tmp/x", "--upgrades=-1", "--txn-records", "3", "--txn-arena", "4096", "--lockmgr-entries", "7", "--json"},
			createOptions{Segment: "/tmp/x", Sizes: layout.Options{Upgrades: -1, TxnRecords: 3, TxnArenaBytes: 4096, LockMgrEntries: 7}, JSON: true},
		},
		{
			[]string{"jobs", "--upgrades", "2", "--upgrade-readers", "100"},
			createOptions{Segment: "jobs", Sizes: layout.Options{Upgrades: 2, UpgradeReaders: 100}},
		},
		{
			[]string{"jobs", "--data", "1MiB", "--data-regions", "8"},
			createOptions{Segment: "jobs", Sizes: layout.Options{DataBytes: 1 << 20, DataRegions: 8}},
		},
		{
			[]string{"jobs", "--data=-1"},
			createOptions{Segment: "jobs", Sizes: layout.Options{DataBytes: -1}},
		},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			got, ios := parsedOptions(t, newCmdCreate, tt.args)
			tt.want.IO = ios
			assert.Equal(t, &tt.want, got, "args %q", tt.args)
		})
	}
}

// The sizes of TestCreateThenInfo and where they put each table: tables
// follow the 1024-byte header, each on a 64-byte line, and the file is
// rounded up to whole 4096-byte pages.
var (
	customSizes = []string{"--slots", "10", "--upgrades", "3", "--upgrade-readers", "5", "--txn-records", "2", "--txn-arena", "1000", "--lockmgr-entries", "5",
		"--data", "1000", "--data-regions", "3"}
	customRows = "" +
		"owner_slots\t32\t10\t10\t1024\t320\t0\n" +
		"slot_directory\t64\t10\t10\t1344\t640\t-\n" +
		"upgrades\t64\t3\t3\t1984\t192\t0\n" +
		"upgrade_directory\t64\t3\t3\t2176\t192\t-\n" +
		"txn_records\t128\t2\t2\t2368\t256\t-\n" +
		"txn_arena\t64\t16\t16\t2624\t1024\t-\n" + // 1000 bytes round up to 16 units
		"lockmgr\t256\t5\t4\t3648\t1280\t-\n" + // the first entry is the table's header
		"upgrade_readers\t16\t15\t15\t4928\t240\t-\n" + // 5 records for each of the 3 mutexes
		"claim_refs\t16\t26\t26\t5184\t416\t-\n" + // twice the slots and mutexes
		"region_directory\t64\t3\t3\t5632\t192\t0\n" +
		"data\t64\t16\t16\t5824\t1024\t0\n" + // 1000 bytes round up to 16 units
		"lock_stats\t64\t20\t20\t6848\t1280\t-\n" // one per slot, mutex, lock-manager entry and txn record
	customTotal = 8192
)

func TestCreateThenInfo(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	created := shmctl(t, false, append([]string{"--no-header", "create", path}, customSizes...)...)
	require.Equal(t, 0, created.code, "stderr: %s", created.stderr)
	require.Empty(t, created.stderr)

	h := readHeader(t, path)
	self := proc.Self()
	started, err := self.StartTime()
	require.NoError(t, err)
	want := fmt.Sprintf(""+
		"path\t%s\n"+
		"format_version\t5\n"+
		"total_bytes\t%d\n"+
		"created\t%s\n"+
		"creator.pid\t%d\n"+
		"creator.started\t%s\n"+
		"creator.liveness\talive\n"+
		"boot_id\t%s\n"+
		"current_boot\ttrue\n"+
		"pid_namespace\t%d\n"+
		"same_pid_namespace\ttrue\n"+
		"group_access\tfalse\n",
		path, customTotal, h.Created.UTC().Format(time.RFC3339Nano), os.Getpid(),
		started.UTC().Format(time.RFC3339Nano), bootIDText(t), h.PIDNamespace) + customRows
	assert.Equal(t, want, created.stdout, "create output")

	info := shmctl(t, false, "--no-header", "info", path)
	require.Equal(t, 0, info.code, "stderr: %s", info.stderr)
	assert.Empty(t, info.stderr)
	assert.Equal(t, want, info.stdout, "info output")
}

func TestInfoTerminal(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 10, Upgrades: 3, TxnRecords: 2, TxnArenaBytes: 1000, LockMgrEntries: 5})
	_, err := seg.Claim(layout.KindUpgrades, "u")
	require.NoError(t, err)
	_, err = seg.Data("queue", 100) // two of the area's 64-byte units
	require.NoError(t, err)

	r := shmctl(t, true, "info", seg.Path())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	created := seg.Header().Created.UTC().Format("2006-01-02 15:04:05 UTC")
	assert.Contains(t, r.stdout, "\ncreated             "+created+"\n")
	assert.Contains(t, r.stdout, "\ncreator.liveness    alive\n")
	assert.Contains(t, r.stdout, "\n\n"+
		"KIND               ENTRY_BYTES  ENTRIES  CAPACITY  OFFSET  BYTES  CLAIMED\n"+
		"owner_slots        32           10       10        1024    320    0\n"+
		"slot_directory     64           10       10        1344    640    -\n"+
		"upgrades           64           3        3         1984    192    1\n")
	assert.Contains(t, r.stdout, "\n"+
		"region_directory   64           32       32        6912    2048   1\n"+
		"data               64           1024     1024      8960    65536  2\n")
}

func TestCreateJSON(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	r := shmctl(t, false, append([]string{"create", path, "--group", "--json"}, customSizes...)...)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o660), fi.Mode().Perm(), "--group file mode")

	// A group segment is opened with --group, by its creator too.
	refused := shmctl(t, false, "info", path)
	assert.Contains(t, requireOneLineError(t, refused, 1), "its group may use it")
	info := shmctl(t, false, "--group", "info", "--json", path).stdout
	cmdOf := map[string]string{r.stdout: "create", info: "info"}
	for _, out := range []string{r.stdout, info} {
		require.True(t, strings.HasSuffix(out, "}\n"), "JSON output %q does not end in one newline", out)
		var doc infoJSON
		require.NoError(t, json.Unmarshal([]byte(out), &doc))
		assert.Equal(t, path, doc.Path)
		assert.Equal(t, docHeader{Schema: 1, Command: cmdOf[out]}, doc.docHeader)
		assert.EqualValues(t, layout.Version, doc.FormatVersion)
		assert.EqualValues(t, customTotal, doc.TotalBytes)
		require.NotNil(t, doc.Creator)
		assert.EqualValues(t, os.Getpid(), doc.Creator.PID)
		assert.Equal(t, proc.Self().StartTicks, doc.Creator.StartTicks)
		assert.Equal(t, "alive", doc.Creator.Liveness)
		assert.NotNil(t, doc.Creator.Started)
		assert.Equal(t, bootIDText(t), doc.BootID)
		assert.True(t, doc.CurrentBoot)
		assert.True(t, doc.SamePIDNamespace)
		assert.True(t, doc.GroupAccess)
		assert.WithinDuration(t, time.Now(), doc.Created, time.Minute)
		require.Len(t, doc.Tables, layout.NumTables)
		var rows strings.Builder
		for _, tb := range doc.Tables {
			claimed := "-"
			if tb.Claimed != nil {
				claimed = fmt.Sprint(*tb.Claimed)
			}
			fmt.Fprintf(&rows, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", tb.Kind, tb.EntryBytes, tb.Entries, tb.Capacity, tb.Offset, tb.Bytes, claimed)
		}
		assert.Equal(t, customRows, rows.String())
	}
}

// The field names of the documents are an interface; this pins them.
func TestInfoJSONFieldNames(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	r := shmctl(t, false, "info", "--json", seg.Path())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.ElementsMatch(t, []string{"schema", "command", "path", "format_version", "total_bytes", "created", "creator", "boot_id",
		"current_boot", "pid_namespace", "same_pid_namespace", "group_access", "tables"}, keys(doc))
	assert.ElementsMatch(t, []string{"pid", "start_ticks", "started", "liveness"}, keys(doc["creator"].(map[string]any)))
	table := doc["tables"].([]any)[0].(map[string]any)
	assert.ElementsMatch(t, []string{"kind", "entry_bytes", "entries", "capacity", "offset", "bytes", "claimed"}, keys(table))
	_, err := time.Parse(time.RFC3339Nano, doc["created"].(string))
	assert.NoError(t, err, "created is RFC 3339")
}

func TestCreateExisting(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	line := requireOneLineError(t, shmctl(t, false, "create", seg.Path()), exitError)
	assert.Contains(t, line, "already exists")
}

// A create whose output cannot be written (stdout on a full disk) has
// made the segment all the same: its error says so, so that a script that
// sees the failure does not take the segment for not made, and then fail
// again with "already exists". It said only the write's error.
func TestCreateSaysItMadeTheSegmentWhenItsOutputFails(t *testing.T) {
	t.Parallel()
	for _, asJSON := range []bool{false, true} {
		path := testproc.SegmentPath(t)
		var stderr bytes.Buffer
		ios := newIOStreams(fullWriter{}, &stderr)
		args := []string{"create", path}
		if asJSON {
			args = append(args, "--json")
		}
		code := execute(newCmdRoot(ios), args, ios)
		line := requireOneLineError(t, result{code: code, stderr: stderr.String()}, exitError)
		assert.Contains(t, line, "created "+path+", but", "json %v", asJSON)
		assert.Contains(t, line, syscall.ENOSPC.Error(), "json %v", asJSON)
		_, err := os.Stat(path)
		assert.NoError(t, err, "json %v: the segment is there", asJSON)
	}
}

// fullWriter fails every write, as a file on a full disk.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

func TestCreateBareName(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	name := strings.TrimPrefix(path, shm.DefaultDir+"/")
	r := shmctl(t, false, "create", name, "--json")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	var doc infoJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.Equal(t, path, doc.Path, "resolved path")
	_, err := os.Stat(path)
	assert.NoError(t, err)
}

// A size over its limit is bad usage (status 2), as a size that does not
// parse is, and creates nothing: it was status 1, the status of a create
// that failed on a sound command line.
func TestCreateBadSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flag, value, want string
	}{
		{"--slots", fmt.Sprint(layout.MaxSlots + 1), "owner_slots"},
		{"--lockmgr-entries", "99999999999", "lockmgr"},
		{"--upgrade-readers", "99999999999", "upgrade_readers"},
		{"--data", fmt.Sprint(layout.MaxDataBytes + 1), "data"},
		{"--txn-arena", fmt.Sprint(layout.MaxTxnArenaBytes + 1), "txn_arena"},
	} {
		path := testproc.SegmentPath(t)
		line := requireOneLineError(t, shmctl(t, false, "create", path, tc.flag, tc.value), exitUsage)
		assert.Contains(t, line, tc.want, tc.flag)
		_, err := os.Stat(path)
		assert.ErrorIs(t, err, os.ErrNotExist, tc.flag)
	}
}

// readHeader reads a segment's header as shm validates it.
func readHeader(tb testing.TB, path string) layout.Header {
	tb.Helper()
	seg, err := shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(tb, err)
	defer seg.Close()
	return seg.Header()
}

// bootIDText is the kernel's boot id as it prints it.
func bootIDText(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	require.NoError(tb, err)
	return strings.TrimSpace(string(b))
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
