package txn_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/readme"
	"github.com/shmlock/shmlock/txn"
)

// docs/FORMAT.md's transaction record is the package's, byte for byte.
func TestFormatDocMatchesRecord(t *testing.T) {
	t.Parallel()
	rows, err := readme.FormatTable(filepath.Join("..", "docs", "FORMAT.md"), "TxnRecord")
	require.NoError(t, err)
	typ := reflect.TypeOf(txn.Record{})
	var want []readme.Field
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Name != "_" {
			want = append(want, readme.Field{Offset: int(f.Offset), Size: int(f.Type.Size()), Name: f.Name})
		}
	}
	require.Equal(t, want, rows)
}
