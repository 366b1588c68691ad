package txn_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/readme"
)

// The README's "Transactions" code is quickStart, which Example runs.
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	require.NoError(t, readme.Check("../README.md", "Transactions", "example_test.go", "quickStart"))
}
