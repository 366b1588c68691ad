package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every shmctl command line in the README's shell blocks names a command,
// flags and arguments that the current CLI accepts, so the README cannot
// drift from it unnoticed. (The commands are parsed, not run.)
func TestReadmeCommandLines(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	var lines []string
	inShell := false
	for line := range strings.Lines(string(readme)) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "```"):
			inShell = line == "```sh"
		case inShell:
			line, _, _ = strings.Cut(line, " #")
			// As the shell expands it: the README holds locks for "$$".
			line = strings.ReplaceAll(strings.TrimSpace(line), "$$", "4242")
			lines = append(lines, invocations(line, "./shmctl", "go run ./cmd/shmctl")...)
		}
	}
	require.GreaterOrEqual(t, len(lines), 10, "shmctl lines found in README.md")
	seen := map[string]bool{}
	for _, line := range lines {
		ios, _, _ := testIOStreams(false)
		cmd, rest, err := newCmdRoot(ios).Find(shellWords(line))
		if !assert.NoError(t, err, "README: shmctl %s", line) ||
			!assert.True(t, cmd.HasParent(), "README: shmctl %s: no such command", line) {
			continue
		}
		seen[cmd.Name()] = true
		if !assert.NoError(t, cmd.ParseFlags(rest), "README: shmctl %s", line) {
			continue
		}
		assert.NoError(t, cmd.ValidateArgs(cmd.Flags().Args()), "README: shmctl %s", line)
	}
	for _, name := range []string{"create", "info", "slots", "rwlocks", "txns", "locks", "stats", "lock", "reclaim", "rm", "demo", "bench"} {
		assert.True(t, seen[name], "README shows no 'shmctl %s' line", name)
	}
}

// Every shmctl command the prose of the README and the docs names in a
// code span (`shmctl bench --lock lockmgr-eager`, `shmctl unlock SEG NAME
// --force`) is a command of the current CLI, and every flag it shows is one
// of that command's: a renamed command or flag cannot linger in the text.
// The other words are placeholders (SEG, NAME) and are not checked.
func TestDocsNameRealCommandsAndFlags(t *testing.T) {
	t.Parallel()
	docs := []string{"../../README.md", "../../clib/README.md", "../../bench/README.md"}
	more, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	fence := regexp.MustCompile("(?ms)^```.*?^```")
	span := regexp.MustCompile("`([^`]+)`")
	invocation := regexp.MustCompile(`(?:^|[\s/"])shmctl\s+([^"]*)`)
	found := 0
	for _, doc := range append(docs, more...) {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		prose := fence.ReplaceAllString(string(b), "")
		for _, s := range span.FindAllStringSubmatch(prose, -1) {
			m := invocation.FindStringSubmatch(s[1])
			if m == nil {
				continue
			}
			found++
			words := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(m[1]))
			ios, _, _ := testIOStreams(false)
			root := newCmdRoot(ios)
			root.InitDefaultHelpCmd() // cobra adds "help" at Execute: `shmctl help rm` is a command too
			cmd, rest, err := root.Find(words)
			if err == nil && cmd.Name() == "help" {
				cmd, _, err = root.Find(rest) // the command it is about
			}
			if !assert.NoError(t, err, "%s: `%s`", doc, s[1]) ||
				!assert.True(t, cmd.HasParent(), "%s: `%s`: no such command", doc, s[1]) {
				continue
			}
			for _, w := range words {
				if !strings.HasPrefix(w, "-") || w == "-" || w == "--" {
					continue
				}
				name, _, _ := strings.Cut(w, "=")
				var f *pflag.Flag
				for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.InheritedFlags()} {
					if long, ok := strings.CutPrefix(name, "--"); ok && f == nil {
						f = fs.Lookup(long)
					} else if len(name) == 2 && f == nil {
						f = fs.ShorthandLookup(name[1:])
					}
				}
				assert.NotNil(t, f, "%s: `%s`: shmctl %s has no flag %s", doc, s[1], cmd.Name(), w)
			}
		}
	}
	require.GreaterOrEqual(t, found, 30, "shmctl code spans found in the docs")
}

// Every shmctl command line of a command's help examples (and of its man
// page, made from them) is accepted by the current CLI as
// TestReadmeCommandLines accepts the README's: the examples are what a
// new user copies first.
func TestHelpExamplesParse(t *testing.T) {
	t.Parallel()
	ios, _, _ := testIOStreams(false)
	root := newCmdRoot(ios)
	var lines []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for line := range strings.Lines(c.Example) {
			line, _, _ = strings.Cut(line, " #")
			line = strings.ReplaceAll(line, "$$", "4242")
			lines = append(lines, invocations(line, "shmctl")...)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	require.GreaterOrEqual(t, len(lines), 40, "shmctl lines found in the help examples")
	for _, line := range lines {
		words := shellWords(line)
		ios, _, _ := testIOStreams(false)
		cmd, rest, err := newCmdRoot(ios).Find(words)
		if !assert.NoError(t, err, "example: shmctl %s", line) ||
			!assert.True(t, cmd.HasParent(), "example: shmctl %s: no such command", line) ||
			!assert.NoError(t, cmd.ParseFlags(rest), "example: shmctl %s", line) {
			continue
		}
		assert.NoError(t, cmd.ValidateArgs(cmd.Flags().Args()), "example: shmctl %s", line)
	}
}

// invocations are the arguments of each run of a program of names (such as
// "./shmctl") in the shell line: at the start of the line or of a part of it
// that a pipe, ||, &&, ; or $( begins, or after a VAR=value. The endpoints
// of an SHMLOCK_ETCD= before it stand for --etcd, as the command takes them.
func invocations(line string, names ...string) []string {
	var found []string
	for _, part := range regexp.MustCompile(`\|\|?|&&|;|\$\(|\)`).Split(line, -1) {
		for _, name := range names {
			env, rest, ok := strings.Cut(" "+part, " "+name+" ")
			if !ok {
				continue
			}
			if _, endpoints, ok := strings.Cut(env, envEtcd+"="); ok {
				rest += " --etcd " + strings.TrimSpace(endpoints)
			}
			found = append(found, rest)
		}
	}
	return found
}

// shellWords splits line into words as sh does for the examples' plain
// quoting: single and double quotes group, and are removed.
func shellWords(line string) []string {
	var words []string
	var word strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			word.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, word.String())
				word.Reset()
			}
			inWord = false
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}
