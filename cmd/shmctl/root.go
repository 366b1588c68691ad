package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/internal/mono"
)

// newCmdRoot builds the command tree. A new command is one file with its
// newCmdX constructor and one line in the AddCommand list below.
func newCmdRoot(ios *IOStreams) *cobra.Command {
	root := &cobra.Command{
		Use:   "shmctl <command> [flags]",
		Short: "Inspect and manage shmlock shared-memory segments",
		Long: `shmctl inspects and manages shmlock segments: the files, by default in
/dev/shm, that hold cross-process locks. A segment argument is a path or a
bare name ("jobs" means /dev/shm/jobs). A segment is its owner's alone
(mode 0600) unless created with --group (0660): every command then opens
it with --group, which lets the members of the file's group use it too.
demo, bench and rm ignore --group.

Errors are one line on stderr. The exit status is 0 on success, 1 on
failure, 2 for bad usage; bench exits 3 for a workload its lock does not
support, and lock with its command's status (75 if the lock was taken and
-n or -w gave up, 128+N if signal N killed the command or ended the wait,
126 or 127 if it could not be started).

New here? 'shmctl demo' shows in a few seconds what the locks are for.`,
		// The clock's switch is read when the program starts, where no
		// one can be told of a mistake in it; every command says so here.
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			if err := mono.CheckClockEnv(os.Getenv(mono.ClockEnv)); err != nil {
				fmt.Fprintf(ios.ErrOut, "shmctl: warning: %v\n", err)
			}
		},
		// Errors and usage are reported by execute, one line each.
		SilenceErrors: true,
		SilenceUsage:  true,
		// Runnable with any arguments, so that a mistyped command is a
		// usage error here instead of help text with exit status 0.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return unknownCommand(cmd, args[0])
		},
	}
	root.Version = versionLine()
	root.SetVersionTemplate("{{.Version}}\n")
	root.SuggestionsMinimumDistance = 2 // cobra's default, which it only sets on its own error path
	root.SetOut(ios.Out)
	root.SetErr(ios.ErrOut)
	root.SetFlagErrorFunc(flagError)
	addGroupFlag(root)

	root.AddCommand(
		newCmdCreate(ios, nil),
		newCmdInfo(ios, nil),
		newCmdSlots(ios, nil),
		newCmdRWLocks(ios, nil),
		newCmdRm(ios, nil),
		newCmdTxns(ios, nil),
		newCmdReclaim(ios, nil),
		newCmdLocks(ios, nil),
		newCmdStats(ios, nil),
		newCmdLock(ios, nil),
		newCmdLockGuard(ios),
		newCmdBench(ios, nil),
		newCmdDemo(ios, nil),
		newCmdDemoWorker(ios, nil),
		newCmdVersion(ios),
		newCmdUnlock(ios, nil),
		newCmdCheck(ios, nil),
		newCmdData(ios, nil),
		newCmdServe(ios, nil),
		newCmdTop(ios, nil),
		newCmdGenMan(),
	)
	addNoHeaderFlag(root, ios)
	addWatch(root, ios)
	strictBuiltins(root)
	addCompletions(root)
	return root
}

// strictBuiltins makes cobra's own help and completion commands report
// bad usage as every other command does (one line, exit status 2): left
// alone, "help nosuch" and "completion tcsh" print help and exit 0, and
// "completion bash extra" exits 1.
func strictBuiltins(root *cobra.Command) {
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 || (target == root && len(args) > 0) {
				return newUsageError(cmd, "no help for %q", strings.Join(args, " "))
			}
			return target.Help()
		},
	})
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		shells := make([]string, 0, len(c.Commands()))
		for _, sh := range c.Commands() {
			shells = append(shells, sh.Name())
			sh.Args = exactArgs(0, "no arguments")
		}
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return newUsageError(cmd, "no completion for shell %q: %s", args[0], orList(shells))
			}
			return nil
		}
		c.RunE = func(cmd *cobra.Command, args []string) error {
			return newUsageError(cmd, "completion needs a shell: %s", orList(shells))
		}
	}
}

func unknownCommand(root *cobra.Command, name string) error {
	if s := root.SuggestionsFor(name); len(s) > 0 {
		return newUsageError(root, "unknown command %q; did you mean %s?", name, strings.Join(s, " or "))
	}
	return newUsageError(root, "unknown command %q", name)
}

// groupFlagName is the flag of every command for segments shared with a
// group: create makes them, the others open them (shm.Options.GroupAccess).
const groupFlagName = "group"

// addGroupFlag adds --group to root, for every command.
func addGroupFlag(root *cobra.Command) {
	root.PersistentFlags().Bool(groupFlagName, false,
		"the segment is shared with its group: create makes it 0660, the other commands open it (also another member's)")
}

// addNoHeaderFlag adds --no-header to root, for every command that prints
// a table: tables have a header row on a terminal and in a pipe alike, so
// a script reads the columns by name, unless it asks for bare rows.
func addNoHeaderFlag(root *cobra.Command, ios *IOStreams) {
	root.PersistentFlags().BoolVar(&ios.noHeader, "no-header", false, "print tables without their header row")
}

// groupFlag reports whether --group was given to cmd (false if cmd has no
// such flag, as in tests that build one command alone).
func groupFlag(cmd *cobra.Command) bool {
	f := cmd.Flags().Lookup(groupFlagName)
	return f != nil && f.Value.String() == "true"
}
