package layout_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/readme"
	"github.com/shmlock/shmlock/layout"
)

var formatDoc = filepath.Join("..", "docs", "FORMAT.md")

// CheckFormatStruct requires that the table of docs/FORMAT.md under the
// struct's name lists exactly its fields, with their offsets and sizes.
func checkFormatStruct(t *testing.T, name string, v any) {
	t.Helper()
	rows, err := readme.FormatTable(formatDoc, name)
	require.NoError(t, err)
	typ := reflect.TypeOf(v)
	var want []readme.Field
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Name == "_" {
			continue
		}
		want = append(want, readme.Field{Offset: int(f.Offset), Size: int(f.Type.Size()), Name: f.Name})
	}
	require.Equal(t, want, rows, "docs/FORMAT.md's %s and the Go declaration differ", name)
}

// docs/FORMAT.md is the specification another language implements: its
// tables of words must be the layout package's, byte for byte.
func TestFormatDocMatchesLayout(t *testing.T) {
	t.Parallel()
	checkFormatStruct(t, "DirEntry", layout.DirEntry{})
	checkFormatStruct(t, "OwnerSlot", layout.OwnerSlot{})
	checkFormatStruct(t, "UpgradeEntry", layout.UpgradeEntry{})
	checkFormatStruct(t, "ReaderRecord", layout.ReaderRecord{})
	checkFormatStruct(t, "LockMgrEntry", layout.LockMgrEntry{})
	checkFormatStruct(t, "LockMgrHolder", layout.LockMgrHolder{})
	checkFormatStruct(t, "ClaimRef", layout.ClaimRef{})
	checkFormatStruct(t, "RegionEntry", layout.RegionEntry{})
	checkFormatStruct(t, "LockStats", layout.LockStats{})

	rows, err := readme.FormatTable(formatDoc, "Header")
	require.NoError(t, err)
	want := map[string][2]int{
		"Magic": {layout.OffMagic, len(layout.Magic)}, "Version": {layout.OffVersion, 4},
		"HeaderSize": {layout.OffHeaderSize, 4}, "TotalSize": {layout.OffTotalSize, 8},
		"Created": {layout.OffCreated, 8}, "BootID": {layout.OffBootID, 16}, "PIDNS": {layout.OffPIDNS, 8},
		"Creator": {layout.OffCreator, 8}, "TableCount": {layout.OffTableCount, 4}, "Flags": {layout.OffFlags, 4},
		"Tables": {layout.OffTables, layout.NumTables * layout.TableDescSize}, "Ready": {layout.OffReady, 4},
		"Checksum": {layout.OffChecksum, 4}, "Registry": {layout.OffRegistry, 8},
		"OwnersBoot": {layout.OffOwnersBoot, 16}, "RegistryGen": {layout.OffRegistryGen, 8},
	}
	require.Len(t, rows, len(want), "the header's words")
	for _, r := range rows {
		w, ok := want[r.Name]
		require.True(t, ok, "docs/FORMAT.md's header names %q, which layout has not", r.Name)
		require.Equal(t, w, [2]int{r.Offset, r.Size}, "header word %s: offset and size", r.Name)
	}
}
