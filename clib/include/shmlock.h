/* shmlock.h: the C interface of libshmlock.
 *
 * libshmlock lets C, C++ (see shmlock.hpp) and anything with a C FFI (Python's
 * ctypes, for one) take part in the locks of a shmlock segment alongside Go
 * processes: the same file, the same words, the same protocol (docs/FORMAT.md,
 * format version 5). A Go waiter is woken by a C release and the other way
 * round; a dead holder of either language is reclaimed by the other.
 *
 * Conventions
 *   - Functions return int: 0 for success, a negative SHMLOCK_E* code for
 *     failure (nothing changed), and for lock acquisitions a positive report
 *     with the lock HELD: SHMLOCK_OWNERDEAD (this call took the lock over from
 *     a dead holder; what it protects may be half-updated) or
 *     SHMLOCK_INCONSISTENT (an earlier holder died and nobody has marked the
 *     lock consistent since). Test failure with rc < 0.
 *   - SHMLOCK_ESYS carries errno: shmlock_errno() returns the errno of the
 *     calling thread's last SHMLOCK_ESYS.
 *   - Timeouts are in nanoseconds; a negative timeout waits forever, 0 tries
 *     once. Waiters sleep on futexes; they never spin for long.
 *   - Handles (segment, spinlock, upgrade mutex, lock manager) may be used by
 *     several threads at once unless a function says otherwise. A handle is
 *     closed once and not used after its close, which frees it (nothing can
 *     tell a freed handle: its use is undefined, not an error code). A lock
 *     handle may outlive its segment's close (see shmlock_close); the
 *     segment pointer is valid until the last of them is closed.
 *   - Only Linux; x86-64 and arm64 (the words are C11 sequentially consistent
 *     atomics, as Go's sync/atomic).
 */
#ifndef SHMLOCK_H
#define SHMLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHMLOCK_FORMAT_VERSION 5

/* Reports of an acquisition that succeeded (the lock is held). */
enum {
	SHMLOCK_OK = 0,
	SHMLOCK_OWNERDEAD = 1,    /* this call reclaimed the lock from a dead holder */
	SHMLOCK_INCONSISTENT = 2, /* an earlier reclaim was never marked consistent */
};

/* Failures. The comment names the Go error each one stands for. */
enum {
	SHMLOCK_ESYS = -1,            /* a system call failed: see shmlock_errno() */
	SHMLOCK_EINVAL = -2,          /* a bad argument (NULL handle, unknown mode, bad options) */
	SHMLOCK_ENOMEM = -3,          /* out of memory; for a segment's mapping shm.ErrNoMemory, no room in this process (shmlock_errno(): ENOMEM) */
	/* Opening a segment (shm.Err*, layout.Err*). */
	SHMLOCK_ECLOSED = -10,        /* shm.ErrClosed, upgrade.ErrClosed, spinlock.ErrLockClosed, lockmgr.ErrClosed (CLOSED) */
	SHMLOCK_EEXIST = -11,         /* shm.ErrExists */
	SHMLOCK_EBADPATH = -12,       /* shm.ErrBadPath */
	SHMLOCK_ESYMLINK = -13,       /* shm.ErrSymlink */
	SHMLOCK_ENOTREGULAR = -14,    /* shm.ErrNotRegular */
	SHMLOCK_EFOREIGNOWNER = -15,  /* shm.ErrForeignOwner */
	SHMLOCK_EPERMISSIVE = -16,    /* shm.ErrPermissiveMode */
	SHMLOCK_EFOREIGNPIDNS = -17,  /* shm.ErrForeignPIDNamespace */
	SHMLOCK_ENOTREADY = -18,      /* shm.ErrNotReady */
	SHMLOCK_EREADONLY = -19,      /* shm.ErrReadOnly, lockmgr.ErrReadOnly */
	SHMLOCK_ETRUNCATED = -20,     /* layout.ErrTruncated */
	SHMLOCK_EBADMAGIC = -21,      /* layout.ErrBadMagic */
	SHMLOCK_EVERSION = -22,       /* layout.ErrVersion */
	SHMLOCK_ESIZE = -23,          /* layout.ErrSizeMismatch */
	SHMLOCK_EMALFORMED = -24,     /* layout.ErrMalformed */
	SHMLOCK_ETABLERANGE = -25,    /* layout.ErrTableRange */
	SHMLOCK_ETABLEOVERLAP = -26,  /* layout.ErrTableOverlap */
	SHMLOCK_ELIMIT = -27,         /* layout.ErrLimit */
	SHMLOCK_ECHECKSUM = -28,      /* layout.ErrChecksum */
	SHMLOCK_EBADNAME = -29,       /* layout.ErrBadName (a lock's name) */
	SHMLOCK_EINDEX = -30,         /* shm.ErrIndex */
	SHMLOCK_ETABLEFULL = -31,     /* shm.ErrTableFull */
	SHMLOCK_ENOTFOUND = -32,      /* shm.ErrNotFound */
	SHMLOCK_EUSEMISMATCH = -33,   /* shm.ErrUseMismatch, spinlock.ErrModeMismatch */
	SHMLOCK_ENOTABLE = -34,       /* the segment has no such table (spinlock.ErrNoSlot, lockmgr.ErrNoTable) */
	SHMLOCK_EREGIONSIZE = -35,    /* shm.ErrRegionSize: a data region claimed with another size */
	SHMLOCK_EDATAFULL = -36,      /* shm.ErrDataFull: the data area has not the bytes left */
	SHMLOCK_EFILECHANGED = -37,   /* shm.ErrChanged: the path came to name another file while it was checked */
	SHMLOCK_ENOSPACE = -38,       /* shm.ErrNoSpace: no room for the segment's memory (shmlock_errno(): ENOSPC, EDQUOT or ENOMEM) */
	SHMLOCK_ENOPROCFS = -39,      /* shm.ErrNoProcFS: /proc is not mounted (or is not procfs) */
	/* Locks (spinlock.Err*, upgrade.Err*). */
	SHMLOCK_EWOULDBLOCK = -40,    /* a try found the lock held */
	SHMLOCK_ETIMEDOUT = -41,      /* a timed wait ran out */
	SHMLOCK_ENOTOWNER = -42,      /* released or changed by a holder that does not hold it */
	SHMLOCK_ENOTHELD = -43,       /* upgrade.ErrNotHeld: not held in that mode by this handle */
	SHMLOCK_ERECURSION = -44,     /* spinlock.ErrRecursion */
	SHMLOCK_EBADIDENTITY = -45,   /* spinlock.ErrBadIdentity: the holder does not fit the mode */
	SHMLOCK_EHELD = -46,          /* upgrade.ErrHeld: this handle holds it in a conflicting mode */
	SHMLOCK_EOVERFLOW = -47,      /* upgrade.ErrOverflow */
	SHMLOCK_ETOOMANYREADERS = -48,/* upgrade.ErrTooManyReaders */
	SHMLOCK_ECHANGED = -49,       /* spinlock.ErrChanged */
	/* The lock manager (lockmgr.Err*; shmlock_error_code gives its code). */
	SHMLOCK_ERESOURCE_LOCKED = -60,    /* RESOURCE_LOCKED */
	SHMLOCK_EACQUISITION_FAILED = -61, /* LOCK_ACQUISITION_FAILED */
	SHMLOCK_ELOCK_NOT_HELD = -62,      /* LOCK_NOT_HELD */
	SHMLOCK_ELOCK_TIMEOUT = -63,       /* LOCK_TIMEOUT: the hold expired before release */
	SHMLOCK_EWAIT_TIMEOUT = -64,       /* WAIT_TIMEOUT */
	SHMLOCK_ERESOURCE_NOT_FOUND = -65, /* RESOURCE_NOT_FOUND */
	SHMLOCK_EALREADY_HELD = -66,       /* LOCK_ALREADY_HELD */
	SHMLOCK_EVERSION_CONFLICT = -67,   /* VERSION_CONFLICT */
	SHMLOCK_ELOCK_TABLE_FULL = -68,    /* TABLE_FULL */
	SHMLOCK_ETOO_MANY_HOLDERS = -69,   /* TOO_MANY_HOLDERS */
	SHMLOCK_EINVALID_RESOURCE = -70,   /* INVALID_RESOURCE */
	SHMLOCK_EINVALID_OWNER = -71,      /* INVALID_OWNER */
	SHMLOCK_EINVALID_MODE = -72,       /* INVALID_MODE */
	SHMLOCK_EINVALID_OPTIONS = -73,    /* INVALID_OPTIONS */
};

/* A one-line English description of a return value (never NULL). */
const char *shmlock_strerror(int rc);
/* The lock manager's code of rc ("RESOURCE_LOCKED", ...), as lockmgr.Code
 * gives it in Go, or NULL for codes that are not the lock manager's. */
const char *shmlock_error_code(int rc);
/* The errno behind this thread's last SHMLOCK_ESYS. */
int shmlock_errno(void);
/* The library's version string, e.g. "1.0.0". */
const char *shmlock_version(void);

/* ---------------------------------------------------------------- segments */

typedef struct shmlock_segment shmlock_segment;

/* Flags of shmlock_options (shm.Options). */
enum {
	SHMLOCK_GROUP_ACCESS = 1 << 0,        /* create 0660 / open group segments */
	SHMLOCK_ALLOW_FOREIGN_OWNER = 1 << 1, /* open a file of another user */
	SHMLOCK_ALLOW_OTHERS_ACCESS = 1 << 2, /* open a file whose mode lets others in */
	SHMLOCK_ALLOW_FOREIGN_PIDNS = 1 << 3, /* open a segment of another PID namespace */
	SHMLOCK_READ_ONLY = 1 << 4,           /* map read-only, for inspection; a create is SHMLOCK_EREADONLY */
};

/* Options of open and create; NULL or a zeroed struct means the defaults
 * (those of Go's zero shm.Options: default table sizes, mode 0600, owner
 * and namespace checks on, a ready wait of 2 s). A table size of 0 takes the
 * default, a negative one leaves the table out. A flag this version does
 * not know is SHMLOCK_EINVAL. */
typedef struct shmlock_options {
	unsigned flags;           /* SHMLOCK_* flags above */
	int64_t ready_timeout_ns; /* wait for a creator still writing; 0 or less: 2 s */
	/* layout.Options, for create: */
	int64_t slots;            /* owner slots (spinlocks) */
	int64_t upgrades;         /* upgrade mutexes */
	int64_t upgrade_readers;  /* reader records of each upgrade mutex */
	int64_t txn_records;
	int64_t txn_arena_bytes;
	int64_t lockmgr_entries;
	int64_t claim_refs;
	int64_t data_bytes;
	int64_t data_regions;
} shmlock_options;

/* A path without a slash names a file in /dev/shm (shm.ResolvePath).
 * shmlock_create refuses a name that begins .shmlock-init- or .shmlock-rm-
 * (SHMLOCK_EBADPATH): the hidden names of segments being made or removed,
 * which leftover recovery removes. shmlock_create reserves the new file's memory (fallocate; only ftruncate
 * on a file system without it), and a writable shmlock_open that of a
 * sparse file an earlier version made: a full file system or memory cgroup
 * is SHMLOCK_ENOSPACE there, not a SIGBUS at a first touch of a page. */
int shmlock_open(const char *path, const shmlock_options *opts, shmlock_segment **out);
int shmlock_create(const char *path, const shmlock_options *opts, shmlock_segment **out);
int shmlock_open_or_create(const char *path, const shmlock_options *opts, shmlock_segment **out);
/* Closes the segment; the file stays. Acquisitions through handles still
 * open on it fail with SHMLOCK_ECLOSED from then on, but their releases
 * still give back what they hold: each handle keeps the mapping until it is
 * closed itself (an upgrade mutex handle's close is refused, SHMLOCK_EHELD,
 * until it holds nothing), as in Go. A thread of this process waiting on an
 * upgrade mutex while it holds part of it (a writer draining readers, an
 * upgrade waiting for a writer) is woken, and shmlock_close returns only once
 * it has given that part back. Calls on the lock handles may run in other
 * threads meanwhile; calls that take seg itself (the opens of lock handles,
 * shmlock_data) must not, unlike Go's Segment methods, which a garbage
 * collector keeps from freed memory: the close may free seg under them
 * (when no lock handle keeps it), and nothing can tell freed memory. */
int shmlock_close(shmlock_segment *seg);
/* Removes the segment's file (shm.Remove): other processes keep their maps.
 * The name is moved aside to a hidden one first (docs/FORMAT.md, The file):
 * if the caller is killed before the file is unlinked, Go's
 * shm.RecoverLeftovers (shmctl rm, shmctl reclaim) finishes. */
int shmlock_remove(const char *path);
/* The packed identity (docs/FORMAT.md, Identities) of the calling process. */
uint64_t shmlock_self_identity(void);
/* The data region named name (1 to 40 bytes of UTF-8, no control
 * characters, else SHMLOCK_EBADNAME), claimed with
 * size bytes on first use (shm.Segment.Data): every process that names it
 * gets the same memory, zero when new, kept for the life of the segment.
 * size 0 only finds. SHMLOCK_EREGIONSIZE if the region has another size,
 * SHMLOCK_EDATAFULL if the data area is full, SHMLOCK_ETABLEFULL if its
 * directory is,
 * SHMLOCK_ENOTFOUND, SHMLOCK_EREADONLY (a claim on a read-only segment).
 * Words others change concurrently are reached with atomics only. *out
 * points into the mapping: it is valid until seg is closed and its last
 * lock handle with it (a Go Region says shm.ErrClosed then; a pointer
 * cannot, and the memory is unmapped). */
int shmlock_data(shmlock_segment *seg, const char *name, size_t size, void **out);
/* 1 if the process a packed identity names is alive (same start time, not a
 * zombie, not recorded under an earlier boot), else 0. */
int shmlock_identity_alive(uint64_t identity);

/* --------------------------------------------------------------- spinlocks */

typedef struct shmlock_spin shmlock_spin;

enum {
	SHMLOCK_PIDTID = 0, /* robust and recursive: the slot records (process, holder) */
	SHMLOCK_TOKEN = 1,  /* whoever has the token may release; not robust */
};

/* A holder is what the lock records of the one holding it: in pid/tid mode
 * a holder id of this process (recursion is keyed on it), in token mode a
 * token. Draw them with these; a lock never invents one. */
uint64_t shmlock_holder_new(void);    /* a random non-zero holder id (spinlock.NewHolder) */
uint64_t shmlock_holder_thread(void); /* the calling thread's holder id, the same on every call (Go's spinlock.ThreadHolder makes a new one per call) */
uint64_t shmlock_token_new(void);     /* a random token, low 32 bits non-zero (spinlock.NewToken) */

/* The lock named name (1 to 40 bytes of UTF-8, no control characters), claimed in the slot
 * directory for mode; SHMLOCK_EUSEMISMATCH if claimed for the other mode. */
int shmlock_spin_named(shmlock_segment *seg, const char *name, int mode, shmlock_spin **out);
/* The lock of owner slot index, unclaimed (spinlock.Open);
 * SHMLOCK_EUSEMISMATCH if the slot is claimed for the other mode. A claim
 * that records no mode takes mode from its first open, and refuses the
 * other mode after it; a slot not claimed is the caller's to use in one
 * mode. That first open records mode under the directory's lock, waiting
 * for it as shmlock_spin_named does, for as long as a live process holds it
 * (one stopped mid-claim); Go's spinlock.OpenContext bounds the wait, for
 * tools, and fails rather than open with the mode unrecorded. */
int shmlock_spin_open(shmlock_segment *seg, size_t index, int mode, shmlock_spin **out);
int shmlock_spin_close(shmlock_spin *l);
int shmlock_spin_index(const shmlock_spin *l);

int shmlock_spin_trylock(shmlock_spin *l, uint64_t holder);
int shmlock_spin_lock(shmlock_spin *l, uint64_t holder);
int shmlock_spin_timedlock(shmlock_spin *l, uint64_t holder, int64_t timeout_ns);
int shmlock_spin_unlock(shmlock_spin *l, uint64_t holder);
/* Clears the inconsistent bit; the caller holds the lock. */
int shmlock_spin_mark_consistent(shmlock_spin *l, uint64_t holder);
/* 1 if the slot's inconsistent bit is set. */
int shmlock_spin_inconsistent(const shmlock_spin *l);
/* The slot's generation (pid/tid mode): bumped by every release and reclaim. */
uint64_t shmlock_spin_generation(const shmlock_spin *l);

/* ---------------------------------------------------------- upgrade mutex */

/* An upgradeable reader/writer mutex (package upgrade). A handle is one
 * holder: its holds are its own, it takes a reader record for its shared
 * holds, and it is used by one thread at a time (as a Go *upgrade.Mutex is
 * used by one goroutine at a time); open one handle per thread. */
typedef struct shmlock_upgrade shmlock_upgrade;

int shmlock_upgrade_named(shmlock_segment *seg, const char *name, shmlock_upgrade **out);
int shmlock_upgrade_open(shmlock_segment *seg, size_t index, shmlock_upgrade **out);
int shmlock_upgrade_close(shmlock_upgrade *m);
int shmlock_upgrade_index(const shmlock_upgrade *m);

/* Unique (exclusive) holds. */
int shmlock_upgrade_lock(shmlock_upgrade *m);
int shmlock_upgrade_trylock(shmlock_upgrade *m);
int shmlock_upgrade_timedlock(shmlock_upgrade *m, int64_t timeout_ns);
int shmlock_upgrade_unlock(shmlock_upgrade *m);
/* Shared holds (they nest within a handle). */
int shmlock_upgrade_lock_shared(shmlock_upgrade *m);
int shmlock_upgrade_trylock_shared(shmlock_upgrade *m);
int shmlock_upgrade_timedlock_shared(shmlock_upgrade *m, int64_t timeout_ns);
int shmlock_upgrade_unlock_shared(shmlock_upgrade *m);
/* Upgrade holds: shared with readers, exclusive among upgraders and writers. */
int shmlock_upgrade_lock_upgrade(shmlock_upgrade *m);
int shmlock_upgrade_trylock_upgrade(shmlock_upgrade *m);
int shmlock_upgrade_timedlock_upgrade(shmlock_upgrade *m, int64_t timeout_ns);
int shmlock_upgrade_unlock_upgrade(shmlock_upgrade *m);
/* Conversions. */
int shmlock_upgrade_upgrade_to_unique(shmlock_upgrade *m);
int shmlock_upgrade_timed_upgrade_to_unique(shmlock_upgrade *m, int64_t timeout_ns);
int shmlock_upgrade_try_upgrade_to_unique(shmlock_upgrade *m);
int shmlock_upgrade_unique_to_shared(shmlock_upgrade *m);
int shmlock_upgrade_unique_to_upgrade(shmlock_upgrade *m);
/* Clears the inconsistent bit; the handle holds the unique lock. */
int shmlock_upgrade_mark_consistent(shmlock_upgrade *m);
int shmlock_upgrade_inconsistent(const shmlock_upgrade *m);
uint64_t shmlock_upgrade_generation(const shmlock_upgrade *m);

/* ------------------------------------------------------------ lock manager */

/* Named resource locks (package lockmgr): exclusive or collaborative holds
 * by named owners, with expiry, fencing versions and reclaim of the holds of
 * dead processes. */
typedef struct shmlock_lockmgr shmlock_lockmgr;

enum {
	SHMLOCK_EXCLUSIVE = 1,
	SHMLOCK_COLLABORATIVE = 2,
	/* OR'ed into an acquisition's mode (lockmgr.AcquireOptions.Eager): a
	 * waiter that attempts at every end of a hold, without keeping off the
	 * resource after a failed attempt, for a handoff that must happen now,
	 * at the cost of a resource taken in a loop's throughput. */
	SHMLOCK_ACQUIRE_EAGER = 0x100,
};
#define SHMLOCK_RETRY_FOREVER (-1)

/* How long a hold lasts and what to do on a conflict (lockmgr.AcquireOptions;
 * NULL or zeroed: no TTL, fail at once with SHMLOCK_ERESOURCE_LOCKED). The
 * backoff between attempts is lockmgr's default (initial 100 ms, doubling, at
 * most 1 s, each shortened by up to 20% at random) unless set. */
typedef struct shmlock_acquire_options {
	int64_t ttl_ns;             /* 0: until released or the process dies */
	int retries;                /* more attempts after a conflict; SHMLOCK_RETRY_FOREVER */
	int64_t wait_ns;            /* bound of the whole acquisition; 0 none */
	int64_t backoff_initial_ns; /* 0 or less: the default */
	int64_t backoff_max_ns;     /* 0 or less: the default */
} shmlock_acquire_options;

/* What a grant or a refresh returns (lockmgr.LockInfo). */
typedef struct shmlock_lock_info {
	uint64_t version;      /* fencing version after this grant */
	int64_t acquired_ns;   /* CLOCK_MONOTONIC */
	int64_t expires_ns;    /* CLOCK_MONOTONIC; 0 never */
	int reclaimed;         /* a dead process's hold was removed to grant this */
	int inconsistent;      /* a hold ended without release and nobody marked it consistent */
	int attempts;          /* INT_MAX for INT_MAX or more */
} shmlock_lock_info;

int shmlock_lockmgr_open(shmlock_segment *seg, shmlock_lockmgr **out);
int shmlock_lockmgr_close(shmlock_lockmgr *m);
/* info may be NULL. On success returns 0 (reclaims and inconsistency are
 * reported in info, as in Go). */
int shmlock_lockmgr_acquire(shmlock_lockmgr *m, const char *resource, const char *owner, int mode,
                            const shmlock_acquire_options *opts, shmlock_lock_info *info);
int shmlock_lockmgr_release(shmlock_lockmgr *m, const char *resource, const char *owner);
int shmlock_lockmgr_refresh(shmlock_lockmgr *m, const char *resource, const char *owner, int64_t ttl_ns,
                            shmlock_lock_info *info);
/* Clears the inconsistent mark; owner holds a live hold of resource, else
 * SHMLOCK_ELOCK_NOT_HELD. Works after the segment's close, as release does
 * and as the spinlock's and the upgrade mutex's mark_consistent do. */
int shmlock_lockmgr_mark_consistent(shmlock_lockmgr *m, const char *resource, const char *owner);
/* 0 if version is the resource's current one, else SHMLOCK_EVERSION_CONFLICT. */
int shmlock_lockmgr_check_version(shmlock_lockmgr *m, const char *resource, uint64_t version);

#ifdef __cplusplus
}
#endif
#endif
