package main

import (
	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/shm"
)

type rmOptions struct {
	IO *IOStreams

	Segments []string
}

func newCmdRm(ios *IOStreams, runF func(*rmOptions) error) *cobra.Command {
	opts := &rmOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "rm <segment>...",
		Short: "Remove segments",
		Long: `Remove each segment file. A file that is not a shmlock segment (no magic,
not a regular file, a symbolic link) is refused and left alone. Processes
that have a segment mapped keep using it until they close it.

Each failure is reported on its own line; the others are still removed.`,
		Example: `  shmctl rm jobs
  shmctl rm /dev/shm/a /dev/shm/b`,
		Args: minArgs(1, "at least one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segments = args
			if runF != nil {
				return runF(opts)
			}
			return runRm(opts)
		},
	}
	return cmd
}

func runRm(opts *rmOptions) error {
	if len(opts.Segments) == 1 {
		return shm.Remove(opts.Segments[0])
	}
	failed := false
	for _, s := range opts.Segments {
		if err := shm.Remove(s); err != nil {
			printError(opts.IO.ErrOut, err)
			failed = true
		}
	}
	if failed {
		return errSilent
	}
	return nil
}
