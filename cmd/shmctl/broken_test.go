package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
)

// Read commands on files that are not whole segments fail with one line
// and exit status 1, print nothing on stdout, and do not panic.
func TestReadBrokenSegment(t *testing.T) {
	t.Parallel()
	files := map[string]func(t *testing.T) string{
		"missing": func(t *testing.T) string { return testproc.SegmentPath(t) },
		"truncated": func(t *testing.T) string {
			seg := newSegment(t, layout.Options{})
			whole, err := os.ReadFile(seg.Path())
			require.NoError(t, err)
			return writeFile(t, whole[:100])
		},
		"garbage": func(t *testing.T) string {
			return writeFile(t, bytes.Repeat([]byte("garbage!"), layout.PageSize/8))
		},
		"empty":     func(t *testing.T) string { return writeFile(t, nil) },
		"directory": func(t *testing.T) string { return t.TempDir() },
		"symlink": func(t *testing.T) string {
			link := testproc.SegmentPath(t)
			require.NoError(t, os.Symlink(newSegment(t, layout.Options{}).Path(), link))
			return link
		},
		"foreign pid namespace": foreignSegment,
	}
	commands := [][]string{
		{"slots"}, {"slots", "--all", "--json"}, {"rwlocks"}, {"rwlocks", "--all", "--json"},
		{"txns"}, {"txns", "--all", "--json"}, {"locks"}, {"locks", "--json"}, {"stats"}, {"stats", "--json"},
		{"reclaim"}, {"reclaim", "--dry-run", "--json"},
	}
	for name, file := range files {
		cmds := commands
		if name != "foreign pid namespace" { // info reports on one: TestInfoForeignSegment
			cmds = append(cmds, []string{"info"}, []string{"info", "--json"})
		}
		for _, args := range cmds {
			t.Run(name+"/"+args[0]+"/"+args[len(args)-1], func(t *testing.T) {
				t.Parallel()
				path := file(t)
				for _, tty := range []bool{false, true} {
					line := requireOneLineError(t, shmctl(t, tty, append(args, path)...), exitError)
					assert.Contains(t, line, path)
				}
			})
		}
		t.Run(name+"/lock", func(t *testing.T) {
			t.Parallel()
			path := file(t)
			line := requireOneLineError(t, shmctl(t, false, "lock", path, "job", "--", "true"), exitError)
			assert.Contains(t, line, path)
		})
	}
}

// writeFile writes b to a fresh test segment path.
func writeFile(tb testing.TB, b []byte) string {
	tb.Helper()
	path := testproc.SegmentPath(tb)
	require.NoError(tb, os.WriteFile(path, b, 0o600))
	return path
}

// foreignSegment writes a valid segment made, its header says, in another
// PID namespace.
func foreignSegment(t *testing.T) string {
	whole, err := os.ReadFile(newSegment(t, layout.Options{}).Path())
	require.NoError(t, err)
	binary.LittleEndian.PutUint64(whole[layout.OffPIDNS:], 1)
	binary.LittleEndian.PutUint32(whole[layout.OffChecksum:], layout.Checksum(whole))
	return writeFile(t, whole)
}

// info is the one read command that opens a segment of another PID
// namespace: saying so is part of its report.
func TestInfoForeignSegment(t *testing.T) {
	t.Parallel()
	r := shmctl(t, false, "info", "--json", foreignSegment(t))
	require.Zero(t, r.code, "stderr: %s", r.stderr)
	var doc infoJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.False(t, doc.SamePIDNamespace)
	assert.EqualValues(t, 1, doc.PIDNamespace)
}

// Commands that need a table the segment was made without say so in one
// line (rwlocks and reclaim have nothing to list or free there instead).
func TestMissingTable(t *testing.T) {
	t.Parallel()
	noLockMgr := newSegment(t, layout.Options{Slots: 1, LockMgrEntries: -1}).Path()
	noTxn := newSegment(t, layout.Options{Slots: 2, TxnRecords: -1}).Path()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"locks", noLockMgr}, "NO_LOCK_TABLE"},
		{[]string{"locks", "--json", noLockMgr}, "NO_LOCK_TABLE"},
		{[]string{"stats", noLockMgr}, "NO_LOCK_TABLE"},
		{[]string{"stats", "--json", noLockMgr}, "NO_LOCK_TABLE"},
		{[]string{"lock", noLockMgr, "job", "--", "true"}, "NO_LOCK_TABLE"},
		{[]string{"txns", noTxn}, "transaction"},
		{[]string{"txns", "--all", "--json", noTxn}, "transaction"},
	} {
		name := strings.NewReplacer(noLockMgr, "SEG", noTxn, "SEG").Replace(strings.Join(tc.args, " "))
		t.Run(name, func(t *testing.T) {
			line := requireOneLineError(t, shmctl(t, false, tc.args...), exitError)
			assert.Contains(t, line, tc.want)
		})
	}
}
