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
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	return fmt.Sprintf("shmctl %s, segment format version %d", v, layout.Version)
}

func newCmdVersion(ios *IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print shmctl's version and the segment format version it reads",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(ios.Out, versionLine())
			return err
		},
	}
}
