package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edsrzf/mmap-go"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// Options control how a segment is created and opened. The zero value
// creates a segment with the default table sizes, mode 0600, and opens only
// segments of this user whose mode lets nobody else in, made in this PID
// namespace.
type Options struct {
	// Table sizes, used by Create; zero means the default, negative none.
	layout.Options

	// GroupAccess shares segments with a group. Create makes the file 0660
	// instead of 0600; its group is the creator's effective group (or the
	// directory's, if that is set-group-ID). Open takes a file whose mode
	// grants its group access, and a file owned by another user whose
	// group is one of this process's (its effective gid or a supplementary
	// group) and whose mode lets that group read and write. Without it
	// Open refuses both: ErrPermissiveMode, ErrForeignOwner. Every process
	// that uses a group segment sets it, the creator included.
	GroupAccess bool
	// AllowForeignOwner opens a file owned by any other user.
	AllowForeignOwner bool
	// AllowOthersAccess opens a file whose mode grants access to users
	// other than its owner and its group (any of the bits 0007), or to its
	// group. Without it such a file is refused (ErrPermissiveMode): anyone
	// on the machine could wedge or forge its locks.
	AllowOthersAccess bool
	// AllowForeignPIDNamespace opens a segment made in another PID
	// namespace, whose recorded pids mean nothing here.
	AllowForeignPIDNamespace bool
	// ReadOnly maps the segment read-only, for inspection: no claims, no
	// recovery after a reboot, and the words behind the accessors must only
	// be loaded. Create refuses it (ErrReadOnly), so OpenOrCreate with it
	// opens a segment or fails, and never makes one.
	ReadOnly bool
	// ReadyTimeout bounds the wait for a segment whose ready word is not yet
	// set; 0 or less means DefaultReadyTimeout.
	ReadyTimeout time.Duration
}

// DefaultReadyTimeout is how long Open waits for an incomplete segment
// before it reports ErrNotReady. Segments made by Create are complete before
// they have a name, so only a file written some other way ever waits.
const DefaultReadyTimeout = 2 * time.Second

// Segment is one mapped segment. Its methods may be called from several
// goroutines, Close among them: an operation in flight when Close begins
// completes or returns ErrClosed, as Close says. A pointer an accessor
// returned stays safe to use but means nothing once the Segment is
// unreachable (it then points to private zero-filled memory).
type Segment struct {
	path     string
	file     *os.File
	mem      mmap.MMap
	header   layout.Header
	readOnly bool
	creator  bool
	closed   atomic.Bool
	mapping  *mapping   // quarantined once s is unreachable and closed
	onClose  closeHooks // see OnClose

	operators operatorLocks // see TryLockOperator

	registryMu sync.Mutex     // serialises this process's directory changes
	registry   *atomic.Uint64 // the cross-process directory lock word
	regGen     *atomic.Uint64
}

// Create makes a new segment at path (see ResolvePath). It fails with
// ErrExists if the name is taken, and with ErrBadPath for a name that
// begins with .shmlock-init- or .shmlock-rm-: those are the hidden names
// of segments being made or removed, and RecoverLeftovers would take a
// segment made under one for a dead process's leftover and remove it.
// Options.ReadOnly is ErrReadOnly, and no file is made.
//
// The file gets all its memory at once (fallocate), before it has a name:
// if its file system or memory cgroup is full, Create fails with
// ErrNoSpace (wrapping syscall.ENOSPC or the like) and leaves no file,
// where a sparse file would have been created and a later first write to
// one of its pages, in any process, raised SIGBUS. On a file system
// without fallocate the file is only sized (ftruncate), sparse as before.
func Create(path string, opts Options) (*Segment, error) {
	path, err := ResolvePath(path)
	if err != nil {
		return nil, err
	}
	if hiddenName(filepath.Base(path)) {
		return nil, fmt.Errorf("%w: %s: names beginning %s or %s are kept for the hidden files of segments being made or removed", ErrBadPath, path, fsys.PendingPrefix, asidePrefix)
	}
	if opts.ReadOnly {
		// An inspection that finds no segment must not bring one into
		// being (OpenOrCreate's create), and a creator writes the file.
		return nil, fmt.Errorf("%w: create %s: a segment is made writable; Options.ReadOnly is for Open", ErrReadOnly, path)
	}
	h, err := layout.Plan(opts.Options.WithDefaults())
	if err != nil {
		return nil, err
	}
	if h.BootID, err = proc.BootID(); err != nil {
		return nil, fmt.Errorf("shm: create %s: %w", path, err)
	}
	if h.PIDNamespace, err = proc.PIDNamespace(); err != nil {
		return nil, fmt.Errorf("shm: create %s: %w", path, err)
	}
	h.Creator = proc.Self().Pack()
	h.Created = time.Unix(0, time.Now().UnixNano()) // as Validate will decode it
	mode := os.FileMode(0o600)
	if opts.GroupAccess {
		mode, h.Flags = 0o660, layout.FlagGroupAccess
	}

	pending, err := fsys.CreatePending(filepath.Dir(path), mode)
	if err != nil {
		return nil, fmt.Errorf("shm: create %s: %w", path, err)
	}
	f := pending.File()
	if err := sizeNew(f, int64(h.TotalSize)); err != nil {
		pending.Discard()
		return nil, sizeError("create", path, h.TotalSize, err)
	}
	mem, err := mmap.MapRegion(f, int(h.TotalSize), mmap.RDWR, 0, 0)
	if err != nil {
		pending.Discard()
		return nil, mapError("create", path, h.TotalSize, err)
	}
	layout.Encode(h, mem)
	s := &Segment{path: path, file: f, mem: mem, header: h, creator: true}
	s.bindHeaderWords()
	readyWord(mem).Store(layout.ReadyMark) // last: the header is complete

	testHookBeforeLink()
	if err := pending.Publish(path); err != nil {
		_ = mem.Unmap()
		pending.Discard()
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %s", ErrExists, path)
		}
		return nil, fmt.Errorf("shm: create %s: %w", path, err)
	}
	s.quarantineWhenUnreachable()
	return s, nil
}

// sizeNew gives a new segment file its size and reserves its memory.
func sizeNew(f *os.File, size int64) error {
	err := fsys.Reserve(f, size)
	if errors.Is(err, fsys.ErrNoReserve) {
		err = f.Truncate(size) // sparse: the best this file system offers
	}
	return err
}

// sizeError describes a failure to size or reserve a segment file; one for
// want of memory or space is ErrNoSpace.
func sizeError(op, path string, size uint64, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.ENOMEM) {
		return fmt.Errorf("%w: %s %s (%d bytes): %w", ErrNoSpace, op, path, size, err)
	}
	return fmt.Errorf("shm: %s %s: reserving %d bytes: %w", op, path, size, err)
}

// mapError is the error of a mapping of size bytes of the segment at path
// that failed: ErrNoMemory where this process has no room for it.
func mapError(op, path string, size uint64, err error) error {
	if errors.Is(err, syscall.ENOMEM) {
		return fmt.Errorf("%w: %s %s: mapping %d bytes: %w", ErrNoMemory, op, path, size, err)
	}
	return fmt.Errorf("shm: %s %s: mapping: %w", op, path, err)
}

// Open maps an existing segment after checking the file and its header.
//
// A writable Open reserves the memory of a file that is still sparse (made
// by a build of shmlock that only sized the file), as Create does: so a
// full file system or memory cgroup fails it with ErrNoSpace, instead of
// raising SIGBUS later at a first write to a page nobody had touched. A
// fully allocated file is left alone, and so is a file on a file system
// without fallocate. A read-only Open cannot reserve: on tmpfs even a read
// of a sparse file's untouched page takes memory, and faults if there is
// none.
func Open(path string, opts Options) (*Segment, error) {
	path, err := ResolvePath(path)
	if err != nil {
		return nil, err
	}
	f, err := fsys.OpenNoFollow(path, opts.ReadOnly)
	if err != nil {
		return nil, openError(path, err)
	}
	s, err := openFile(path, f, opts)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return s, nil
}

func openFile(path string, f *os.File, opts Options) (*Segment, error) {
	header, size, err := readCompleteHeader(path, f, opts)
	if err != nil {
		return nil, err
	}
	h, err := layout.Validate(header, size)
	if err != nil {
		return nil, fmt.Errorf("shm: open %s: %w", path, err)
	}
	if !opts.AllowForeignPIDNamespace {
		ns, err := proc.PIDNamespace()
		if err != nil {
			return nil, fmt.Errorf("shm: open %s: %w", path, err)
		}
		if ns != h.PIDNamespace {
			return nil, fmt.Errorf("%w: %s (made in pid:[%d], this is pid:[%d])", ErrForeignPIDNamespace, path, h.PIDNamespace, ns)
		}
	}
	if !opts.ReadOnly {
		// Only now that the header has passed: a file that is no segment
		// is never written.
		if err := fsys.Reserve(f, int64(h.TotalSize)); err != nil && !errors.Is(err, fsys.ErrNoReserve) {
			return nil, sizeError("open", path, h.TotalSize, err)
		}
	}
	prot := mmap.RDWR
	if opts.ReadOnly {
		prot = mmap.RDONLY
	}
	mem, err := mmap.MapRegion(f, int(h.TotalSize), prot, 0, 0)
	if err != nil {
		return nil, mapError("open", path, h.TotalSize, err)
	}
	s := &Segment{path: path, file: f, mem: mem, header: h, readOnly: opts.ReadOnly}
	s.bindHeaderWords()
	if !opts.ReadOnly {
		if err := s.recoverFromReboot(); err != nil {
			_ = mem.Unmap()
			return nil, fmt.Errorf("shm: open %s: %w", path, err)
		}
	}
	s.quarantineWhenUnreachable()
	return s, nil
}

func openError(path string, err error) error {
	if typ, ok := fsys.NotRegular(err); ok {
		return fmt.Errorf("%w: %s is %s", ErrNotRegular, path, describeType(typ))
	}
	switch {
	case fsys.IsSymlinkError(err):
		return fmt.Errorf("%w: %s", ErrSymlink, path)
	case errors.Is(err, fsys.ErrNoProcFS):
		return fmt.Errorf("%w: %w", ErrNoProcFS, err)
	}
	return fmt.Errorf("shm: %w", err)
}

// readCompleteHeader checks the file itself and reads its header once the
// ready word is set, waiting at most opts.ReadyTimeout.
func readCompleteHeader(path string, f *os.File, opts Options) ([]byte, int64, error) {
	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	deadline := time.Now().Add(timeout)
	header := make([]byte, layout.HeaderSize)
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 50*time.Millisecond) {
		fi, err := f.Stat()
		if err != nil {
			return nil, 0, fmt.Errorf("shm: open %s: %w", path, err)
		}
		if !fi.Mode().IsRegular() {
			return nil, 0, fmt.Errorf("%w: %s is %s", ErrNotRegular, path, describeType(fi.Mode()))
		}
		if err := checkAccess(path, f, fi, opts); err != nil {
			return nil, 0, err
		}
		n, err := f.ReadAt(header, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, 0, fmt.Errorf("shm: open %s: reading header: %w", path, err)
		}
		if n == len(header) && layout.IsReady(header) {
			return header, fi.Size(), nil
		}
		// Only a complete, valid header is worth waiting for: Create
		// publishes finished segments, so anything else is not one.
		if _, err := layout.Validate(header[:n], fi.Size()); err != nil {
			return nil, 0, fmt.Errorf("shm: open %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("%w: %s (ready word not set after %v)", ErrNotReady, path, timeout)
		}
		time.Sleep(backoff)
	}
}

// OpenOrCreate opens the segment at path, creating it if there is none.
// When several processes call it at once, exactly one creates the segment
// and every one gets it; IsCreator tells which.
func OpenOrCreate(path string, opts Options) (*Segment, error) {
	for {
		s, err := Open(path, opts)
		if !errors.Is(err, fs.ErrNotExist) {
			return s, err
		}
		s, err = Create(path, opts)
		if !errors.Is(err, ErrExists) {
			return s, err
		}
		// Another process published between our Open and Create: open theirs.
	}
}

// Close detaches the process from the segment: it closes the file (or
// leaves that to the release of the last operator lock still held: see
// TryLockOperator), and from then on every acquisition of the locks of
// packages spinlock, upgrade, lockmgr and txn opened on the segment
// returns ErrClosed and changes nothing. It is safe to call twice; the
// second call returns ErrClosed.
//
// Close does not take the mapping away from code that may still use it.
// An operation in flight when Close begins either completes, its hold real
// in the file, or returns ErrClosed having left nothing in the file: it
// ends on the shared pages either way, never on memory nobody else sees. A
// release (Unlock and the like, and a handle's own Close) still releases
// in the file after Close, so a goroutine that held a lock when the
// segment closed under it gives the lock back as it unwinds, and other
// processes never wait for this one to exit. Waiters asleep at Close wake
// and return ErrClosed; Close runs the functions of OnClose and waits for
// them (lock packages use them to wake and hear back from such waiters),
// and lets a Claim or Release of another goroutine that holds the
// directory's lock finish.
//
// The mapping is replaced by private zero-filled memory
// (internal/memview.Quarantine) once the Segment is unreachable, that is
// once no lock handle made on it is left either: a pointer into the
// segment kept past that, such as a table entry from Slot, then neither
// faults nor touches the shared file.
func (s *Segment) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	s.mapping.closed.Store(true)
	s.onClose.run()
	// A directory change of this process in progress ends first, so that
	// Close returns with nothing of this process half-done in the file.
	s.registryMu.Lock()
	//nolint:staticcheck // an empty critical section: waiting is the point
	s.registryMu.Unlock()
	return s.closeFile()
}

// mapping is what the cleanup of a Segment needs: it must not refer to
// the Segment itself, or the Segment would never be unreachable.
type mapping struct {
	mem    []byte
	closed atomic.Bool // Close has been called
}

// quarantineWhenUnreachable arranges for the segment's mapping to be
// quarantined once s is unreachable, if it was closed by then. An
// unreachable segment that was never closed keeps its mapping, as before
// Close existed: pointers from its accessors may still be in use.
func (s *Segment) quarantineWhenUnreachable() {
	s.mapping = &mapping{mem: s.mem}
	runtime.AddCleanup(s, func(m *mapping) {
		if m.closed.Load() {
			_ = memview.Quarantine(m.mem)
		}
	}, s.mapping)
}

// Closed reports whether Close has been called.
func (s *Segment) Closed() bool { return s.closed.Load() }

// Replaced reports whether s's path no longer names the file s has open:
// the file was removed, or removed and another made under its name (an
// application that restarts makes its segment again). s itself goes on
// showing the old file, which nobody else opens any more; a monitor that
// keeps its segment open asks this to follow the new one. It costs two
// stats. ErrClosed after Close.
func (s *Segment) Replaced() (bool, error) {
	if s.Closed() {
		return false, ErrClosed
	}
	testHookReplaced()
	open, err := s.file.Stat()
	if err != nil && s.Closed() {
		// A Close after the check above closed the file under the stat
		// (os.File keeps its descriptor from being reused meanwhile).
		return false, ErrClosed
	}
	if err != nil {
		return false, fmt.Errorf("shm: %s: %w", s.path, err)
	}
	now, err := os.Lstat(s.path) // Open does not follow a symlink either
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("shm: %w", err)
	}
	return !os.SameFile(open, now), nil
}

// Remove deletes the segment file at path after checking that it is a
// shmlock segment (not a symlink, a regular file, with the magic). Processes
// that have it mapped keep their mapping. If the path comes to name another
// file while it is checked, that file is left alone: ErrChanged.
func Remove(path string) error { return RemoveIfSame(path, nil) }

// RemoveIfSame is Remove, but only if the file at path is still the one
// want describes (os.SameFile), the file a caller examined before deciding
// to remove it; a nil want accepts any. Otherwise: ErrChanged, nothing
// removed.
func RemoveIfSame(path string, want fs.FileInfo) error { return RemoveUnused(path, want, nil) }

// RemoveUnused is RemoveIfSame with a last check: once the file's name is
// moved aside, where no process can open it any more, recheck is called
// with the file's new path, and an error from it puts the name back and is
// returned, nothing removed. A caller that found the file unused checks
// again there (shmctl rm): a process that opened it in between would go on
// with a file nobody else can reach, while later ones make a new one.
func RemoveUnused(path string, want fs.FileInfo, recheck func(path string) error) error {
	path, err := ResolvePath(path)
	if err != nil {
		return err
	}
	f, err := fsys.OpenNoFollow(path, true)
	if err != nil {
		return openError(path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("shm: remove %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is %s", ErrNotRegular, path, describeType(fi.Mode()))
	}
	if want != nil && !os.SameFile(fi, want) {
		return fmt.Errorf("%w: %s (nothing removed)", ErrChanged, path)
	}
	magic := make([]byte, len(layout.Magic))
	n, _ := io.ReadFull(f, magic)
	if _, err := layout.Validate(magic[:n], fi.Size()); errors.Is(err, layout.ErrBadMagic) || n < len(magic) {
		return fmt.Errorf("shm: remove %s: %w", path, err)
	}
	testHookBeforeUnlink()
	return unlinkSame(path, originOf(filepath.Base(path)), fi, recheck)
}

// unlinkSame removes path if it still names the file fi describes. An
// unlink of the path itself would remove whatever it names by then: a
// segment another process made after the checked one was removed, or any
// file put there. So the name is first moved aside (rename never follows
// or replaces), the moved file compared with the checked one, and only the
// file under the name this process made removed; another file goes back.
// The hidden name keeps o, the name the segment is removed from (path's
// own, or the one a leftover came from): should this process be killed
// before it is done, RecoverLeftovers finishes.
func unlinkSame(path string, o origin, fi fs.FileInfo, recheck func(string) error) error {
	aside, err := moveAside(path, o)
	if err == nil {
		testHookAside(aside)
	}
	if errors.Is(err, fsys.ErrNoMoveAside) {
		// A file system without RENAME_NOREPLACE: the narrow window of a
		// check right before the unlink is the best there is.
		if now, err := os.Lstat(path); err != nil || !os.SameFile(now, fi) {
			return fmt.Errorf("%w: %s (nothing removed)", ErrChanged, path)
		}
		if recheck != nil {
			if err := recheck(path); err != nil {
				return err
			}
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("shm: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("shm: remove %s: %w", path, err)
	}
	now, err := os.Lstat(aside)
	if err == nil && os.SameFile(now, fi) {
		if recheck != nil {
			if err := recheck(aside); err != nil {
				if mbErr := fsys.MoveBack(aside, path); mbErr != nil {
					return fmt.Errorf("%w; and putting it back failed (it is at %s): %v", err, aside, mbErr)
				}
				return err
			}
		}
		if err := os.Remove(aside); err != nil {
			return fmt.Errorf("shm: remove %s: %w", path, err)
		}
		return nil
	}
	if err := fsys.MoveBack(aside, path); err != nil {
		return fmt.Errorf("%w: %s, and putting the new file back failed (it is at %s): %v", ErrChanged, path, aside, err)
	}
	return fmt.Errorf("%w: %s (nothing removed)", ErrChanged, path)
}

// testHookBeforeUnlink runs in Remove between checking the file and
// removing its name; tests replace it to put another file there.
var testHookBeforeUnlink = func() {}

// testHookBeforeLink runs in Create once the segment is complete, before
// its file is linked under its name; tests replace it to die there.
var testHookBeforeLink = func() {}

// testHookReplaced runs in Replaced between its check for Close and
// the stat of the file; tests replace it to close the segment there.
var testHookReplaced = func() {}

// testHookAside runs in Remove once the name is moved aside, before the
// file is compared and unlinked; tests replace it to kill the remover
// there.
var testHookAside = func(aside string) {}

func describeType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}

// OwnerAlive reports whether the process recorded as an owner (a packed
// identity, internal/proc) is alive as far as this segment can tell: never
// for 0 or a stale identity, nor for any identity while the segment's
// owners were recorded under another boot and no writable Open has
// recovered it yet.
func (s *Segment) OwnerAlive(owner uint64) bool {
	boot, err := proc.BootID()
	if err != nil || s.ownersBoot() != boot {
		return false
	}
	return proc.AlivePacked(owner)
}

// OwnersFromOtherBoot reports whether the recorded owners belong to an
// earlier boot (only a read-only handle can see this; a writable Open
// recovers the segment first).
func (s *Segment) OwnersFromOtherBoot() bool {
	boot, err := proc.BootID()
	return err != nil || s.ownersBoot() != boot
}

// Path is the segment's file path.
func (s *Segment) Path() string { return s.path }

// Header is the segment's validated header.
func (s *Segment) Header() layout.Header { return s.header }

// IsCreator reports whether this handle created the segment.
func (s *Segment) IsCreator() bool { return s.creator }

// ReadOnly reports whether the segment was opened read-only.
func (s *Segment) ReadOnly() bool { return s.readOnly }

func readyWord(mem []byte) *atomic.Uint32 {
	w, err := memview.Uint32(mem, layout.OffReady)
	if err != nil {
		panic("shm: header word out of a mapping that passed validation: " + err.Error())
	}
	return w
}

func (s *Segment) bindHeaderWords() {
	var err error
	if s.registry, err = memview.Uint64(s.mem, layout.OffRegistry); err == nil {
		s.regGen, err = memview.Uint64(s.mem, layout.OffRegistryGen)
	}
	if err != nil {
		panic("shm: header word out of a mapping that passed validation: " + err.Error())
	}
}

// ownersBoot reads the boot id under which the recorded owners live.
func (s *Segment) ownersBoot() [16]byte {
	var b [16]byte
	lo, _ := memview.Uint64(s.mem, layout.OffOwnersBoot)
	hi, _ := memview.Uint64(s.mem, layout.OffOwnersBoot+8)
	binary.LittleEndian.PutUint64(b[:8], lo.Load())
	binary.LittleEndian.PutUint64(b[8:], hi.Load())
	return b
}

func (s *Segment) setOwnersBoot(b [16]byte) {
	lo, _ := memview.Uint64(s.mem, layout.OffOwnersBoot)
	hi, _ := memview.Uint64(s.mem, layout.OffOwnersBoot+8)
	lo.Store(binary.LittleEndian.Uint64(b[:8]))
	hi.Store(binary.LittleEndian.Uint64(b[8:]))
}
