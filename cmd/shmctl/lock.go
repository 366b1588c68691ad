package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// minTTL is the shortest lease shmctl lock accepts: renewed every third of
// it, which a process descheduled for a few milliseconds must still meet.
const minTTL = 30 * time.Millisecond

// Exit statuses of shmctl lock besides the command's own; the 126, 127
// and 128+N of sh(1), so a script reads them as it reads a shell's.
const (
	// exitConflict is the default status when the lock is taken (-n) or
	// the wait timed out (-w): EX_TEMPFAIL of sysexits.h, the status of
	// BSD lockf(1) for the same case. flock(1)'s default, 1, is what most
	// commands return for their own failures, so a script could not tell
	// "not run" from "ran and failed".
	exitConflict    = 75
	exitNotRunnable = 126 // the command was found but could not be run
	exitCannotRun   = 127 // the command was not found, as in sh(1)
	exitSignalled   = 128 // plus the signal that killed the command or ended the wait
)

// The environment of the command shmctl lock runs.
const (
	envVersion   = "SHMLOCK_VERSION"   // the hold's fencing version
	envReclaimed = "SHMLOCK_RECLAIMED" // 1: an earlier hold ended without its release
	envSegment   = "SHMLOCK_SEGMENT"   // the segment's path (with --etcd: SHMLOCK_ETCD, the endpoints)
	envResource  = "SHMLOCK_RESOURCE"  // the resource
)

type lockOptions struct {
	IO *IOStreams

	Segment  string
	Group    bool // --group: the segment is shared with a group (shm.Options.GroupAccess)
	Resource string
	Owner    string
	Mode     string // --mode, or "shared"/"exclusive" from -s/-x
	TTL      time.Duration
	// Timeout bounds the wait (-w); Block is false for -n or -w 0.
	Timeout time.Duration
	Block   bool
	// ConflictExit is the exit status when the lock is taken or the wait
	// timed out (-E).
	ConflictExit int
	// HoldFor keeps the hold for the process with this pid after shmctl
	// exits, instead of running a command.
	HoldFor int
	Verbose bool
	Command []string
	// Etcd, when on, names the lock table in etcd that replaces the
	// segment.
	Etcd etcdOptions
}

// lockFlags are the flags of shmctl lock that flock(1) also has, kept
// apart to check how they combine.
type lockFlags struct {
	shared, exclusive, nonblock, noFork, unlock, close bool
	timeout                                            secondsValue
	shell                                              string
}

func newCmdLock(ios *IOStreams, runF func(*lockOptions) error) *cobra.Command {
	opts := &lockOptions{IO: ios, ConflictExit: exitConflict}
	var fl lockFlags
	var timeout time.Duration
	fl.timeout = secondsValue{d: &timeout}
	cmd := &cobra.Command{
		Use:   "lock [flags] <segment> <resource> [--] <command> [args...]\n  shmctl lock --etcd HOST:PORT[,...] [flags] <resource> [--] <command> [args...]",
		Short: "Run a command while holding a named resource lock (a flock(1) replacement)",
		Long: `Take the named resource lock, run the command, and release the lock when the
command exits; the command's exit status becomes shmctl's. The options are
flock(1)'s: shmctl lock waits for the lock unless -n or -w says otherwise,
-s takes it shared, -c runs a shell command. The segment is created (0600,
or 0660 with --group) if it does not exist. The command inherits shmctl's
working directory, standard streams and other open descriptors (a
script's exec 3>>log), as under flock(1); the lock is none of them.

The command's environment has SHMLOCK_VERSION, the hold's fencing version
(it grows with every grant: pass it to what the lock protects to refuse
writes from an older holder), SHMLOCK_RECLAIMED=1 if an earlier hold ended
without its release (its process died or its lease lapsed) and the data
may be half-updated, else 0, and SHMLOCK_SEGMENT and SHMLOCK_RESOURCE. A
command that exits 0 after SHMLOCK_RECLAIMED=1 has repaired the data, as far
as shmctl can know: the resource is marked consistent again, and the next
holders are no longer told.

The lock is never free while the command, or any process it started, runs:
the command runs under a guard process, shmctl's child, which the hold
records with shmctl. If shmctl dies (even by kill -9), the guard kills the
command's whole subtree, the processes it left behind included, and exits
only once none of them lives; the hold is reclaimed as a dead holder's only
then. When the command exits, the processes it leaves running in the
background are left alone and do not keep the lock (flock(1)'s inherited
descriptor does). If the guard itself is killed (kill -9, the OOM killer),
shmctl kills the command's subtree before it releases the lock; only shmctl
and the guard killed together let those processes outlive the hold. The
signals SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to shmctl are passed on to
the command; a SIGHUP or SIGINT that was ignored when shmctl started
(nohup's SIGHUP, a background job's SIGINT) stays ignored, for the command
too, but an ignored SIGTERM or SIGQUIT does not, unlike under flock(1):
Go's runtime takes them over before shmctl can see that they were
ignored, and the command gets them at their default action. A ^C or ^\
typed at the terminal, or any of them sent to shmctl's process group (kill
-TERM -PGID, timeout(1), a service manager's stop), reaches the command
once: the command is in the group and has its own copy. One sent to shmctl
alone reaches the command a quarter of a second later (shmctl's guard
waits that long for a copy of its own, which would say the signal went to
the group).

--hold-for PID holds the lock for another process, typically a shell, for
a block of a script: shmctl takes the lock, ties it to that process and
exits, printing SHMLOCK_VERSION=N and SHMLOCK_RECLAIMED=0|1 lines; 'shmctl
unlock SEGMENT RESOURCE --hold-for PID' releases it, and so does the
process's end (a waiter takes over the hold of a dead process within a tenth
of a second).

With --etcd (or SHMLOCK_ETCD set), the lock lives in etcd, shared by
every host that reaches it, and no segment is named: the same flags, exit
statuses and environment apply, with SHMLOCK_ETCD in place of
SHMLOCK_SEGMENT. The hold is kept by shmctl's etcd session: if shmctl dies,
it ends when the session's lease lapses, within 10 seconds, while the guard
kills the command's subtree at once; a process of it outlives the hold only
if it cannot be killed in those seconds (one stuck in the kernel). --ttl is at least 1s there (etcd's leases count whole
seconds), and --hold-for is not available: the session ends with shmctl.

Exit status: the command's; 75 (-E) if the lock was taken (-n) or the wait
timed out (-w), the command not run; 128+N if signal N ended the wait or
killed the command (for SIGINT, shmctl then dies of SIGINT itself, once the
lock is released, as flock(1) does on Ctrl-C: a shell reports 130, and
stops its script); 126 if the command could not be run (a script without
a #! line runs with /bin/sh, as under flock(1)), 127 if it was not found;
2 for a usage error; 1 if shmctl failed otherwise (a message says why), or
if the hold was lost while the command ran (its lease lapsed) and the
command exited 0.`,
		Example: `  shmctl lock jobs backup tar czf /backup/home.tgz /home
  shmctl lock -n jobs deploy -- ./deploy.sh || echo "a deploy is running"
  shmctl lock -w 30 -E 3 jobs deploy -c 'make deploy'
  shmctl lock -s jobs report ./append-report.sh
  shmctl lock --etcd 10.0.0.1:2379,10.0.0.2:2379 deploy -- ./deploy.sh

  # a block of a script, released by the unlock or by the shell's end
  out=$(shmctl lock --hold-for $$ jobs deploy) || exit; eval "$out"
  ...
  shmctl unlock jobs deploy --hold-for $$`,
		Args: cobra.ArbitraryArgs, // split by lockArgs
		RunE: func(cmd *cobra.Command, args []string) error {
			want := func() int {
				if opts.Etcd.on() {
					return 1 // no segment
				}
				return 2
			}
			pos, command, err := lockArgs(cmd, args, want)
			if err != nil {
				return err
			}
			if help, _ := cmd.Flags().GetBool("help"); help {
				return cmd.Help()
			}
			switch {
			case want() == 1 && len(pos) == 1:
				opts.Resource = pos[0]
			case want() == 1:
				return newUsageError(cmd, "lock --etcd takes a resource, then the command")
			case len(pos) != 2:
				return newUsageError(cmd, "lock takes a segment and a resource, then the command")
			default:
				opts.Segment, opts.Resource = pos[0], pos[1]
			}
			opts.Command = command
			opts.Group = groupFlag(cmd)
			opts.Timeout = timeout
			if err := opts.resolve(cmd, &fl); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runLock(opts)
		},
	}
	cmd.Flags().SetInterspersed(false) // see lockArgs
	f := cmd.Flags()
	f.BoolVarP(&fl.shared, "shared", "s", false, "take the lock shared (--mode collaborative)")
	f.BoolVarP(&fl.exclusive, "exclusive", "x", false, "take the lock exclusive (the default)")
	f.BoolVarP(&fl.exclusive, "exclusive-e", "e", false, "same as -x, as in flock(1)")
	f.BoolVarP(&fl.nonblock, "nonblock", "n", false, "fail at once (status -E) if the lock is taken")
	f.BoolVar(&fl.nonblock, "nb", false, "same as --nonblock, as in flock(1)")
	f.VarP(fl.timeout, "timeout", "w", "wait at most this long (status -E): seconds (2.5) or a duration (250ms)")
	f.Var(fl.timeout, "wait", "same as --timeout")
	f.IntVarP(&opts.ConflictExit, "conflict-exit-code", "E", exitConflict, "exit status when the lock is taken (-n) or the wait timed out (-w), 0-255")
	f.StringVarP(&fl.shell, "command", "c", "", "run this command with $SHELL -c (or /bin/sh -c), as in flock(1)")
	f.BoolVarP(&fl.close, "close", "o", false, "accepted for flock(1): the command's children never keep shmctl's lock")
	f.BoolVarP(&fl.noFork, "no-fork", "F", false, "not supported: shmctl must outlive the command to release the lock")
	f.BoolVarP(&fl.unlock, "unlock", "u", false, "not supported: use 'shmctl unlock SEGMENT RESOURCE --hold-for PID'")
	f.BoolVar(&opts.Verbose, "verbose", false, "say on stderr how long the wait took and the hold's version")
	f.StringVar(&opts.Mode, "mode", "", "exclusive, or collaborative (shared)")
	f.StringVar(&opts.Owner, "owner", "", `owner name of the hold (default "shmctl-PID", or "hold-PID-START" with --hold-for)`)
	f.DurationVar(&opts.TTL, "ttl", 0, "lease of the hold, renewed while the command runs (0: none)")
	f.IntVar(&opts.HoldFor, "hold-for", 0, "hold the lock for process PID (a shell: $$) until 'shmctl unlock' or its end; no command")
	addEtcdFlags(cmd, &opts.Etcd)
	for _, name := range []string{"exclusive-e", "nb", "close", "no-fork", "unlock"} {
		_ = f.MarkHidden(name)
	}
	return cmd
}

// lockArgs splits shmctl lock's arguments into the segment and resource
// (want of them: the resource alone with --etcd) and the command. Like
// flock(1), shmctl stops taking flags at the command (cobra stops at the
// first argument: SetInterspersed(false)), so that "shmctl lock jobs r ls
// -l" runs ls -l; flags may stand before, between and after the segment
// and the resource, and "--" ends them.
func lockArgs(cmd *cobra.Command, args []string, want func() int) (pos, command []string, err error) {
	fs := cmd.Flags()
	dashed := cmd.ArgsLenAtDash() == 0
	rest := args
	parse := func() error {
		if dashed || len(rest) == 0 || !strings.HasPrefix(rest[0], "-") {
			return nil
		}
		before := len(rest)
		if err := fs.Parse(rest); err != nil {
			return cmd.FlagErrorFunc()(cmd, err)
		}
		rest = fs.Args()
		used := before - len(rest)
		dashed = used > 0 && args[len(args)-len(rest)-1] == "--"
		return nil
	}
	for len(pos) < want() {
		if err := parse(); err != nil {
			return nil, nil, err
		}
		if len(pos) >= want() {
			break // the flags just parsed asked for fewer (--etcd)
		}
		if len(rest) == 0 {
			return pos, nil, nil
		}
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	if err := parse(); err != nil {
		return nil, nil, err
	}
	if len(rest) == 0 {
		return pos, nil, nil
	}
	return pos, rest, nil
}

// resolve checks how the flags combine and fills in what they imply.
func (o *lockOptions) resolve(cmd *cobra.Command, fl *lockFlags) error {
	switch {
	case fl.noFork:
		return newUsageError(cmd, "-F/--no-fork is not supported: shmctl releases the lock when the command exits, so it cannot exec the command in its place")
	case fl.unlock:
		return newUsageError(cmd, "-u/--unlock is not supported: release a --hold-for hold with 'shmctl unlock SEGMENT RESOURCE --hold-for PID'")
	case fl.shared && fl.exclusive:
		return newUsageError(cmd, "-s/--shared and -x/--exclusive exclude each other")
	case fl.nonblock && cmd.Flags().Changed("timeout") || fl.nonblock && cmd.Flags().Changed("wait"):
		return newUsageError(cmd, "-n/--nonblock and -w/--timeout exclude each other")
	case o.ConflictExit < 0 || o.ConflictExit > 255:
		return newUsageError(cmd, "-E/--conflict-exit-code: %d is not an exit status, 0-255", o.ConflictExit)
	case o.TTL < 0:
		return newUsageError(cmd, "--ttl must not be negative")
	case o.Etcd.on() && o.HoldFor != 0:
		return newUsageError(cmd, "--hold-for is not available with --etcd: the hold lives on shmctl's etcd session, which ends with shmctl")
	case o.Etcd.on() && o.TTL != 0 && o.TTL < etcdlock.MinTTL:
		return newUsageError(cmd, "--ttl must be 0 (no lease) or at least %v with --etcd (etcd's leases count whole seconds), got %v", etcdlock.MinTTL, o.TTL)
	case o.TTL != 0 && o.TTL < minTTL:
		// The hold is renewed every TTL/3: a shorter lease would lapse
		// between renewals on a busy machine.
		return newUsageError(cmd, "--ttl must be 0 (no lease) or at least %v, got %v", minTTL, o.TTL)
	}
	mode := strings.ToLower(o.Mode)
	switch {
	case fl.shared && mode != "" && mode != "shared" && mode != "collaborative",
		fl.exclusive && mode != "" && mode != "exclusive":
		return newUsageError(cmd, "--mode %s contradicts -s/-x", o.Mode)
	case fl.shared:
		mode = "collaborative"
	case mode == "" || fl.exclusive:
		mode = "exclusive"
	case mode == "shared":
		mode = "collaborative"
	}
	if _, err := lockmgr.ParseMode(mode); err != nil {
		return newUsageError(cmd, "--mode: %q is not exclusive, collaborative or shared", o.Mode)
	}
	o.Mode = mode
	// The names are arguments: a bad one is a usage error (status 2),
	// found before any segment is opened.
	if err := lockmgr.CheckResource(o.Resource); err != nil {
		return newUsageError(cmd, "resource %q: %v", o.Resource, err)
	}
	if cmd.Flags().Changed("owner") { // --owner "" too: not the default owner
		if err := lockmgr.CheckOwner(o.Owner); err != nil {
			return newUsageError(cmd, "--owner %q: %v", o.Owner, err)
		}
	}
	// Like flock(1): wait for ever unless -n, or -w says how long; -w 0
	// does not wait.
	waitSet := cmd.Flags().Changed("timeout") || cmd.Flags().Changed("wait")
	o.Block = !fl.nonblock && (!waitSet || o.Timeout > 0)

	if cmd.Flags().Changed("command") { // -c "" too: a script's empty variable, not no -c
		if fl.shell == "" {
			return newUsageError(cmd, "-c: the command is empty")
		}
		if len(o.Command) > 0 {
			return newUsageError(cmd, "-c takes the whole command as one argument; got more after it: %q", o.Command)
		}
		shell := os.Getenv("SHELL")
		if shell == "" {
			shell = "/bin/sh"
		}
		o.Command = []string{shell, "-c", fl.shell}
	}
	switch {
	case o.HoldFor < 0:
		return newUsageError(cmd, "--hold-for: %d is not a process id", o.HoldFor)
	case o.HoldFor > 0 && len(o.Command) > 0:
		return newUsageError(cmd, "--hold-for runs no command: the lock is held until 'shmctl unlock' or the end of process %d", o.HoldFor)
	case o.HoldFor > 0 && o.TTL > 0:
		return newUsageError(cmd, "--hold-for and --ttl exclude each other: nothing would renew the lease after shmctl exits")
	case o.HoldFor == 0 && len(o.Command) == 0:
		return newUsageError(cmd, "lock takes a command to run (or -c 'command', or --hold-for PID)")
	}
	if o.Owner == "" && o.HoldFor == 0 {
		o.Owner = "shmctl-" + strconv.Itoa(os.Getpid())
	}
	return nil
}

// secondsValue is a wait as flock(1) writes it, in seconds with an
// optional fraction (2, 0.5), or as a Go duration (250ms, 1m30s).
type secondsValue struct{ d *time.Duration }

func (v secondsValue) String() string {
	if v.d == nil || *v.d == 0 {
		return "0"
	}
	return v.d.String()
}

func (v secondsValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(f) || math.IsInf(f, 0) || f*float64(time.Second) > math.MaxInt64 {
			return fmt.Errorf("bad wait %q", s)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 {
		return fmt.Errorf("negative wait %q", s)
	}
	*v.d = d
	return nil
}

func (v secondsValue) Type() string { return "seconds" }

var _ pflag.Value = secondsValue{}
