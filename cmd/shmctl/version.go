package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/layout"
)

// versionLine is what shmctl version and shmctl --version print: the
// module's version (as the Go toolchain stamped it: a tag, a pseudo-version,
// or "(devel)" for a build from a checkout) and the segment format version
// this build reads and writes.
func versionLine() string {
	return fmt.Sprintf("shmctl %s, segment format version %d", moduleVersion(), layout.Version)
}

// moduleVersion is the module's version as the Go toolchain stamped it.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func newCmdVersion(ios *IOStreams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print shmctl's version and the segment format version it reads",
		Long: `Print shmctl's version and the segment format version it reads and
writes; with --json, also the schema of the JSON documents it prints.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON {
				return writeJSON(ios.Out, versionJSON{docHeader: header("version"),
					ShmctlVersion: moduleVersion(), FormatVersion: layout.Version})
			}
			_, err := fmt.Fprintln(ios.Out, versionLine())
			return err
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}
