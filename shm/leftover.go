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
//	.shmlock-rm-<pid>-<start>-<nonce>-<name>
//	.shmlock-rm-<pid>-<start>-<nonce>#<digest>
//
// pid and start, in decimal, are the remover's identity: its pid and its
// start time in clock ticks since boot, the low proc.StartBits bits of it
// (internal/proc; no later process with that pid has that start time).
// nonce, in hexadecimal, tells apart the names one process makes. name is
// the base name the segment had. Where the whole would be longer than
// NAME_MAX, the name is replaced by '#' and its digest, the 64-bit FNV-1a
// hash of the name in 16 hexadecimal digits: RecoverLeftoversOf, told the
// name, still finds such a leftover. libshmlock makes the same names.
const (
	asidePrefix      = ".shmlock-rm-"
	nameMax          = 255 // NAME_MAX: the longest file name of Linux file systems
	digestDigits     = 16  // hexadecimal digits of a name's digest
	maxAsideAttempts = 10  // names tried when the one made is taken
)

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
func asideName(remover proc.Identity, o origin, nonce uint64, digest bool) string {
	head := asidePrefix + strconv.FormatUint(uint64(remover.PID), 10) + "-" +
		strconv.FormatUint(remover.StartTicks&proc.MaxStart, 10) + "-" + strconv.FormatUint(nonce, 16)
	if whole := head + "-" + o.name; !digest && o.name != "" && len(whole) <= nameMax {
		return whole
	}
	return fmt.Sprintf("%s#%0*x", head, digestDigits, o.digest)
}

// parseAside reads a hidden name that asideName made: the remover and the
// origin. ok is false for any other name.
func parseAside(base string) (remover proc.Identity, o origin, ok bool) {
	rest, ok := strings.CutPrefix(base, asidePrefix)
	if !ok {
		return remover, o, false
	}
	pidText, rest, ok1 := strings.Cut(rest, "-")
	startText, rest, ok2 := strings.Cut(rest, "-")
	i := strings.IndexAny(rest, "-#")
	if !ok1 || !ok2 || i < 1 {
		return remover, o, false
	}
	pid, err1 := strconv.ParseUint(pidText, 10, 32)
	start, err2 := strconv.ParseUint(startText, 10, 64)
	_, err3 := strconv.ParseUint(rest[:i], 16, 64)
	if err1 != nil || err2 != nil || err3 != nil || pid == 0 || pid > proc.MaxPID || start > proc.MaxStart {
		return remover, o, false
	}
	remover = proc.Identity{PID: uint32(pid), StartTicks: start}
	tail := rest[i+1:]
	if rest[i] == '-' {
		return remover, originOf(tail), tail != ""
	}
	d, err := strconv.ParseUint(tail, 16, 64)
	return remover, origin{digest: d}, err == nil && len(tail) == digestDigits
}

// moveAside moves path to a new hidden name in its directory that names
// this process and o, and returns that name.
func moveAside(path string, o origin) (string, error) {
	self := proc.Self()
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
// <start>-<nonce> (see internal/fsys), and links it under the segment's
// name when complete; one killed in between leaves that file, which no
// name of a segment ever reaches. A recovery killed while it removed such
// a file leaves it under a remover's hidden name that keeps the pending
// name: a pending file too, whose Remover is that recovery.
type Leftover struct {
	Path string // its hidden path
	// Name is the path it was removed from: "" if its hidden name keeps
	// only the digest of a long name, unless RecoverLeftoversOf was given
	// that name; "" for a pending file, which never had one.
	Name    string
	Remover uint64 // the packed identity (see package proc) of the process that moved it aside, or that was creating a pending file
	Pending bool   // a creator's pending file, not a removed segment
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
// kept (ErrCreatorAlive): it is being made. One that a recovery moved
// aside is removed likewise once that recovery is dead (ErrRemoverAlive
// before), never put back.
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
// which segment it was to become), moved aside or not.
func RecoverLeftoversOf(path string, dryRun bool) ([]Leftover, error) {
	path, err := ResolvePath(path)
	if err != nil {
		return nil, err
	}
	return recoverLeftovers(filepath.Dir(path), filepath.Base(path), dryRun)
}

func recoverLeftovers(dir, name string, dryRun bool) ([]Leftover, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	found := []Leftover{}
	for _, e := range entries {
		if creator, ok := fsys.ParsePendingName(e.Name()); ok {
			// A live creator's file is no leftover, and may be another
			// segment's in the making: only a look at the whole directory
			// reports it.
			if name == "" || !proc.Alive(creator) {
				found = append(found, recoverPending(filepath.Join(dir, e.Name()), creator, ErrCreatorAlive, originOf(e.Name()), dryRun))
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
			if name == "" || !proc.Alive(remover) {
				found = append(found, recoverPending(filepath.Join(dir, e.Name()), remover, ErrRemoverAlive, o, dryRun))
			}
			continue
		}
		if name != "" && !o.is(name) {
			continue
		}
		if name != "" {
			o.name = name
		}
		found = append(found, recoverLeftover(filepath.Join(dir, e.Name()), remover, o, dryRun))
	}
	return found, nil
}

// recoverLeftover does what RecoverLeftovers does with the leftover at
// path, which remover moved aside from o.
func recoverLeftover(path string, remover proc.Identity, o origin, dryRun bool) Leftover {
	l := Leftover{Path: path, Remover: remover.Pack(), Action: LeftoverKept}
	if o.name != "" {
		l.Name = filepath.Join(filepath.Dir(path), o.name)
	}
	if proc.Alive(remover) {
		l.Err = fmt.Errorf("%w (process %d)", ErrRemoverAlive, remover.PID)
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

// recoverPending does what RecoverLeftovers does with a pending file at
// path, which maker made (its creator; or, moved aside on its way to
// removal and not unlinked, the recovery that was killed in between:
// then alive is ErrRemoverAlive, not ErrCreatorAlive). o is the pending
// name, which its own move aside keeps. Its contents are not checked: a
// creator killed early leaves no header, or part of one; and it has no
// segment's name to go back to.
func recoverPending(path string, maker proc.Identity, alive error, o origin, dryRun bool) Leftover {
	l := Leftover{Path: path, Remover: maker.Pack(), Pending: true, Action: LeftoverKept}
	if proc.Alive(maker) {
		l.Err = fmt.Errorf("%w (process %d)", alive, maker.PID)
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
