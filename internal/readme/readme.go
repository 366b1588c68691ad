// Package readme keeps the README's Go code honest: its test checks that
// the code each package's README section shows is, verbatim, a function of
// the package's example_test.go, which an Example compiles and runs.
package readme

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Errors of Check, for tests of this package.
var (
	ErrNoSection = errors.New("readme: no such section")
	ErrNoCode    = errors.New("readme: the section has no Go code")
	ErrNoFunc    = errors.New("readme: no such function")
	ErrDrift     = errors.New("readme: the README's code differs from the function")
)

// Check reports whether the first Go code block of the README section
// under the heading "## heading" contains the function name of the Go
// file src, from "func name(" to its closing brace, exactly.
func Check(readmePath, heading, src, name string) error {
	block, err := GoBlock(readmePath, heading)
	if err != nil {
		return err
	}
	fn, err := Func(src, name)
	if err != nil {
		return err
	}
	if !strings.Contains(block, fn) {
		return fmt.Errorf("%w: section %q of %s does not show func %s of %s as it is: change both",
			ErrDrift, heading, readmePath, name, src)
	}
	return nil
}

// GoBlock returns the first ```go block of the section "## heading".
func GoBlock(readmePath, heading string) (string, error) {
	b, err := os.ReadFile(readmePath)
	if err != nil {
		return "", err
	}
	_, section, ok := strings.Cut("\n"+string(b), "\n## "+heading+"\n")
	if !ok {
		return "", fmt.Errorf("%w: %q in %s", ErrNoSection, heading, readmePath)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, code, ok := strings.Cut(section, "```go\n")
	if !ok {
		return "", fmt.Errorf("%w: %q in %s", ErrNoCode, heading, readmePath)
	}
	code, _, ok = strings.Cut(code, "```\n")
	if !ok {
		return "", fmt.Errorf("%w: %q in %s: the block does not end", ErrNoCode, heading, readmePath)
	}
	return code, nil
}

// Func returns the top-level function name of the Go file src, from
// "func name(" to the line that closes it.
func Func(src, name string) (string, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	_, fn, ok := strings.Cut("\n"+string(b), "\nfunc "+name+"(")
	if !ok {
		return "", fmt.Errorf("%w: %s in %s", ErrNoFunc, name, src)
	}
	fn = "func " + name + "(" + fn
	if first, _, _ := strings.Cut(fn, "\n"); strings.HasSuffix(first, "}") {
		return first + "\n", nil // a one-line function
	}
	body, _, ok := strings.Cut(fn, "\n}\n")
	if !ok {
		return "", fmt.Errorf("%w: %s in %s does not end", ErrNoFunc, name, src)
	}
	return body + "\n}\n", nil
}

// Field is one row of a layout table of docs/FORMAT.md: a word's offset and
// size in bytes and its name (backquotes removed).
type Field struct {
	Offset, Size int
	Name         string
}

// FormatTable returns the rows of the first table under the heading
// "### `name`" (or "## name") of the markdown file path, whose first three
// columns are offset, size and name. A size written "N x M" is N*M.
func FormatTable(path, name string) ([]Field, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(b), "\n")
	start := -1
	for i, l := range lines {
		if l == "### `"+name+"`" || strings.HasPrefix(l, "### `"+name+"` ") || l == "## "+name {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("%w: %q in %s", ErrNoSection, name, path)
	}
	var rows []Field
	for _, l := range lines[start+1:] {
		if strings.HasPrefix(l, "#") {
			break
		}
		cells := strings.Split(l, "|")
		if len(cells) < 5 || strings.TrimSpace(cells[1]) == "offset" || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			if len(rows) > 0 && !strings.HasPrefix(l, "|") {
				break
			}
			continue
		}
		var f Field
		if _, err := fmt.Sscan(strings.TrimSpace(cells[1]), &f.Offset); err != nil {
			return nil, fmt.Errorf("readme: %s: offset %q: %w", name, cells[1], err)
		}
		size := strings.TrimSpace(cells[2])
		var n, m int
		if k, _ := fmt.Sscanf(size, "%d x %d", &n, &m); k == 2 {
			f.Size = n * m
		} else if _, err := fmt.Sscan(size, &f.Size); err != nil {
			return nil, fmt.Errorf("readme: %s: size %q: %w", name, size, err)
		}
		f.Name = strings.Trim(strings.TrimSpace(cells[3]), "`")
		rows = append(rows, f)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: no table under %q in %s", ErrNoCode, name, path)
	}
	return rows, nil
}
