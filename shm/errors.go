package shm

import "errors"

// Sentinel errors. Failures of the header itself wrap the layout.Err
// sentinels; failures of the file system wrap the *fs.PathError, so
// errors.Is(err, fs.ErrNotExist) works for a missing segment.
var (
	ErrClosed              = errors.New("shm: segment is closed")
	ErrExists              = errors.New("shm: segment already exists")
	ErrBadPath             = errors.New("shm: bad segment path")
	ErrSymlink             = errors.New("shm: segment path is a symbolic link")
	ErrNotRegular          = errors.New("shm: segment is not a regular file")
	ErrForeignOwner        = errors.New("shm: segment is owned by another user")
	ErrPermissiveMode      = errors.New("shm: segment's file mode grants access to others")
	ErrForeignPIDNamespace = errors.New("shm: segment was made in another PID namespace")
	ErrNotReady            = errors.New("shm: segment was never completed by its creator")
	ErrChanged             = errors.New("shm: segment file was replaced while it was checked")
	ErrReadOnly            = errors.New("shm: segment is open read-only")
	ErrIndex               = errors.New("shm: table index out of range")
	ErrNotClaimable        = errors.New("shm: table has no directory")
	ErrTableFull           = errors.New("shm: table is full")
	ErrNotFound            = errors.New("shm: no entry by that name")
	ErrNotClaimed          = errors.New("shm: entry is not claimed")
	ErrUseMismatch         = errors.New("shm: entry is claimed for another use")
	ErrRegionSize          = errors.New("shm: bad data region size")
	ErrDataFull            = errors.New("shm: data area is full")
	ErrRegionOffset        = errors.New("shm: word outside the data region or misaligned")
	// ErrNoSegment is what the other packages' constructors and readers
	// return for a nil *Segment (a caller's Open that failed, unchecked).
	ErrNoSegment = errors.New("shm: no segment (nil)")
	// ErrFault is a memory fault met reading a segment: its file was cut
	// short while mapped (SIGBUS), which only a writer of the file can do.
	// A reader that runs on goroutines of its own (metrics.Read, for a
	// monitor's scrape) turns the fault into this error rather than die.
	ErrFault = errors.New("shm: memory fault reading the segment (was its file cut short while in use?)")
	// ErrNoSpace is Create's (or a writable Open's) error when the memory
	// of the segment file cannot be reserved: its file system, or the
	// memory cgroup its pages are charged to, is full. The error also
	// wraps the system's (syscall.ENOSPC, EDQUOT or ENOMEM).
	ErrNoSpace = errors.New("shm: no room for the segment in its file system or memory limit")
	// ErrNoMemory is Create's or Open's error when the segment cannot be
	// mapped for want of room in this process: its address-space limit
	// (RLIMIT_AS) or the kernel's count of mappings a process may have
	// (vm.max_map_count) is reached. The memory of the file itself is
	// ErrNoSpace's. The error also wraps the system's (syscall.ENOMEM).
	ErrNoMemory = errors.New("shm: no room to map the segment in this process (its address-space limit or vm.max_map_count)")
	// ErrNoProcFS is Open's error where /proc is not mounted (or is not
	// procfs): the file Open checked is opened for use through
	// /proc/self/fd, and liveness is read from /proc.
	ErrNoProcFS = errors.New("shm: /proc is not mounted")
	// ErrRemoverAlive: RecoverLeftovers keeps a leftover whose remover
	// still runs, in the middle of its removal maybe.
	ErrRemoverAlive = errors.New("shm: the process that moved the segment aside is alive")
	// ErrCreatorAlive: RecoverLeftovers keeps a pending file (see
	// Leftover) whose creator still runs: the segment is being made.
	ErrCreatorAlive = errors.New("shm: the process creating the segment is alive")
	// ErrLeftoverInUse: RecoverLeftovers keeps a pending file whose creator
	// is dead but that a process has mapped or open (one that inherited
	// its descriptor): it has no name to be put back under.
	ErrLeftoverInUse = errors.New("shm: the leftover is in use")
	// ErrForeignNamespace: RecoverLeftovers keeps a leftover whose remover
	// (or a pending file whose creator) is a process of another PID
	// namespace, which shares the directory (/dev/shm of a host and its
	// containers), and that this process cannot judge: its pid names
	// another process here, or none, and neither it nor the descriptors
	// it has open are in this namespace's /proc, so only a recovery in its
	// own namespace, or in an ancestor, can tell whether it lives. One of
	// a descendant namespace (a container's, seen from its host) is judged
	// (unless /proc hides some processes), and so, from the initial
	// namespace, is one of a namespace that has no process left.
	ErrForeignNamespace = errors.New("shm: the leftover's process is of another PID namespace")
	// ErrNameNotKept: a leftover's hidden name keeps only the digest of
	// the long name it was removed from (RecoverLeftoversOf, told the
	// name, puts it back).
	ErrNameNotKept = errors.New("shm: the leftover's hidden name does not keep the name it was removed from")
)
