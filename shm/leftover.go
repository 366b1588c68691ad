package shm

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// Remove moves a segment's name aside before it unlinks the file (see
// unlinkSame). The hidden name says who moved it there and from where, so
// that once that remover is dead another process can finish the job
// (RecoverLeftovers):
//
//	.shmlock-rm-<pid>-<start>-ns<ns>-<nonce>-<name>
//	.shmlock-rm-<pid>-<start>-ns<ns>-<nonce>#<digest>
//
// <pid>-<start>-ns<ns> is the remover (fsys.Maker): its pid, the low
// proc.StartBits bits of its start time in clock ticks since boot (no
// later process with that pid has that start time), and its PID namespace,
// the only one whose processes can tell whether it lives. nonce, in
// hexadecimal, tells apart the names one process makes. name is the base
// name the segment had. Where the whole would be longer than NAME_MAX,
// the name is replaced by '#' and its digest, the 64-bit FNV-1a hash of
// the name in 16 hexadecimal digits: RecoverLeftoversOf, told the name,
// still finds such a leftover. The head before the name is at most 73
// bytes (a pid of 7 digits, a start of 13, a namespace of 20, a nonce of
// 16), so a name of up to 181 bytes is kept whole. libshmlock makes the
// same names. The previous release's names have no -ns<ns> (see
// fsys.Maker): parseAside reads them with no namespace.
const (
	asidePrefix      = ".shmlock-rm-"
	nameMax          = 255 // NAME_MAX: the longest file name of Linux file systems
	digestDigits     = 16  // hexadecimal digits of a name's digest
	maxAsideAttempts = 10  // names tried when the one made is taken
)

// hiddenName reports whether base begins as the hidden names of pending
// files and of removals do: recovery takes a file under such a name for
// a leftover, so no segment may be made under one (Create).
func hiddenName(base string) bool {
	return strings.HasPrefix(base, fsys.PendingPrefix) || strings.HasPrefix(base, asidePrefix)
}

// origin is the name a segment was removed from, as an aside name keeps
// it: the name itself, or only its digest.
type origin struct {
	name   string // "" if only the digest is known
	digest uint64
}

func originOf(name string) origin { return origin{name: name, digest: nameDigest(name)} }

// nameDigest is the FNV-1a hash of a segment's base name.
func nameDigest(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}

// is reports whether the segment came from the base name name.
func (o origin) is(name string) bool {
	if o.name != "" {
		return o.name == name
	}
	return o.digest == nameDigest(name)
}

// asideName formats the hidden name that remover gives the segment from o.
// With digest, or where the name does not fit, it keeps o's digest only.
func asideName(remover fsys.Maker, o origin, nonce uint64, digest bool) string {
	head := asidePrefix + fsys.FormatMaker(remover) + "-" + strconv.FormatUint(nonce, 16)
	if whole := head + "-" + o.name; !digest && o.name != "" && len(whole) <= nameMax {
		return whole
	}
	return fmt.Sprintf("%s#%0*x", head, digestDigits, o.digest)
}

// parseAside reads a hidden name that asideName made: the remover and the
// origin. ok is false for any other name.
func parseAside(base string) (remover fsys.Maker, o origin, ok bool) {
	rest, ok := strings.CutPrefix(base, asidePrefix)
	if !ok {
		return remover, o, false
	}
	remover, rest, ok = fsys.CutMaker(rest)
	i := strings.IndexAny(rest, "-#")
	if !ok || i < 1 {
		return fsys.Maker{}, o, false
	}
	if _, err := strconv.ParseUint(rest[:i], 16, 64); err != nil {
		return fsys.Maker{}, o, false
	}
	tail := rest[i+1:]
	if rest[i] == '-' {
		if tail == "" {
			return fsys.Maker{}, o, false
		}
		return remover, originOf(tail), true
	}
	d, err := strconv.ParseUint(tail, 16, 64)
	if err != nil || len(tail) != digestDigits {
		return fsys.Maker{}, o, false
	}
	return remover, origin{digest: d}, true
}

// moveAside moves path to a new hidden name in its directory that names
// this process and o, and returns that name.
func moveAside(path string, o origin) (string, error) {
	self, err := fsys.SelfMaker()
	if err != nil {
		return "", fmt.Errorf("shm: %w", err)
	}
	digest := false
	for attempt := 0; ; attempt++ {
		aside := filepath.Join(filepath.Dir(path), asideName(self, o, uint64(time.Now().UnixNano()), digest))
		err := fsys.MoveAside(path, aside)
		switch {
		case err == nil:
			return aside, nil
		case errors.Is(err, syscall.ENAMETOOLONG) && !digest:
			digest = true // a file system whose names are shorter than NAME_MAX
		case !errors.Is(err, fs.ErrExist) || attempt == maxAsideAttempts:
			return "", err
		}
	}
}

// LeftoverAction is what RecoverLeftovers did with a leftover or, dry,
// would do.
type LeftoverAction string

// The actions of RecoverLeftovers.
const (
	LeftoverRestored LeftoverAction = "restored" // in use: put back under its name
	LeftoverRemoved  LeftoverAction = "removed"  // unused: removed, as its remover meant to
	LeftoverKept     LeftoverAction = "kept"     // left where it is: Err says why
)

// A Leftover is a segment file that a remover (Remove, RemoveIfSame,
// RemoveUnused, libshmlock's shmlock_remove) moved to a hidden name on its
// way to unlinking it, and did not unlink or put back: it was killed in
// between. The file's memory (on tmpfs) is never freed, and if it was in
// use, its users are cut off from the processes that open its name anew.
//
// Or it is a pending file (Pending): where the file system has no
// O_TMPFILE, a creator (Create, libshmlock's shmlock_create) prepares the
// segment under a hidden name that says who it is, .shmlock-init-<pid>-
// <start>-ns<ns>-<nonce> (see internal/fsys), and links it under the
// segment's name when complete; one killed in between leaves that file,
// which no name of a segment ever reaches. A recovery killed while it removed such
// a file leaves it under a remover's hidden name that keeps the pending
// name: a pending file too, whose Remover is that recovery.
type Leftover struct {
	Path string // its hidden path
	// Name is the path it was removed from: "" if its hidden name keeps
	// only the digest of a long name, unless RecoverLeftoversOf was given
	// that name; "" for a pending file, which never had one.
	Name    string
	Remover uint64 // the packed identity (see package proc) of the process that moved it aside, or that was creating a pending file
	// PIDNamespace is the inode of Remover's PID namespace, in which alone
	// its pid means it: 0 where the hidden name is the previous release's,
	// which does not say.
	PIDNamespace uint64
	Pending      bool // a creator's pending file, not a removed segment
	// Users are the processes that have it mapped or open (this one: open),
	// as far as /proc shows this user (another user's processes may be
	// missing).
	Users  []int
	Action LeftoverAction
	Err    error // why it was kept; nil for the other actions
}

// RecoverLeftovers finds the leftovers of removers in dir (see Leftover)
// and finishes what each remover began, unless dryRun:
//
//   - a leftover whose remover still runs is kept (ErrRemoverAlive): it
//     may be in the middle of its removal;
//   - one whose remover is a process of another PID namespace that this
//     process cannot judge is kept (ErrForeignNamespace): there its pid
//     names another process or none, and only its own namespace's /proc,
//     or an ancestor's, shows it and who has the file open. A remover of
//     a descendant namespace (a container's, seen from its host) is
//     judged as one of this namespace, by its pid in its own; and from
//     the initial namespace, one of a namespace with no process left is
//     dead (see proc.PIDNamespaces; a name of the previous release,
//     which does not say the namespace, is judged here);
//   - one that is not a regular file of this user with a segment's header
//     is kept: a symlink (not followed), a FIFO or a device (not opened,
//     see Open), a file of another user, a file of other contents;
//   - one no process has mapped or open is removed, if the hidden name
//     still names the file examined (as RemoveUnused removes, looking for
//     users again once the name is aside);
//   - one in use is put back under its name, never replacing what has that
//     name by now (then it is kept, ErrExists), nor when its hidden name
//     keeps only the digest of a long name (ErrNameNotKept; RecoverLeftoversOf,
//     given the name, puts it back).
//
// And a pending file (see Leftover) is removed once its creator is dead,
// if nobody has it mapped or open (who could, is a process that inherited
// its descriptor: then it is kept, ErrLeftoverInUse); a live creator's is
// kept (ErrCreatorAlive): it is being made; and so is one whose creator is
// of another PID namespace that this process cannot judge
// (ErrForeignNamespace), as for a remover. One that a recovery
// moved aside is removed likewise once that recovery is dead
// (ErrRemoverAlive or ErrForeignNamespace before), never put back.
//
// It reports every leftover it found, in the order of their hidden names;
// the error is for dir itself.
func RecoverLeftovers(dir string, dryRun bool) ([]Leftover, error) {
	return recoverLeftovers(dir, "", dryRun)
}

// RecoverLeftoversOf is RecoverLeftovers for the leftovers that came from
// the segment path (see ResolvePath), once or several times: those in its
// directory whose hidden name keeps path's base name or its digest, and
// every pending file there whose creator is dead (its name does not say
// which segment it was to become), moved aside or not: not those of a
// creator of another PID namespace that cannot be judged, which may be
// alive.
func RecoverLeftoversOf(path string, dryRun bool) ([]Leftover, error) {
	path, err := ResolvePath(path)
	if err != nil {
		return nil, err
	}
	return recoverLeftovers(filepath.Dir(path), filepath.Base(path), dryRun)
}

func recoverLeftovers(dir, name string, dryRun bool) ([]Leftover, error) {
	ns, err := proc.PIDNamespace()
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	// Scanned once a name of another namespace asks, after the directory
	// was read: every maker that a name here says was started before.
	j := &makerJudge{ns: ns, scan: sync.OnceValue(proc.ScanPIDNamespaces)}
	found := []Leftover{}
	for _, e := range entries {
		if creator, ok := fsys.ParsePendingName(e.Name()); ok {
			// A live creator's file is no leftover, and may be another
			// segment's in the making: only a look at the whole directory
			// reports it; so is one whose creator cannot be judged, which
			// may be.
			if name == "" || j.lives(creator, ErrCreatorAlive) == nil {
				found = append(found, recoverPending(filepath.Join(dir, e.Name()), creator, j, ErrCreatorAlive, originOf(e.Name()), dryRun))
			}
			continue
		}
		remover, o, ok := parseAside(e.Name())
		if !ok {
			continue
		}
		if _, pending := fsys.ParsePendingName(o.name); pending {
			// A pending file that a recovery moved aside on its way to
			// removing it, and was killed before the unlink: it is
			// finished as the pending file it is, whatever segment is
			// asked for (it was to become none that is known); a live
			// recovery's is listed only by a look at the whole directory,
			// as a live creator's.
			if name == "" || j.lives(remover, ErrRemoverAlive) == nil {
				found = append(found, recoverPending(filepath.Join(dir, e.Name()), remover, j, ErrRemoverAlive, o, dryRun))
			}
			continue
		}
		if name != "" && !o.is(name) {
			continue
		}
		if name != "" {
			o.name = name
		}
		found = append(found, recoverLeftover(filepath.Join(dir, e.Name()), remover, j, o, dryRun))
	}
	return found, nil
}

// A makerJudge judges the makers of hidden names (removers, and pending
// files' creators) for a recovery by a process of the PID namespace ns.
type makerJudge struct {
	ns   uint64
	scan func() *proc.PIDNamespaces // of /proc, made once, when a maker of another namespace is judged
}

// lives says whether the maker m of a hidden name may still run: alive,
// wrapped, if it does; ErrForeignNamespace if it is of another namespace
// that this process cannot judge; nil if it is dead.
//
// A maker of another namespace is judged where this one is its ancestor,
// whose /proc shows its processes too, by their pids in their own
// namespace; and from the initial namespace, whose /proc shows every
// process, one of a namespace with no process left is dead
// (proc.PIDNamespaces says when it can be sure). Elsewhere its pid names
// another process here or none, and only a recovery of its own namespace,
// or of an ancestor, can tell: it is ErrForeignNamespace.
//
// A name of the previous release does not say the maker's namespace: it
// is judged here, as that release judged it, which is right wherever the
// directory is not shared across PID namespaces. That is the compatible
// choice: keeping such names instead would keep for good every leftover
// that a killed process of that release left, and the processes of that
// release, which still judge them everywhere, would not keep them anyway.
func (j *makerJudge) lives(m fsys.Maker, alive error) error {
	if m.PIDNamespace == 0 || m.PIDNamespace == j.ns {
		if proc.Alive(m.Identity) {
			return fmt.Errorf("%w (process %d)", alive, m.PID)
		}
		return nil
	}
	running, err := j.scan().Alive(m.PIDNamespace, m.Identity)
	switch {
	case err != nil:
		return fmt.Errorf("%w (process %d of pid:[%d], this is pid:[%d]): %v", ErrForeignNamespace, m.PID, m.PIDNamespace, j.ns, err)
	case running:
		return fmt.Errorf("%w (process %d of pid:[%d], below this namespace)", alive, m.PID, m.PIDNamespace)
	}
	return nil
}

// recoverLeftover does what RecoverLeftovers, judging makers with j,
// does with the leftover at path, which remover moved aside from o.
func recoverLeftover(path string, remover fsys.Maker, j *makerJudge, o origin, dryRun bool) Leftover {
	l := Leftover{Path: path, Remover: remover.Pack(), PIDNamespace: remover.PIDNamespace, Action: LeftoverKept}
	if o.name != "" {
		l.Name = filepath.Join(filepath.Dir(path), o.name)
	}
	if l.Err = j.lives(remover, ErrRemoverAlive); l.Err != nil {
		return l
	}
	fi, err := examineLeftover(path)
	if err != nil {
		l.Err = err
		return l
	}
	if l.Users, err = fileUsers(fi); err != nil {
		l.Err = fmt.Errorf("shm: %s: %w", path, err)
		return l
	}
	if len(l.Users) == 0 {
		l.Action = LeftoverRemoved
		if !dryRun {
			l.Err = unlinkSame(path, o, fi, func(string) error {
				users, err := fileUsers(fi)
				switch {
				case err != nil:
					return fmt.Errorf("shm: %s: %w", path, err)
				case len(users) > 0:
					return fmt.Errorf("%w: %s came into use as it was removed (processes %v)", ErrChanged, path, users)
				}
				return nil
			})
		}
	} else {
		l.Action = LeftoverRestored
		switch {
		case l.Name == "":
			l.Err = fmt.Errorf("%w: %s is in use", ErrNameNotKept, path)
		case dryRun:
			if _, err := os.Lstat(l.Name); err == nil {
				l.Err = fmt.Errorf("%w: %s (and the leftover %s is in use)", ErrExists, l.Name, path)
			}
		default:
			l.Err = restoreLeftover(path, l.Name, fi)
		}
	}
	if l.Err != nil {
		l.Action = LeftoverKept
	}
	return l
}

// recoverPending does what RecoverLeftovers, judging makers with j,
// does with a pending file at path, which maker made (its creator; or,
// moved aside on its way to removal and not unlinked, the recovery that
// was killed in between: then alive is ErrRemoverAlive, not
// ErrCreatorAlive). o is the pending name, which its own move aside
// keeps. Its contents are not checked: a creator killed early leaves no
// header, or part of one; and it has no segment's name to go back to.
func recoverPending(path string, maker fsys.Maker, j *makerJudge, alive error, o origin, dryRun bool) Leftover {
	l := Leftover{Path: path, Remover: maker.Pack(), PIDNamespace: maker.PIDNamespace, Pending: true, Action: LeftoverKept}
	if l.Err = j.lives(maker, alive); l.Err != nil {
		return l
	}
	removePending(&l, o, dryRun)
	return l
}

// removePending removes the pending file at l.Path, whose maker is dead,
// if nobody has it mapped or open, and records in l what it did. o, the
// pending name, is the origin its own move aside keeps, so that a
// recovery killed there leaves a file the next one recognizes.
func removePending(l *Leftover, o origin, dryRun bool) {
	path := l.Path
	f, fi, err := openOwnFile(path)
	if err != nil {
		l.Err = err
		return
	}
	_ = f.Close()
	inUse := func() error {
		users, err := fileUsers(fi)
		switch {
		case err != nil:
			return fmt.Errorf("shm: %s: %w", path, err)
		case len(users) > 0:
			l.Users = users
			return fmt.Errorf("%w: %s (processes %v)", ErrLeftoverInUse, path, users)
		}
		return nil
	}
	if l.Err = inUse(); l.Err != nil {
		return
	}
	l.Users, l.Action = []int{}, LeftoverRemoved
	if !dryRun {
		l.Err = unlinkSame(path, o, fi, func(string) error { return inUse() })
	}
	if l.Err != nil {
		l.Action = LeftoverKept
	}
}

// openOwnFile opens path read-only if it is a regular file of this user
// (never following a symlink, nor opening a FIFO or a device), and returns
// it and what it is.
func openOwnFile(path string) (*os.File, fs.FileInfo, error) {
	f, err := fsys.OpenNoFollow(path, true)
	if err != nil {
		return nil, nil, openError(path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("shm: %w", err)
	}
	if uid, ok := fsys.Owner(fi); !ok || uid != fsys.Euid() {
		_ = f.Close()
		return nil, nil, fmt.Errorf("%w: %s (uid %d)", ErrForeignOwner, path, uid)
	}
	return f, fi, nil
}

// examineLeftover checks the leftover at path as Remove checks a segment,
// and that it is this user's, and returns what it found.
func examineLeftover(path string) (fs.FileInfo, error) {
	f, fi, err := openOwnFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	header := make([]byte, layout.HeaderSize)
	n, _ := f.ReadAt(header, 0)
	// A segment of another format version is a segment all the same.
	if _, err := layout.Validate(header[:n], fi.Size()); err != nil && !errors.Is(err, layout.ErrVersion) {
		return nil, fmt.Errorf("shm: %s: %w", path, err)
	}
	return fi, nil
}

// fileUsers lists the processes that have the file fi mapped or open.
// This process counts if it has the file open: an open Segment has, and a
// closed one, whose mapping stays until it is unreachable, is not in use.
func fileUsers(fi fs.FileInfo) ([]int, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, errors.New("no device and inode")
	}
	dev, ino := uint64(st.Dev), st.Ino
	mapped, opened, err := proc.Users(dev, ino)
	if err != nil {
		return nil, err
	}
	users := append(mapped, opened...)
	if proc.OpenHere(dev, ino) {
		users = append(users, os.Getpid())
	}
	slices.Sort(users)
	return users, nil
}

// restoreLeftover moves the leftover at path, the file fi, back to name,
// unless name is taken.
func restoreLeftover(path, name string, fi fs.FileInfo) error {
	if err := fsys.MoveBack(path, name); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s (and the leftover %s is in use)", ErrExists, name, path)
		}
		return fmt.Errorf("shm: %w", err)
	}
	now, err := os.Lstat(name)
	if err != nil {
		return fmt.Errorf("%w: %s was removed as it was put back", ErrChanged, name)
	}
	if !os.SameFile(now, fi) {
		// Another file took the hidden name after the check: it goes back.
		if err := fsys.MoveBack(name, path); err != nil {
			return fmt.Errorf("%w: %s, and moving it back failed (it is at %s): %v", ErrChanged, path, name, err)
		}
		return fmt.Errorf("%w: %s (nothing put back)", ErrChanged, path)
	}
	return nil
}
