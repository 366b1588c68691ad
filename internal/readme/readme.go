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
