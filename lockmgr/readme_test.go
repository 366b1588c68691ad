package lockmgr_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's "Named resource locks" section shows the body of Example,
// so its code compiles and runs as long as this test passes.
func TestReadmeShowsExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "## Named resource locks\n")
	require.True(t, ok, "README has no \"Named resource locks\" section")
	_, code, ok := strings.Cut(section, "```go\n")
	require.True(t, ok, "the section has no Go code")
	code, _, ok = strings.Cut(code, "```\n")
	require.True(t, ok)

	src, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	_, body, ok := strings.Cut(string(src), "func Example() {\n")
	require.True(t, ok)
	body, _, ok = strings.Cut(body, "\t// Output:")
	require.True(t, ok)
	var want strings.Builder
	for line := range strings.Lines(body) {
		want.WriteString(strings.TrimPrefix(line, "\t"))
	}
	require.Equal(t, strings.TrimRight(want.String(), "\n")+"\n", code,
		"README's code differs from Example in example_test.go: change both")
}
