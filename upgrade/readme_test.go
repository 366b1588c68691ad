package upgrade_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's "Upgrade mutex" quick start is quickStart of
// example_test.go, which Example runs: the two must not drift apart.
func TestREADMEQuickStart(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	s := string(src)
	start := strings.Index(s, "func quickStart(")
	require.NotEqual(t, -1, start, "quickStart in example_test.go")
	end := strings.Index(s[start:], "\n}\n")
	require.NotEqual(t, -1, end)
	require.Contains(t, string(readme), s[start:start+end+3], "README.md's quick start differs from quickStart in example_test.go")
}
