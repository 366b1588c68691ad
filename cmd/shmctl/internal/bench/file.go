package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/edsrzf/mmap-go"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/internal/memview"
)

// Shared file layout, identical to bench/c/harness.h's struct h_file: every
// driver's workers meet in the same 64 KiB.
const (
	ShmSize         = 64 << 10
	OffReady        = 0x0000 // uint32: workers attached
	OffGo           = 0x0004 // uint32: goStart or goAbort
	OffCounter      = 0x0040 // uint64: counter / pingpong turns taken
	OffTurn         = 0x0080 // uint64: pingpong: whose turn (0 or 1)
	OffRecord       = 0x00C0 // [8]uint64: rw90 record
	OffStats        = 0x1000 // MaxProcs x statSize-byte wstat
	OffLock         = 0x2000 // the peer's lock area, 56 KiB (unused: the lock is in FILE.shm)
	MaxProcs        = 64
	SpinBeforeYield = 1000 // pingpong/barrier: plain loads, then sched_yield
	statSize        = 64
)

// ErrExists is the error for a --path (or its .shm sidecar) that exists
// already: bench refuses to touch what it did not create.
var ErrExists = errors.New("bench: file exists")

// Values of the go flag.
const (
	goStart = 1
	goAbort = 2
)

// wstat is one worker's stat slot (64 bytes at OffStats+64*worker).
// CPUNs is the CPU time the worker's process used in its workload loop (0
// if it could not be read).
type wstat struct{ EndNs, Reads, Writes, Torn, Errors, Done, Retries, CPUNs uint64 }

// shared is one process's view of the mapped file. The counter, turn and
// record are plain words on purpose: the workloads update them with plain
// loads and stores under the lock, so a lock that failed to exclude would
// lose updates, which validation then reports.
type shared struct {
	mem     mmap.MMap
	ready   *atomic.Uint32
	goFlag  *atomic.Uint32
	counter *uint64
	turn    *uint64
	record  *[8]uint64
	stats   [MaxProcs]*wstat
}

// mapFile maps the shared file, creating it if create: it must not exist
// (bench never truncates or replaces a file it did not make), and a
// symbolic link is never followed.
func mapFile(path string, create bool) (*shared, error) {
	flags := os.O_RDWR | syscall.O_NOFOLLOW
	if create {
		flags |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%w: %s exists, and bench makes its own file (remove it, or leave --path out for a private one)", ErrExists, path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if create {
		if err := reserve(f); err != nil {
			_ = os.Remove(path) // made here (O_EXCL), and of no use to anyone
			return nil, fmt.Errorf("sizing %s: %w", path, err)
		}
	}
	mem, err := mmap.MapRegion(f, ShmSize, mmap.RDWR, 0, 0) // MAP_SHARED
	if err != nil {
		if create {
			_ = os.Remove(path)
		}
		return nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	s, err := view(mem)
	if err != nil {
		_ = mem.Unmap()
		return nil, err
	}
	return s, nil
}

// reserve sizes the new file with its memory allocated, as shm.Create
// does its segments: a file only sized is sparse, and on a full /dev/shm a
// worker's first write to one of its pages raised SIGBUS instead of this
// error (wrapping syscall.ENOSPC). A file system without fallocate gets a
// sparse file still.
func reserve(f *os.File) error {
	err := fsys.Reserve(f, ShmSize)
	if errors.Is(err, fsys.ErrNoReserve) {
		err = f.Truncate(ShmSize)
	}
	return err
}

// view types the words of mem, which must be ShmSize bytes.
func view(mem mmap.MMap) (*shared, error) {
	s := &shared{mem: mem}
	var errs [6]error
	s.ready, errs[0] = memview.Uint32(mem, OffReady)
	s.goFlag, errs[1] = memview.Uint32(mem, OffGo)
	s.counter, errs[2] = memview.At[uint64](mem, OffCounter)
	s.turn, errs[3] = memview.At[uint64](mem, OffTurn)
	s.record, errs[4] = memview.At[[8]uint64](mem, OffRecord)
	for i := range s.stats {
		if s.stats[i], errs[5] = memview.At[wstat](mem, OffStats+statSize*uint64(i)); errs[5] != nil {
			break
		}
	}
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("bench: shared file: %w", err)
		}
	}
	return s, nil
}

func (s *shared) unmap() error { return s.mem.Unmap() }
