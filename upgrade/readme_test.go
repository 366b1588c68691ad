package upgrade_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/readme"
)

// The README's "Upgrade mutex" quick start is quickStart of
// example_test.go, which Example runs: the two must not drift apart.
func TestREADMEQuickStart(t *testing.T) {
	t.Parallel()
	require.NoError(t, readme.Check("../README.md", "Upgrade mutex", "example_test.go", "quickStart"))
}
