package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
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
			if name == "missing" {
				t.Skip("lock creates a missing segment: TestLockCreatesSegment")
			}
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
	assert.Equal(t, "1", doc.PIDNamespace)
	require.NotNil(t, doc.Creator)
	assert.Equal(t, "unknown", doc.Creator.Liveness, "its pid names another process here")
}

// Every command that lists or uses one table fails the same way on a
// segment made without it: one line naming the table and the create flag
// that gives a segment one, exit status exitError; the lock-manager
// commands with lockmgr's code. (info and reclaim take any segment.)
func TestMissingTable(t *testing.T) {
	t.Parallel()
	noSlots := newSegment(t, layout.Options{Slots: -1}).Path()
	noUpgrades := newSegment(t, layout.Options{Upgrades: -1}).Path()
	noLockMgrSeg := newSegment(t, layout.Options{Slots: 1, LockMgrEntries: -1})
	noTxnSeg := newSegment(t, layout.Options{Slots: 2, TxnRecords: -1})
	noLockMgr, noTxn := noLockMgrSeg.Path(), noTxnSeg.Path()
	noArena := newSegment(t, layout.Options{Slots: 2, TxnArenaBytes: -1}).Path()
	// The packages' own errors stay in the chain.
	require.ErrorIs(t, needTables(noLockMgrSeg, layout.KindLockMgr), lockmgr.ErrNoTable)
	require.ErrorIs(t, needTables(noTxnSeg, layout.KindTxnArena, layout.KindTxnRecords), txn.ErrNoSpace)
	require.NoError(t, needTables(noTxnSeg, layout.KindOwnerSlots, layout.KindLockMgr))
	const (
		slotTable    = "has no owner-slot table: 'shmctl create --slots N'"
		upgradeTable = "has no upgrade-mutex table: 'shmctl create --upgrades N'"
		lockTable    = "has no lock-manager table: 'shmctl create --lockmgr-entries N'"
		txnTable     = "has no transaction-record table: 'shmctl create --txn-records N'"
		arenaTable   = "has no transaction arena: 'shmctl create --txn-arena N'"
	)
	for _, tc := range []struct {
		args []string // SEG stands for seg
		seg  string
		want []string
	}{
		{[]string{"slots", "SEG"}, noSlots, []string{slotTable}},
		{[]string{"slots", "--all", "--json", "SEG"}, noSlots, []string{slotTable}},
		{[]string{"rwlocks", "SEG"}, noUpgrades, []string{upgradeTable}},
		{[]string{"rwlocks", "--all", "--json", "SEG"}, noUpgrades, []string{upgradeTable}},
		{[]string{"locks", "SEG"}, noLockMgr, []string{lockTable, "NO_LOCK_TABLE"}},
		{[]string{"locks", "--json", "SEG"}, noLockMgr, []string{lockTable, "NO_LOCK_TABLE"}},
		{[]string{"stats", "SEG"}, noLockMgr, []string{lockTable, "NO_LOCK_TABLE"}},
		{[]string{"stats", "--json", "SEG"}, noLockMgr, []string{lockTable, "NO_LOCK_TABLE"}},
		{[]string{"lock", "SEG", "job", "--", "true"}, noLockMgr, []string{lockTable, "NO_LOCK_TABLE"}},
		{[]string{"txns", "SEG"}, noTxn, []string{txnTable, "transaction"}},
		{[]string{"txns", "--all", "--json", "SEG"}, noTxn, []string{txnTable, "transaction"}},
		{[]string{"txns", "--json", "SEG"}, noArena, []string{arenaTable}},
	} {
		name := strings.Join(tc.args, " ")
		args := slices.Clone(tc.args)
		args[slices.Index(args, "SEG")] = tc.seg
		t.Run(name, func(t *testing.T) {
			line := requireOneLineError(t, shmctl(t, false, args...), exitError)
			assert.True(t, strings.HasPrefix(line, "shmctl: "+tc.seg+" has no "), "%q does not name the segment first", line)
			for _, w := range tc.want {
				assert.Contains(t, line, w)
			}
		})
	}
}

// Commands that create or remove a segment refuse a file that is not one
// (no magic, not a regular file, a symbolic link) with one line and exit
// status 1, and leave it as it was.
func TestWriteCommandsRefuseNonSegment(t *testing.T) {
	t.Parallel()
	files := map[string]func(t *testing.T) string{
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
	}
	commands := [][]string{
		{"rm", "PATH"}, {"create", "PATH"}, {"create", "--json", "PATH"},
		{"demo", "--workers", "2", "--duration", "200ms", "--path", "PATH"},
	}
	for name, file := range files {
		for _, args := range commands {
			t.Run(name+"/"+args[0]+"/"+args[len(args)-2], func(t *testing.T) {
				t.Parallel()
				path := file(t)
				before := fileState(t, path)
				args := slices.Clone(args)
				args[len(args)-1] = path
				line := requireOneLineError(t, shmctl(t, false, args...), exitError)
				assert.Contains(t, line, path)
				assert.Equal(t, before, fileState(t, path), "%s changed", path)
			})
		}
	}
}

// fileState is what a path is: a symbolic link's target, a directory, or
// a file's bytes.
func fileState(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(path)
		require.NoError(t, err)
		return "symlink to " + target
	case fi.IsDir():
		return "directory"
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return "file " + string(b)
}

// A segment name that cannot name a file (shm.ErrBadPath) is one line and
// exit status 1 for every command that takes a segment, and creates nothing.
func TestBadSegmentName(t *testing.T) {
	t.Parallel()
	commands := [][]string{
		{"info", "SEG"}, {"info", "--json", "SEG"}, {"slots", "SEG"}, {"rwlocks", "SEG"}, {"txns", "SEG"},
		{"locks", "SEG"}, {"stats", "SEG"}, {"reclaim", "SEG"}, {"reclaim", "--dry-run", "--json", "SEG"},
		{"rm", "SEG"}, {"create", "SEG"}, {"lock", "SEG", "job", "--", "true"},
		{"demo", "--path", "SEG"},
	}
	for _, name := range []string{"", "..", "dir/", "a\x00b"} {
		for _, args := range commands {
			args := slices.Clone(args)
			args[slices.Index(args, "SEG")] = name
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				line := requireOneLineError(t, shmctl(t, false, args...), exitError)
				assert.Contains(t, line, "shm: bad segment path: ")
				assert.Contains(t, line, fmt.Sprintf("%q", name))
			})
		}
	}
}

// A file whose mode lets others (or its group) in is refused with advice a
// shell user can follow: for a segment, the chmod of its path that makes
// it private (which then opens), or --group for a group segment; for a
// file that is no segment at all, that, and no chmod. The error is still
// shm.ErrPermissiveMode. The advice was "(AllowOthersAccess, or chmod
// o-rwx)", a Go option and a chmod of no file, for a mistyped path too.
func TestPermissiveModeAdvice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		segment   bool
		mode      os.FileMode
		want, fix []string // in the message; fix: the command that makes it open
		notWanted []string
	}{
		{"segment, others", true, 0o604, []string{"other users may use it"}, []string{"chmod", "o-rwx"}, nil},
		{"segment, group", true, 0o640, []string{"its group may use it", "shmctl --group"}, []string{"chmod", "g-rwx"}, nil},
		{"no segment, others", false, 0o644, []string{"is no shmlock segment"}, nil, []string{"chmod", "AllowOthersAccess"}},
		{"no segment, group", false, 0o640, []string{"is no shmlock segment"}, nil, []string{"chmod", "GroupAccess", "--group"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, []byte("precious\n"))
			if tc.segment {
				path = newSegment(t, layout.Options{}).Path()
			}
			require.NoError(t, os.Chmod(path, tc.mode))
			_, err := shm.Open(path, shm.Options{ReadOnly: true})
			require.ErrorIs(t, err, shm.ErrPermissiveMode)

			line := requireOneLineError(t, shmctl(t, false, "info", path), exitError)
			for _, w := range tc.want {
				assert.Contains(t, line, w)
			}
			for _, w := range tc.notWanted {
				assert.NotContains(t, line, w)
			}
			if tc.fix == nil {
				return
			}
			fix := strings.Join(append(tc.fix, path), " ")
			require.Contains(t, line, fix)
			out, err := exec.Command(tc.fix[0], append(tc.fix[1:], path)...).CombinedOutput()
			require.NoError(t, err, "%s: %s", fix, out)
			r := shmctl(t, false, "info", path)
			require.Equal(t, exitOK, r.code, "info after %s: %s", fix, r.stderr)
		})
	}
}
