package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// watchable are the commands that only read, which --watch D repeats.
var watchable = map[string]bool{"info": true, "slots": true, "rwlocks": true, "locks": true, "txns": true, "stats": true, "check": true, "data": true}

// minWatch is the shortest interval --watch accepts: a redraw costs a
// segment open and a read of every table.
const minWatch = 100 * time.Millisecond

// watchRounds, when positive, ends a watch after that many rounds (tests).
var watchRounds int

// addWatch gives the read commands --watch D: the command runs every D,
// its output redrawn in place on a terminal (cursor home, each line
// cleared to its end, the rest of the screen cleared: no flicker, unlike
// clearing first), or printed again after a blank line in a pipe, until
// SIGINT or SIGTERM, which end it with status 0. A round that fails after
// the first shows its error instead on a terminal, and on stderr in a pipe
// (see watch).
func addWatch(root *cobra.Command, ios *IOStreams) {
	for _, c := range root.Commands() {
		if !watchable[c.Name()] {
			continue
		}
		var every time.Duration
		c.Flags().DurationVar(&every, "watch", 0, "run again every `D` (100ms or more), redrawn in place, until interrupted (a later round that fails shows its error, on stderr in a pipe)")
		run := c.RunE
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if every == 0 {
				return run(cmd, args)
			}
			if every < minWatch {
				return newUsageError(cmd, "--watch must be 0 or at least %v, got %v", minWatch, every)
			}
			return watch(ios, every, func() error { return run(cmd, args) })
		}
	}
}

// watch runs render every d into a buffer and shows it.
//
// A round that fails ends the watch only if it is the first: the command
// cannot run at all (no such segment, no such table), as without a
// watch. A later failure is shown in place of the frame, and the next
// round tries again: the commands open the segment afresh each round so
// as to follow one removed and made again under its path, and a round
// that falls between the removal and the new segment's being ready must
// not end the watch. Output in a pipe is a stream that a reader parses
// (jq reads the documents of --json, a script the rows of --no-header),
// which an error line would end or corrupt: there the failure goes to
// stderr, as every error does, and the round prints nothing.
func watch(ios *IOStreams, d time.Duration, render func() error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := ios.Out
	defer func() { ios.Out = out }()
	for round := 1; ; round++ {
		var b bytes.Buffer
		ios.Out = &b
		err := render()
		ios.Out = out
		skip := false
		if err != nil && !errors.Is(err, errSilent) { // check's findings are output, not an end
			if round == 1 {
				return err
			}
			w := io.Writer(&b)
			if !ios.IsStdoutTTY() {
				w, skip = ios.ErrOut, true
			}
			printError(w, err) // one line, its control characters escaped
		}
		switch {
		case skip:
		case ios.IsStdoutTTY():
			text := strings.ReplaceAll(strings.TrimSuffix(b.String(), "\n"), "\n", "\x1b[K\n")
			fmt.Fprintf(out, "\x1b[H%s\x1b[K\n\x1b[J", text)
		default:
			if round > 1 {
				fmt.Fprintln(out)
			}
			_, _ = out.Write(b.Bytes())
		}
		if watchRounds > 0 && round >= watchRounds {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
	}
}
