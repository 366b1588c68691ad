package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

//go:generate go run . gen-man ../../docs/man

// manDate is the date the man pages carry (as "Month Year"): fixed, so that
// the same command tree always gives the same pages, which TestManPages
// compares with docs/man. Move it forward when the pages change.
var manDate = time.Date(2026, time.November, 1, 0, 0, 0, 0, time.UTC)

// newCmdGenMan is the hidden command that writes a man page per command
// into a directory: 'go generate ./cmd/shmctl' runs it for docs/man.
func newCmdGenMan() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man <dir>",
		Short:  "Write the man pages of shmctl and its commands into a directory",
		Hidden: true,
		Args:   exactArgs(1, "a directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeManPages(cmd.Root(), args[0])
		},
	}
}

func escapeUses(c *cobra.Command) {
	c.Use = strings.NewReplacer("<", `\<`, ">", `\>`).Replace(c.Use)
	for _, sub := range c.Commands() {
		escapeUses(sub)
	}
}

// writeManPages writes the man page of root and of each of its visible
// commands into dir (made if need be): shmctl.1, shmctl-info.1, ...
func writeManPages(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// cobra would add a line with the day the pages were made.
	root.DisableAutoGenTag = true
	// The pages are written as Markdown and converted, where "<segment>"
	// would be an HTML tag and vanish: escape the brackets of the usage
	// lines (only the name, Use's first word, matters to cobra).
	escapeUses(root)
	date := manDate
	header := &doc.GenManHeader{Title: "SHMCTL", Section: "1", Date: &date, Source: "shmlock", Manual: "shmlock manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return fmt.Errorf("writing the man pages: %w", err)
	}
	return nil
}
