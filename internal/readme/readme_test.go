package readme_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/readme"
)

const src = `package x

func quickStart(path string) error {
	return nil
}

func other() {}
`

func TestCheck(t *testing.T) {
	t.Parallel()
	shown := "# T\n\n## Quick start\n\n```go\nimport \"x\"\n\nfunc quickStart(path string) error {\n\treturn nil\n}\n```\n\n## Next\n"
	tests := []struct {
		name, readme, heading, fn string
		want                      error
	}{
		{"shown verbatim", shown, "Quick start", "quickStart", nil},
		{"no section", shown, "Missing", "quickStart", readme.ErrNoSection},
		{"no code in the section", "## Quick start\n\ntext\n\n## Next\n```go\nfunc quickStart(path string) error {\n\treturn nil\n}\n```\n", "Quick start", "quickStart", readme.ErrNoCode},
		{"unterminated block", "## Quick start\n```go\nfunc quickStart(\n", "Quick start", "quickStart", readme.ErrNoCode},
		{"no such function", shown, "Quick start", "missing", readme.ErrNoFunc},
		{"drifted", "## Quick start\n```go\nfunc quickStart(path string) error {\n\treturn errors.New(\"x\")\n}\n```\n", "Quick start", "quickStart", readme.ErrDrift},
		{"another function", shown, "Quick start", "other", readme.ErrDrift},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			r, s := filepath.Join(dir, "README.md"), filepath.Join(dir, "x_test.go")
			require.NoError(t, os.WriteFile(r, []byte(tt.readme), 0o600))
			require.NoError(t, os.WriteFile(s, []byte(src), 0o600))
			err := readme.Check(r, tt.heading, s, tt.fn)
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
			}
		})
	}
}

// The README's Go code is each package's quickStart, which the package's
// Example compiles and runs: the two must not drift apart.
func TestREADMEShowsTheExamples(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ heading, pkg string }{
		{"Go quick start", "spinlock"},
		{"Upgrade mutex", "upgrade"},
		{"Transactions", "txn"},
		{"Named resource locks", "lockmgr"},
		{"Beyond one machine", "lockmgr/etcdlock"},
	} {
		t.Run(tt.pkg, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, readme.Check("../../README.md", tt.heading,
				filepath.Join("../..", tt.pkg, "example_test.go"), "quickStart"))
		})
	}
}
