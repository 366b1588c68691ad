package shm_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/shm"
)

// TestCreateReadOnlyIsRefused: ReadOnly maps a segment for inspection, so a
// Create (or the create of an OpenOrCreate) asked for it is refused with
// ErrReadOnly and leaves no file, where it made a writable segment that an
// inspection tool would have brought into being.
func TestCreateReadOnlyIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		create func(string, shm.Options) (*shm.Segment, error)
	}{
		{"Create", shm.Create},
		{"OpenOrCreate", shm.OpenOrCreate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "seg")
			seg, err := tc.create(path, shm.Options{ReadOnly: true})
			if seg != nil {
				_ = seg.Close()
			}
			require.ErrorIs(t, err, shm.ErrReadOnly)
			require.Nil(t, seg)
			left, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, left, "no segment and no pending file")
		})
	}
}
