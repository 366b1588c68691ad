package shm

import (
	"fmt"
	"path/filepath"
	"strings"
)

// DefaultDir is where a bare segment name lives: a tmpfs on every Linux.
const DefaultDir = "/dev/shm"

// ResolvePath turns a segment name into a path: a name without a slash
// means a file in DefaultDir; anything else is taken as a path.
func ResolvePath(name string) (string, error) {
	switch {
	case name == "", name == ".", name == "..":
		return "", fmt.Errorf("%w: %q", ErrBadPath, name)
	case strings.ContainsRune(name, 0):
		return "", fmt.Errorf("%w: %q contains NUL", ErrBadPath, name)
	case !strings.ContainsRune(name, '/'):
		return filepath.Join(DefaultDir, name), nil
	case strings.HasSuffix(name, "/"):
		return "", fmt.Errorf("%w: %q names a directory", ErrBadPath, name)
	}
	return filepath.Clean(name), nil
}
