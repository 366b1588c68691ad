package fsys

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/proc"
)

// Pending is a file being prepared before it gets its name.
type Pending struct {
	file    *os.File
	tmpName string // "" for an O_TMPFILE file, which has no name to clean up
}

// CreatePending makes an unnamed file in dir with exactly mode (no umask).
// Where the file system lacks O_TMPFILE it falls back to a hidden name made
// with O_EXCL|O_NOFOLLOW (see PendingName), removed again by Publish or
// Discard.
func CreatePending(dir string, mode os.FileMode) (*Pending, error) {
	err := error(unix.EOPNOTSUPP) // as a file system without O_TMPFILE says
	if !noTmpfile.Load() {
		var fd int
		if fd, err = unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, uint32(mode.Perm())); err == nil {
			return finishPending(fd, "", mode)
		}
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return nil, &fs.PathError{Op: "create", Path: dir, Err: err}
	}
	self, err := SelfMaker()
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		name := filepath.Join(dir, PendingName(self, uint64(time.Now().UnixNano())))
		fd, err := unix.Open(name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_RDWR|unix.O_CLOEXEC, uint32(mode.Perm()))
		if err == nil {
			return finishPending(fd, name, mode)
		}
		if !errors.Is(err, unix.EEXIST) || attempt == 10 {
			return nil, &fs.PathError{Op: "create", Path: name, Err: err}
		}
	}
}

// A Maker is the process a hidden name says made the file: a pending
// file's creator (PendingName), a removed segment's remover (shm). Its pid
// means that process only in its own PID namespace: /dev/shm is often
// shared by processes of several (a host and its containers), and a
// process of another namespace has there a pid that here is absent or
// another process's, and descriptors that this namespace's /proc does not
// show. So the name says which namespace too, and only a process that
// sees that namespace's processes, one of it or of an ancestor (by the
// maker's pid in its own namespace, proc.ScanPIDNamespaces), may judge
// the maker dead.
//
// In a name, a maker is
//
//	<pid>-<start>-ns<ns>
//
// pid and start, in decimal, are its identity: its pid and the low
// proc.StartBits bits of its start time in clock ticks since boot (no
// later process with that pid has that start time); ns, in decimal, is
// the inode of its PID namespace (proc.PIDNamespace). The names of the
// previous release have no -ns<ns>: what follows the start time there
// is a nonce in hexadecimal, which never begins with n, so each name
// reads one way only.
type Maker struct {
	proc.Identity
	// PIDNamespace is the inode of the maker's PID namespace; 0 in a name
	// of the previous release, which does not say.
	PIDNamespace uint64
}

// nsMark begins the namespace of a maker in a name.
const nsMark = "ns"

// SelfMaker is this process as a maker.
func SelfMaker() (Maker, error) {
	ns, err := proc.PIDNamespace()
	if err != nil {
		return Maker{}, err
	}
	return Maker{Identity: proc.Self(), PIDNamespace: ns}, nil
}

// FormatMaker is m as a name says it; the namespace is left out where m
// has none (a name of the previous release, for tests of those).
func FormatMaker(m Maker) string {
	s := strconv.FormatUint(uint64(m.PID), 10) + "-" + strconv.FormatUint(m.StartTicks&proc.MaxStart, 10)
	if m.PIDNamespace != 0 {
		s += "-" + nsMark + strconv.FormatUint(m.PIDNamespace, 10)
	}
	return s
}

// CutMaker reads a maker (FormatMaker) and the dash after it from the
// beginning of s, and returns the rest of s; ok is false if s does not
// begin with one.
func CutMaker(s string) (m Maker, rest string, ok bool) {
	pidText, rest, ok1 := strings.Cut(s, "-")
	startText, rest, ok2 := strings.Cut(rest, "-")
	if !ok1 || !ok2 {
		return m, "", false
	}
	pid, err1 := strconv.ParseUint(pidText, 10, 32)
	start, err2 := strconv.ParseUint(startText, 10, 64)
	if err1 != nil || err2 != nil || pid == 0 || pid > proc.MaxPID || start > proc.MaxStart {
		return m, "", false
	}
	m.Identity = proc.Identity{PID: uint32(pid), StartTicks: start}
	if after, ok := strings.CutPrefix(rest, nsMark); ok {
		nsText, after, ok := strings.Cut(after, "-")
		ns, err := strconv.ParseUint(nsText, 10, 64)
		if !ok || err != nil || ns == 0 {
			return Maker{}, "", false
		}
		m.PIDNamespace, rest = ns, after
	}
	return m, rest, true
}

// A pending file's hidden name, where O_TMPFILE is missing, says who
// made it, so that once its creator is dead (killed between the creation
// and Publish) another process can tell and remove it (shm's
// RecoverLeftovers):
//
//	.shmlock-init-<pid>-<start>-ns<ns>-<nonce>
//
// <pid>-<start>-ns<ns> is the creator (see Maker); nonce, in hexadecimal,
// tells apart the names one process makes. The previous release's
// .shmlock-init-<pid>-<start>-<nonce> does not say the creator's
// namespace, and ParsePendingName reads it with none. An older release's
// .shmlock-init-<pid>-<time> has no start time: its creator cannot be
// proved dead, and ParsePendingName does not read it.
const PendingPrefix = ".shmlock-init-"

// PendingName is the hidden name creator gives a pending file.
func PendingName(creator Maker, nonce uint64) string {
	return PendingPrefix + FormatMaker(creator) + "-" + strconv.FormatUint(nonce, 16)
}

// ParsePendingName reads the creator of a pending file's hidden name
// (PendingName); ok is false for any other name.
func ParsePendingName(base string) (creator Maker, ok bool) {
	rest, ok := strings.CutPrefix(base, PendingPrefix)
	if !ok {
		return creator, false
	}
	creator, nonce, ok := CutMaker(rest)
	if _, err := strconv.ParseUint(nonce, 16, 64); !ok || err != nil {
		return Maker{}, false
	}
	return creator, true
}

// noTmpfile makes CreatePending act as on a file system without
// O_TMPFILE: see SetNoTmpfile.
var noTmpfile atomic.Bool

// SetNoTmpfile makes CreatePending, in this process, fall back to a hidden
// name as on a file system without O_TMPFILE (on), or not; for tests of
// the fallback, which file systems of their own cannot easily provide.
func SetNoTmpfile(on bool) { noTmpfile.Store(on) }

func finishPending(fd int, name string, mode os.FileMode) (*Pending, error) {
	p := &Pending{file: os.NewFile(uintptr(fd), name), tmpName: name}
	if err := unix.Fchmod(fd, uint32(mode.Perm())); err != nil {
		p.Discard()
		return nil, fmt.Errorf("fchmod: %w", err)
	}
	return p, nil
}

// File is the open file, to size and fill before Publish.
func (p *Pending) File() *os.File { return p.file }

// Publish links the file under path. It fails with an error wrapping
// fs.ErrExist if anything (file, directory or symlink) already has that
// name: link(2) never replaces and never follows the new name. The file
// stays open either way.
func (p *Pending) Publish(path string) error {
	var err error
	if p.tmpName == "" {
		procPath := "/proc/self/fd/" + strconv.Itoa(int(p.file.Fd()))
		err = unix.Linkat(unix.AT_FDCWD, procPath, unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	} else {
		err = unix.Link(p.tmpName, path)
		_ = os.Remove(p.tmpName)
		p.tmpName = ""
	}
	if err != nil {
		return &fs.PathError{Op: "link", Path: path, Err: err}
	}
	return nil
}

// Discard closes the file and removes any temporary name.
func (p *Pending) Discard() {
	if p.tmpName != "" {
		_ = os.Remove(p.tmpName)
		p.tmpName = ""
	}
	_ = p.file.Close()
}

// ErrNoReserve is Reserve's error on a file system without fallocate(2).
var ErrNoReserve = errors.New("fallocate is not supported here")

// maxReserveAttempts bounds Reserve's retries of an allocation a signal
// interrupted: one that signals keep interrupting (a periodic timer against
// a very large file) fails with EINTR rather than spin.
const maxReserveAttempts = 16

// Reserve allocates the blocks of the file's first size bytes, extending
// the file to size if it is shorter (fallocate(2) mode 0). A file sized by
// ftruncate alone is sparse: on tmpfs a page gets its memory only when it
// is first touched, and if the file system (or the memory cgroup it is
// charged to) is full by then, that access through a mapping raises
// SIGBUS. Reserved, the file fails here instead, with an error wrapping
// syscall.ENOSPC (or EDQUOT, or ENOMEM).
//
// Blocks already allocated are kept as they are, so reserving a file that
// others use changes none of its bytes. A file whose allocated blocks
// already cover size is left alone after one fstat, rather than walked page
// by page again; on a file system that counts its own metadata in
// st_blocks a small hole may then stay.
func Reserve(f *os.File, size int64) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return os.NewSyscallError("fstat", err)
	}
	if st.Size >= size && st.Blocks*512 >= size { // st_blocks counts 512-byte units
		return nil
	}
	for attempt := 1; ; attempt++ {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR) && attempt < maxReserveAttempts:
			// tmpfs of older kernels stops (and undoes) an allocation
			// when any signal arrives, rather than restart it.
			continue
		case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS):
			return ErrNoReserve
		}
		return os.NewSyscallError("fallocate", err)
	}
}

// ErrNoMoveAside is MoveAside's error on a file system that cannot rename
// without replacing (RENAME_NOREPLACE).
var ErrNoMoveAside = errors.New("rename without replacing is not supported here")

// MoveAside renames path to aside, a new name, usually hidden, in the same
// directory. The rename moves the directory entry itself (a symlink is not
// followed) and never replaces anything: a taken aside fails with an error
// wrapping fs.ErrExist.
func MoveAside(path, aside string) error {
	err := unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, aside, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
		return ErrNoMoveAside
	}
	return &fs.PathError{Op: "rename", Path: path, Err: err}
}

// MoveBack renames aside back to path, unless something has taken path
// meanwhile.
func MoveBack(aside, path string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, aside, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE); err != nil {
		return &fs.PathError{Op: "rename", Path: path, Err: err}
	}
	return nil
}

// ErrNoProcFS is OpenNoFollow's error where /proc is not mounted, or is
// not procfs: the file it checked is reopened through /proc/self/fd. It
// does not wrap ENOENT, so it is not taken for a missing file.
var ErrNoProcFS = errors.New("/proc is not mounted, or is not procfs")

// NotRegularError is OpenNoFollow's error for a path that names something
// other than a regular file or a symlink. Only its type was read: the
// file itself was never opened.
type NotRegularError struct {
	Path string
	Mode fs.FileMode // its type bits
}

func (e *NotRegularError) Error() string { return "open " + e.Path + ": not a regular file" }

// OpenNoFollow opens the regular file at path for reading (and writing
// unless readOnly). It fails with an error wrapping syscall.ELOOP if path
// is a symlink, and with a *NotRegularError for any other type.
//
// Opening a device or a FIFO for real runs its driver's open, which may
// have effects of its own: a tape rewinds, a FIFO's reader sees a writer
// come and go, a terminal may become the caller's controlling terminal.
// So the path is first opened with O_PATH, which runs no driver's open and
// does not follow a symlink with O_NOFOLLOW (it opens the link itself),
// and only a regular file is opened again, through /proc/self/fd/N. That
// is a magic link to the very inode the O_PATH descriptor holds, so no
// file put at path in between can be opened instead; it must be followed
// (O_NOFOLLOW would refuse it, ELOOP). Its open checks the caller's
// permissions on the inode as an open of path does.
func OpenNoFollow(path string, readOnly bool) (*os.File, error) {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	checked := os.NewFile(uintptr(pfd), path)
	defer checked.Close()
	fi, err := checked.Stat()
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, &fs.PathError{Op: "open", Path: path, Err: syscall.ELOOP}
	case !fi.Mode().IsRegular():
		return nil, &NotRegularError{Path: path, Mode: fi.Mode().Type()}
	}
	flags := unix.O_RDWR
	if readOnly {
		flags = unix.O_RDONLY
	}
	// O_NOCTTY cannot matter for a regular file; it stays in case a type
	// check above is ever loosened.
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), flags|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		// The descriptor is open: only a missing /proc explains this.
		return nil, fmt.Errorf("open %s: reopening it through /proc/self/fd/%d: %w", path, pfd, ErrNoProcFS)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	// Something else than procfs at /proc (a bind mount, a test's fake)
	// could name any file there: the reopened file must be the checked one.
	if now, err := f.Stat(); err != nil || !os.SameFile(now, fi) {
		_ = f.Close()
		return nil, fmt.Errorf("open %s: /proc/self/fd/%d is not the file checked: %w", path, pfd, ErrNoProcFS)
	}
	return f, nil
}

// IsSymlinkError reports whether err came from opening a symlink with
// O_NOFOLLOW.
func IsSymlinkError(err error) bool { return errors.Is(err, syscall.ELOOP) }

// NotRegular returns the file type that OpenNoFollow refused, if err is
// that refusal.
func NotRegular(err error) (fs.FileMode, bool) {
	var nr *NotRegularError
	if errors.As(err, &nr) {
		return nr.Mode, true
	}
	return 0, false
}

// Owner returns the uid owning a file.
func Owner(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

// Group returns the gid owning a file.
func Group(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Gid, true
}

// Euid is the effective uid of this process.
func Euid() uint32 { return uint32(unix.Geteuid()) }

// InGroup reports whether gid is this process's effective gid or one of
// its supplementary groups: whether the kernel grants it a file's group
// permissions.
func InGroup(gid uint32) (bool, error) {
	if uint32(unix.Getegid()) == gid {
		return true, nil
	}
	groups, err := unix.Getgroups()
	if err != nil {
		return false, fmt.Errorf("getgroups: %w", err)
	}
	for _, g := range groups {
		if uint32(g) == gid {
			return true, nil
		}
	}
	return false, nil
}

// LockExclusive takes an exclusive advisory lock on the open file (flock),
// released by Unlock or, if this process dies, by the kernel.
func LockExclusive(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Unlock releases LockExclusive.
func Unlock(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_UN) }

// TryLockByte takes an exclusive fcntl lock of f's open file description
// (F_OFD_SETLK, F_WRLCK) on the one byte at off of f's file, which may lie
// far past the file's end: ok false if another description holds it. f
// must be open for writing. It opens and closes nothing: a close of any
// descriptor of a file drops every classic record lock (F_SETLK, lockf)
// the process holds on that file, its caller's own included. The
// description's locks do not exclude each other, so a caller that shares
// f among goroutines excludes them itself; another description of the
// file, of this process or another, is excluded by the kernel. The lock
// ends with UnlockByte or with the description's last reference (a close
// alone leaves it to a mapping of f, or to a child forked meanwhile until
// its exec). It and flock(2) locks ignore each other. A closed f fails
// with an error wrapping os.ErrClosed, without touching the descriptor
// number it had, which the process may have opened another file under
// since.
func TryLockByte(f *os.File, off int64) (ok bool, err error) {
	err = setByteLock(f, off, unix.F_WRLCK)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES):
		return false, nil // held by another description
	}
	return false, err
}

// UnlockByte ends TryLockByte's lock of f's description on the byte at
// off: at once, even while the description has another reference, as it
// has in a child that another goroutine forks (os/exec) until that
// child's exec. A closed f fails as in TryLockByte.
func UnlockByte(f *os.File, off int64) error {
	return setByteLock(f, off, unix.F_UNLCK)
}

// setByteLock sets the lock of f's description on the byte at off to
// typ, through f's SyscallConn: its Control holds f's descriptor open for
// the call, and fails once f is closed instead of lending out a number
// that may name another file by then.
func setByteLock(f *os.File, off int64, typ int16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	lk := unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: off, Len: 1}
	cerr := rc.Control(func(fd uintptr) {
		for {
			err = unix.FcntlFlock(fd, unix.F_OFD_SETLK, &lk)
			if !errors.Is(err, unix.EINTR) {
				return
			}
		}
	})
	if cerr != nil {
		// Control's one failure ("use of closed file"), which it does
		// not make an os.ErrClosed as the os.File methods do.
		return &fs.PathError{Op: "fcntl", Path: f.Name(), Err: fmt.Errorf("%w (%v)", os.ErrClosed, cerr)}
	}
	if err != nil {
		return os.NewSyscallError("fcntl", err)
	}
	return nil
}

// IsTerminal reports whether fd is a terminal: the TCGETS ioctl works on
// it. A character device such as /dev/null is not one.
func IsTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	return err == nil
}
