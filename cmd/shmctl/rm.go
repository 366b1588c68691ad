package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/shm"
)

type rmOptions struct {
	IO *IOStreams

	Segments []string
	Force    bool
}

func newCmdRm(ios *IOStreams, runF func(*rmOptions) error) *cobra.Command {
	opts := &rmOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "rm <segment>...",
		Short: "Remove segments",
		Long: `Remove each segment file. A file that is not a shmlock segment (no magic,
not a regular file, a symbolic link) is refused and left alone.

Another user's segment is refused: its owner removes it, or root with
--force. A segment in use is refused too, with what was found, unless
--force: one that other processes have mapped or open (as their
/proc/PID/maps and /proc/PID/fd show, for the processes this user may see),
and one where a live process holds a lock (an owner slot, an upgrade mutex,
a lock-manager resource, a transaction or a transaction space), or a
token-mode slot is held (its holder cannot be known). The file is removed
only if it is still the one checked, and nobody has mapped or opened it by
the time its name is gone (rm moves the name aside, where nobody can open
it, and looks again). Processes that have a removed segment mapped keep
using it until they close it, but nobody else can join them.

A remover killed between moving the name aside and removing the file
(another rm, a program's shm.Remove, libshmlock's shmlock_remove) leaves it
under a hidden name in the segment's directory, .shmlock-rm-PID-...-NAME,
where it is neither freed nor found. rm finishes first: once that remover
is dead, such a file of the segment that nobody has mapped or open is
removed, and one in use is put back under its name (unless the name is
taken), and then checked as any other. Each is reported on stderr; a live
remover's, another user's and a file that is no segment are left alone.

Likewise for a creator killed before its segment got its name, on a file
system without O_TMPFILE: the file it was making, .shmlock-init-PID-...
in the directory, is removed once that creator is dead (its pid and start
time say so) and nobody has it mapped or open; a live creator's is left.

A hidden name also says the PID namespace of its remover or creator (the
name says nsN, the messages pid:[N]). The pid of a process of another one
(a container that shares the directory) means another process here, or
none: an rm or reclaim run in its namespace judges it, and so does one run
on its host (or in any namespace above the container's), which sees the
container's processes and finds it by its pid there. Run in the initial
PID namespace (a host's that is no container), rm and reclaim also know
that process dead when its namespace has no process left: a container that
starts again has a new namespace. Anywhere else the file is left alone,
said so: run rm or reclaim on the host. Where they cannot judge there
either (the host's /proc is mounted with hidepid, or hides processes from
this user), once no process of the old namespace is left (lsns -t pid, run
on the host, lists those that have some), the file is the operator's to
remove by hand if nobody has it mapped or open (fuser, on the host), or, a
removed segment in use, to put back under its name.

Each failure is reported on its own line; the others are still removed.`,
		Example: `  shmctl rm jobs
  shmctl rm /dev/shm/a /dev/shm/b
  shmctl rm --force jobs   # even while in use`,
		Args: minArgs(1, "at least one segment"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Segments = args
			if runF != nil {
				return runF(opts)
			}
			return runRm(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Force, "force", false, "remove a segment even while it is in use or another user's")
	return cmd
}

func runRm(opts *rmOptions) error {
	if len(opts.Segments) == 1 {
		return removeSegment(opts.IO, opts.Segments[0], opts.Force)
	}
	failed := false
	for _, s := range opts.Segments {
		if err := removeSegment(opts.IO, s, opts.Force); err != nil {
			printError(opts.IO.ErrOut, err)
			failed = true
		}
	}
	if failed {
		return errSilent
	}
	return nil
}

// removeSegment removes the segment at path unless it is in use (see
// segmentUsers), or force, once it has finished with the leftovers of
// killed removers of the segment (said on stderr). The segment is gone
// without an error if one of those was it.
func removeSegment(ios *IOStreams, path string, force bool) error {
	leftovers, err := leftoversOf(path, false)
	if err != nil {
		return err
	}
	printLeftovers(ios.ErrOut, leftovers)
	// A pending file removed was never the segment: its name still says
	// whether the segment is there.
	removed := slices.ContainsFunc(leftovers, func(l reclaimLeftoverJSON) bool {
		return l.Action == string(shm.LeftoverRemoved) && !l.pending
	})
	gone := func(err error) error {
		if removed && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if force {
		return gone(forceRemoveRefused(path, shm.Remove(path)))
	}
	users, fi, err := segmentUsers(path)
	if err != nil {
		return gone(err)
	}
	// Another user's segment is theirs to remove whether or not it is in
	// use: only they, or root (with --force, which skips these checks), may.
	if uid, foreign := foreignOwner(fi); foreign {
		inUse := ""
		if len(users) > 0 {
			inUse = " and in use (" + strings.Join(users, "; ") + ")"
		}
		return fmt.Errorf("%w: %s is owned by another user (uid %d)%s: run rm as that user, or as root with --force (which removes it even while in use)", errRefused, path, uid, inUse)
	}
	if len(users) > 0 {
		return fmt.Errorf("%w: %s is in use: %s (--force removes it all the same)", errRefused, path, strings.Join(users, "; "))
	}
	testHookAfterCheck()
	// Once the name is moved aside nobody can open the file any more: a
	// process that opened or mapped it since the check above is found
	// there, and the name goes back.
	return shm.RemoveUnused(path, fi, func(string) error {
		users, err := processUsers(fi)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return fmt.Errorf("%w: %s came into use while rm looked: %s (--force removes it all the same)", errRefused, path, strings.Join(users, "; "))
		}
		return nil
	})
}

// forceRemoveRefused is err, the outcome of rm --force's removal of path,
// said as the refusal it is where the kernel refused this user another
// user's segment: in a sticky directory (/dev/shm) only the file's owner
// or root may unlink it, and the bare "permission denied" (of the open, for
// a private file) or "operation not permitted" (of the move aside) did not
// say why.
func forceRemoveRefused(path string, err error) error {
	if !errors.Is(err, fs.ErrPermission) {
		return err
	}
	fi, lerr := os.Lstat(path)
	if lerr != nil {
		return err
	}
	if uid, foreign := foreignOwner(fi); foreign {
		return fmt.Errorf("%w: %s is owned by another user (uid %d): only that user or root may remove it (%w)", errRefused, path, uid, err)
	}
	return err
}

// testHookAfterCheck runs in rm between finding a segment unused and
// removing it; tests replace it to put another file there.
var testHookAfterCheck = func() {}
