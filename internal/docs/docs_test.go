package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// internalRef matches what only we understand: design document numbers,
// the seed files and their directory, the seeds themselves, our sessions.
var internalRef = regexp.MustCompile(`(?i)design 00\d|shared/seeds|\bseeds?\b|\bseed's\b|option [ab]\b|\bsession \d`)

// The README and every comment of the packages' Go files and examples
// (other tests are for us) say nothing a user cannot look up.
func TestNoInternalReferences(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(readme), "\n") {
		if m := internalRef.FindString(line); m != "" {
			t.Errorf("README.md:%d mentions %q: %s", i+1, m, line)
		}
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// (The root itself is "../..": a dot name that is no hidden directory.)
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		// Examples are tests that godoc shows: they are checked too.
		example := strings.HasSuffix(path, "example_test.go")
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") && !example {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if m := internalRef.FindString(c.Text); m != "" && !seedOfRandom(c, m) {
					t.Errorf("%s mentions %q: %s", fset.Position(c.Pos()), m, c.Text)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// seedOfRandom allows "seed" where it means a random generator's seed.
func seedOfRandom(c *ast.Comment, m string) bool {
	low := strings.ToLower(c.Text)
	return strings.EqualFold(m, "seed") && (strings.Contains(low, "splitmix") || strings.Contains(low, "random") || strings.Contains(low, "rng"))
}
