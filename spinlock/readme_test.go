package spinlock_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/readme"
)

// The README's "Go quick start" is quickStart, which ExampleNamed runs.
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	require.NoError(t, readme.Check("../README.md", "Go quick start", "example_test.go", "quickStart"))
}
