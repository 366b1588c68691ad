package lockmgr_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/readme"
)

// The README's "Named resource locks" code is quickStart, which Example
// runs, so it compiles and runs as long as this test passes.
func TestReadmeShowsExample(t *testing.T) {
	t.Parallel()
	require.NoError(t, readme.Check("../README.md", "Named resource locks", "example_test.go", "quickStart"))
}
