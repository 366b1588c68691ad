package bench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The driver removes the files it made, and not a file another program
// put at one of their paths during the run: it removed whatever was
// there by the end, though its help says bench never removes a file it
// did not make.
func TestOwnFilesRemovesOnlyWhatItMade(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	kept, replaced := filepath.Join(dir, "kept"), filepath.Join(dir, "replaced")
	var f ownFiles
	for _, p := range []string{kept, replaced} {
		require.NoError(t, f.create(func() (string, error) { return p, os.WriteFile(p, []byte("bench's"), 0o600) }))
	}
	require.NoError(t, os.Remove(replaced))
	require.NoError(t, os.WriteFile(replaced, []byte("someone else's"), 0o600))

	assert.Equal(t, []string{kept}, f.remove())
	_, err := os.Stat(kept)
	assert.ErrorIs(t, err, os.ErrNotExist, "bench's own file is removed")
	b, err := os.ReadFile(replaced)
	require.NoError(t, err, "the file put in bench's place is left")
	assert.Equal(t, "someone else's", string(b))
	assert.Nil(t, f.remove(), "a second removal removes nothing")
}
