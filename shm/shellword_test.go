package shm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/shm"
)

// The path in a refusal's advice, as one word of sh, names the file it was
// made of: what sh passes to a command (here printf, as chmod would get
// it) opens that file, and is no option.
func TestShellWordNamesThePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"plain", "it's a $segment", "-rf", "--group", "tab\there", "new\nline", "*", "~home"} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(name), 0o600))
		for _, word := range []string{shm.ShellWord(path), shm.ShellWord(name)} {
			cmd := exec.Command("sh", "-c", `printf %s `+word)
			cmd.Dir = dir
			out, err := cmd.Output()
			require.NoError(t, err, "%q", word)
			assert.NotEqual(t, '-', rune(string(out)[0]), "%q reaches the command as an option: %q", word, out)
			b, err := os.ReadFile(filepath.Join(dir, string(out)))
			if filepath.IsAbs(string(out)) {
				b, err = os.ReadFile(string(out))
			}
			require.NoError(t, err, "%q names %q", word, out)
			assert.Equal(t, name, string(b), "%q", word)
		}
	}
}
