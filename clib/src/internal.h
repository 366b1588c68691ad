/* internal.h: what the parts of libshmlock share and users never see.
 *
 * The structs are the words of docs/FORMAT.md (format version 5), offset for
 * offset; the _Static_asserts hold them to it. Every word that several
 * processes change is an _Atomic and is read and written whole with the
 * seq_cst atomics of <stdatomic.h> (what Go's sync/atomic compiles to), never
 * with a plain load or store. Little-endian hosts only (x86-64, arm64).
 *
 * The parts (one .c file each, one owner each):
 *   errors.c     shmlock_strerror, codes, the thread's errno
 *   ident.c      packed identities, liveness, holder ids, the clock
 *   futex.c      futex wait/wake and the sleepers-word protocol
 *   segment.c    open/create/close/validate, CRC-32C, the reboot rewrite
 *   directory.c  the registry lock, claim directories and claim refs
 *   spinlock.c   owner slots
 *   upgrade.c    upgrade mutexes
 *   lockmgr.c    the lock manager
 *   stats.c      the contention counters (lock_stats)
 */
#ifndef SHMLOCK_INTERNAL_H
#define SHMLOCK_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shmlock.h"

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "libshmlock supports x86-64 and arm64 (little-endian, lock-free 64-bit atomics)"
#endif

#define SHM_EXPORT __attribute__((visibility("default")))
#define SHM_LIKELY(x) __builtin_expect(!!(x), 1)
#define SHM_UNLIKELY(x) __builtin_expect(!!(x), 0)

typedef _Atomic uint32_t a32;
typedef _Atomic uint64_t a64;

/* ------------------------------------------------------------------ layout */

#define SHM_MAGIC "SHMLOCK\0"
#define SHM_VERSION 5
_Static_assert(SHM_VERSION == SHMLOCK_FORMAT_VERSION, "the public header names the format it speaks");
#define SHM_HEADER_SIZE 1024
#define SHM_TABLE_COUNT 12
#define SHM_OFF_MUTABLE 0x3C0 /* the mutable line; the checksum covers [0, SHM_OFF_MUTABLE) */
#define SHM_TABLES_OFF 0x60
#define SHM_DESC_ROOM ((SHM_OFF_MUTABLE - SHM_TABLES_OFF) / 32) /* descriptors that fit */
#define SHM_READY 0x52454459u
#define SHM_NAME_LEN 40      /* names of claim and region directories, resources */
#define SHM_OWNER_NAME_LEN 32 /* lock manager owner names */

enum shm_table_kind {
	SHM_OWNER_SLOTS = 1,
	SHM_SLOT_DIRECTORY = 2,
	SHM_UPGRADES = 3,
	SHM_UPGRADE_DIRECTORY = 4,
	SHM_TXN_RECORDS = 5,
	SHM_TXN_ARENA = 6,
	SHM_LOCKMGR = 7,
	SHM_UPGRADE_READERS = 8,
	SHM_CLAIM_REFS = 9,
	SHM_REGION_DIRECTORY = 10,
	SHM_DATA = 11,
	SHM_LOCK_STATS = 12,
};

struct shm_table_desc {
	uint32_t kind;
	uint32_t entry_size;
	uint64_t count;
	uint64_t offset;
	uint64_t reserved;
};

struct shm_header {
	char magic[8];
	uint32_t version;
	uint32_t header_size;
	uint64_t total_size;
	uint64_t created;
	uint8_t boot_id[16];
	uint64_t pidns;
	uint64_t creator;
	uint32_t table_count;
	uint32_t flags;
	uint8_t reserved1[24];
	struct shm_table_desc tables[SHM_TABLE_COUNT];
	uint8_t reserved_desc[(SHM_DESC_ROOM - SHM_TABLE_COUNT) * 32]; /* room for more, zero */
	a32 ready;
	uint32_t checksum;
	a64 registry;
	uint8_t owners_boot[16]; /* changed only under the registry lock, by whole u64 words */
	a64 registry_gen;
	uint8_t reserved2[24];
};

/* Identities (FORMAT.md, Identities). */
#define SHM_PID_BITS 22
#define SHM_START_BITS 41
#define SHM_PID_MASK ((UINT64_C(1) << SHM_PID_BITS) - 1)
#define SHM_START_MASK ((UINT64_C(1) << SHM_START_BITS) - 1)
#define SHM_STALE_BIT (UINT64_C(1) << 63)

struct shm_owner_slot {
	a64 pid;
	a64 tid;
	a64 token;
	a32 recursion;
	a32 pad; /* a sleepers word */
};
#define SHM_SLOT_INCONSISTENT (UINT32_C(1) << 31)
#define SHM_SLOT_RECURSION_MASK (SHM_SLOT_INCONSISTENT - 1)

struct shm_dir_entry {
	a32 state;
	a32 refs;
	a32 name_len;
	a32 use;
	a64 claimer;
	a64 name[5];
};
enum { SHM_DIR_FREE = 0, SHM_DIR_CLAIMED = 1 };

struct shm_claim_ref {
	a64 owner;
	a32 target; /* kind << 24 | index */
	a32 count;
};

struct shm_upgrade_entry {
	a32 state;
	a32 shared_gate;
	a32 unique_gate;
	a32 waiters;
	a64 writer;
	a64 writer_tid;
	a64 upgrader;
	a64 upgrader_tid;
	a64 generation;
	a32 writer_gate;
	a32 writer_sleepers;
};
#define SHM_UPG_WRITE (UINT32_C(1) << 31)
#define SHM_UPG_UPGRADE (UINT32_C(1) << 30)
#define SHM_UPG_PENDING (UINT32_C(1) << 29)
#define SHM_UPG_INCONSISTENT (UINT32_C(1) << 28)
#define SHM_UPG_WRITER_UNIQUE (UINT64_C(1) << 61) /* in Writer: its holder holds the unique lock */

struct shm_reader_record {
	a64 owner;
	a32 count;
	a32 pad;
};

struct shm_lockmgr_holder {
	a64 process;
	a64 companion;
	a64 acquired;
	a64 expires;
	a64 owner[4];
};

struct shm_lockmgr_entry {
	a64 lock;
	a32 ctl;
	a32 gate;
	a32 sleepers;
	a32 next;
	a64 version;
	a64 hash;
	a64 last_expired;
	a64 grants;
	a64 releases;
	a64 hold_nanos;
	a64 conflicts;
	a32 expired;
	a32 reclaimed;
	a64 name[5];
	struct shm_lockmgr_holder holders[2];
};

/* LockStats (layout/stats.go): one per lock, bumped on slow paths only;
 * entries [0,S) owner slots, then upgrades, lock-manager entries, txn
 * records. */
#define SHM_STATS_BUCKETS 6
struct shm_lock_stats {
	a64 contended;  /* acquisitions not granted at the first try */
	a64 sleeps;     /* futex sleeps */
	a64 wakeups;    /* wakes by the releasing side that woke someone */
	a64 wait_nanos; /* first failed try to grant or give-up */
	a32 reclaims;   /* holds taken from or ended for dead processes */
	a32 timeouts;   /* waits that gave up */
	a32 wait_hist[SHM_STATS_BUCKETS]; /* <=10us, <=100us, <=1ms, <=10ms, <=100ms, longer */
};

struct shm_region_entry {
	a32 state;
	a32 name_len;
	a64 offset;
	a64 size;
	a64 name[5];
};

_Static_assert(sizeof(struct shm_header) == SHM_HEADER_SIZE, "header size");
_Static_assert(offsetof(struct shm_header, table_count) == 64, "TableCount");
_Static_assert(offsetof(struct shm_header, tables) == 96, "Tables");
_Static_assert(offsetof(struct shm_header, ready) == 0x3C0, "Ready");
_Static_assert(offsetof(struct shm_header, checksum) == 0x3C4, "Checksum");
_Static_assert(offsetof(struct shm_header, registry) == 0x3C8, "Registry");
_Static_assert(offsetof(struct shm_header, owners_boot) == 0x3D0, "OwnersBoot");
_Static_assert(offsetof(struct shm_header, registry_gen) == 0x3E0, "RegistryGen");
_Static_assert(sizeof(struct shm_table_desc) == 32, "table descriptor");
_Static_assert(sizeof(struct shm_owner_slot) == 32, "OwnerSlot");
_Static_assert(sizeof(struct shm_dir_entry) == 64, "DirEntry");
_Static_assert(offsetof(struct shm_dir_entry, name) == 24, "DirEntry.Name");
_Static_assert(sizeof(struct shm_claim_ref) == 16, "ClaimRef");
_Static_assert(sizeof(struct shm_upgrade_entry) == 64, "UpgradeEntry");
_Static_assert(offsetof(struct shm_upgrade_entry, writer_gate) == 56, "WriterGate");
_Static_assert(sizeof(struct shm_reader_record) == 16, "ReaderRecord");
_Static_assert(sizeof(struct shm_lockmgr_holder) == 64, "LockMgrHolder");
_Static_assert(sizeof(struct shm_lockmgr_entry) == 256, "LockMgrEntry");
_Static_assert(offsetof(struct shm_lockmgr_entry, name) == 88, "LockMgrEntry.Name");
_Static_assert(offsetof(struct shm_lockmgr_entry, holders) == 128, "LockMgrEntry.Holders");
_Static_assert(sizeof(struct shm_region_entry) == 64, "RegionEntry");
_Static_assert(sizeof(struct shm_lock_stats) == 64, "LockStats");
_Static_assert(offsetof(struct shm_lock_stats, reclaims) == 32, "LockStats.Reclaims");
_Static_assert(offsetof(struct shm_lock_stats, wait_hist) == 40, "LockStats.WaitHist");
_Static_assert(sizeof(a64) == 8 && _Alignof(a64) == 8, "64-bit atomics");

/* ---------------------------------------------------------------- segments */

struct shm_table {
	void *base;      /* NULL when the table is absent (count 0) */
	uint64_t count;
	uint32_t entry_size;
};

struct shmlock_segment {
	int fd;
	bool read_only;
	atomic_bool closed;
	uint8_t *base;
	size_t size;
	struct shm_header *hdr;
	struct shm_table tables[SHM_TABLE_COUNT + 1]; /* by kind; [0] unused */
	char *path;
	bool creator;                 /* this handle created the segment */
	atomic_uint refs;             /* the segment's own + one per handle (shm_seg_get) */
	a32 watchers;                 /* upgrade waits holding part of a lock (upgrade.c's close watch) */
	pthread_mutex_t registry_mu;  /* this process's directory changes, one at a time */
};

/* Lock handles hold a reference to their segment from open to close: the
 * mapping stays until the last is dropped, so a handle's release after
 * shmlock_close still releases in the file (as Go's do). Check shm_closed
 * before every acquisition. */
void shm_seg_get(shmlock_segment *seg);
/* shm_wake_watchers is shmlock_close's part of the upgrade mutex's close
 * watch (upgrade.c): with the segment closed, wake every upgrade mutex's
 * gates and wait until no wait of this process holds part of a lock. */
void shm_wake_watchers(shmlock_segment *seg);
void shm_seg_put(shmlock_segment *seg);
/* Whether a recorded identity is alive as far as the segment can tell
 * (shm.Segment.OwnerAlive): never while the segment's owners were recorded
 * under another boot (a read-only handle can see that), else shm_alive. */
bool shm_owner_alive(shmlock_segment *seg, uint64_t identity);
/* The LockStats of entry index of table kind (SHM_OWNER_SLOTS, SHM_UPGRADES,
 * SHM_LOCKMGR, SHM_TXN_RECORDS), or NULL (no stats table, no such lock). */
struct shm_lock_stats *shm_lock_stats(shmlock_segment *seg, int kind, uint64_t index);
/* Stores 0 into every counter of st, for a lock whose entry a new name or
 * resource takes (LockStats.Reset). NULL-safe. */
void shm_stats_reset(struct shm_lock_stats *st);
/* Records a finished wait that missed its first try (LockStats.RecordWait):
 * since is shm_now_ns() at the first failed try. NULL-safe. */
void shm_stats_wait(struct shm_lock_stats *st, int64_t since, bool gave_up);
/* shm_stats_spun records a wait that ended while it still spun, before any
 * yield or sleep: Contended and the first bucket, no time (FORMAT.md:
 * timing it would cost two clock reads, as much as a short handoff). */
void shm_stats_spun(struct shm_lock_stats *st, bool gave_up);
/* Counts one event in a counter of a possibly NULL entry. */
#define SHM_STATS_ADD(st, field) \
	do { \
		if (st) \
			atomic_fetch_add(&(st)->field, 1); \
	} while (0)
/* CRC-32C (Castagnoli) of buf. */
uint32_t shm_crc32c(const void *buf, size_t n);
/* layout.Validate of the first n bytes of a file of file_size bytes; fills
 * out[1..12] with the table descriptors. */
int shm_validate(const uint8_t *hdr, size_t n, uint64_t file_size, struct shm_table_desc out[SHM_TABLE_COUNT + 1]);

/* The table of kind, or NULL if absent; *count gets its entries. */
static inline void *shm_table_of(shmlock_segment *seg, int kind, uint64_t *count)
{
	*count = seg->tables[kind].count;
	return seg->tables[kind].base;
}

/* SHM_STORE_OWNED stores word *p, which only the holder of a lock writes
 * (a holder's thread id, a generation, a lock-manager entry's words under
 * its lock), as Go's memview.StoreOwned does: a release store (a plain MOV
 * on x86-64), not a sequentially consistent one (an XCHG), so the holder's
 * stores keep their program order for the readers that take no lock, and
 * the lock's later seq_cst store or CAS publishes them all. Any a32 or a64. */
#define SHM_STORE_OWNED(p, v) atomic_store_explicit((p), (v), memory_order_release)

/* A spinning waiter's pause: it frees the core's resources for its
 * sibling thread and stops the loop from flooding the memory system. */
static inline void shm_cpu_relax(void)
{
#if defined(__x86_64__)
	__builtin_ia32_pause();
#else
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

static inline bool shm_closed(const shmlock_segment *seg)
{
	return atomic_load_explicit(&((shmlock_segment *)seg)->closed, memory_order_acquire);
}

/* ------------------------------------------------------ errors (errors.c) */

/* Records errno for shmlock_errno and returns SHMLOCK_ESYS. */
int shm_sys_error(int err);

/* Tests set it to run in shmlock_remove between its check of the file and
 * the removal of the name (to put another file there). */
extern void (*shm_test_hook_before_unlink)(void);
/* And this one once the name is moved aside, with the hidden path (to kill
 * the remover there). */
extern void (*shm_test_hook_aside)(const char *aside);
/* Tests set it to make shmlock_create act as on a file system without
 * O_TMPFILE (a pending file under a hidden name), and this hook to run once
 * the segment is complete, before it is linked under its name (to kill the
 * creator there). */
extern bool shm_test_no_tmpfile;
extern void (*shm_test_hook_before_link)(void);
/* And this one in the upgrade mutexes' liveness checks, just before the
 * check of identity (to change the mutex at that instant). */
extern void (*shm_test_hook_alive)(uint64_t identity);
/* Tests set it to a count of failed attempts the lock manager's next
 * acquisitions take as made before their first failure (to reach the
 * attempt counter's bounds without billions of attempts); 0 otherwise. */
extern int64_t shm_test_lockmgr_attempts_before;
/* Tests set it to the longest sleep of a waiter between its looks for a
 * dead holder (spinlock, upgrade mutex, lock-manager resource), in place of
 * each one's own (50 ms, or the lock manager's 100 ms slice); 0 otherwise.
 * A test that counts the wake-up a release gives a sleeper sets it long, so
 * that the sleeper is still in the kernel when the release comes: a sleep
 * that timed out just before would leave the release nobody to wake. */
extern int64_t shm_test_liveness_ns;

/* shm_liveness_ns is ns, or the tests' shm_test_liveness_ns if set. */
static inline int64_t shm_liveness_ns(int64_t ns)
{
	int64_t t = shm_test_liveness_ns;
	return SHM_UNLIKELY(t > 0) ? t : ns;
}

/* ---------------------------------------------- identities, clock (ident.c) */

/* This process's packed identity (recomputed after fork). */
uint64_t shm_self(void);
/* Liveness of a packed identity; 0 and stale words are dead. Answers
 * "alive" may be cached for up to 50 ms (as Go's callers cache them). */
bool shm_alive(uint64_t identity);
/* Liveness from /proc, never cached. */
bool shm_alive_uncached(uint64_t identity);
/* A random non-zero 64-bit number (getrandom, then a per-thread generator). */
uint64_t shm_random64(void);
/* CLOCK_MONOTONIC in nanoseconds (clock.c: the time-stamp counter,
 * extrapolated, where the kernel keeps time by it; readings may step back
 * by up to a microsecond where a new anchor is taken). */
int64_t shm_now_ns(void);
/* CLOCK_MONOTONIC in nanoseconds, from the vDSO at every call. */
int64_t shm_vdso_now_ns(void);
/* The fast clock's state, for tests: -1 off for good (no invariant counter,
 * another clocksource, SHMLOCK_CLOCK=vdso, not x86-64), 0 calibrating or
 * distrusted, 1 extrapolating from a live anchor. */
int shm_clock_state(void);

/* shm_keep_off spins for ns without touching shared memory: a waiter's
 * pause before it looks at a contended word again (upgrade writers, lock
 * manager waiters). */
static inline void shm_keep_off(int64_t ns)
{
	for (int64_t start = shm_now_ns(); shm_now_ns() - start < ns;)
		shm_cpu_relax();
}

/* The running kernel's boot id (16 bytes); 0 or an error. */
int shm_boot_id(uint8_t out[16]);

/* ------------------------------------------------ futex, sleepers (futex.c) */

/* FUTEX_WAIT (shared, not private: the word is in a MAP_SHARED file) while
 * *w == val, for at most timeout_ns (negative: no limit). 0 woken, changed
 * or interrupted; SHMLOCK_ETIMEDOUT. */
int shm_futex_wait(a32 *w, uint32_t val, int64_t timeout_ns);
/* FUTEX_WAKE up to n; returns how many were woken (0 on error). */
int shm_futex_wake(a32 *w, int n);

/* The sleepers word (internal/sleepers): bits 0-15 registered sleepers,
 * 16-23 the drop epoch, 24-30 futile wakes in a row, 31 a woken sleeper has
 * not run yet. */
#define SHM_SLEEPERS_COUNT 0x0000ffffu
#define SHM_SLEEPERS_EPOCH_SHIFT 16
#define SHM_SLEEPERS_EPOCH (0xffu << SHM_SLEEPERS_EPOCH_SHIFT)
#define SHM_SLEEPERS_FUTILE_SHIFT 24
#define SHM_SLEEPERS_FUTILE (0x7fu << SHM_SLEEPERS_FUTILE_SHIFT)
#define SHM_SLEEPERS_WAKE_PENDING (UINT32_C(1) << 31)
/* Register returns the sleeper's ticket (the epoch it registered in);
 * unregister takes it off the count only in that epoch. */
uint32_t shm_sleepers_register(a32 *w);
void shm_sleepers_unregister(a32 *w, uint32_t ticket);
/* RegisterIn, UnregisterIn and FutileIn, for a word that shares its low bits
 * with flags of the caller's (the upgrade mutex's waiters word): count is
 * its count bits (from bit 0), epoch its epoch bits, both below the futile
 * count; other low bits are kept. */
uint32_t shm_sleepers_register_in(a32 *w, uint32_t epoch);
void shm_sleepers_unregister_in(a32 *w, uint32_t count, uint32_t epoch, uint32_t ticket);
/* The wakes report whether they found a sleeper in the kernel (for the
 * contention counters). */
bool shm_sleepers_wake_one(a32 *w, a32 *gate);
bool shm_sleepers_wake_all(a32 *w, a32 *gate);
void shm_sleepers_futile_in(a32 *w, uint32_t count, uint32_t epoch);

/* ---------------------------------------------------- names (directory.c) */

/* Whether the n bytes at s are valid UTF-8 (as Go decodes it: no overlong
 * forms, surrogates or code points past U+10FFFF) without a control
 * character (Unicode Cc: U+0000-U+001F, U+007F-U+009F): the characters of
 * every name of the format (layout.CheckName, lockmgr's checkName). */
bool shm_name_chars_valid(const char *s, size_t n);

/* Packs a lock name (1..40 bytes of UTF-8, no control characters) into five
 * little-endian words; SHMLOCK_EBADNAME. */
int shm_pack_name(const char *name, uint64_t words[5], uint32_t *len);

/* ------------------------------------------- claim directories (directory.c) */

/* Claims the entry of table kind (SHM_OWNER_SLOTS or SHM_UPGRADES) named
 * name for use (0 unsaid), as shm.Segment.ClaimAs: *index gets the entry. */
int shm_claim(shmlock_segment *seg, int kind, const char *name, uint32_t use, size_t *index);
/* Releases one claim of this process on entry index (shm.Claim.Release). */
int shm_release_claim(shmlock_segment *seg, int kind, size_t index);
/* The use recorded with the claim of entry index of table kind (shm.Segment.
 * ClaimUse): 0 if the entry is not claimed or its claimants never said. It
 * takes no lock: the directory of the moment. */
uint32_t shm_claim_use(shmlock_segment *seg, int kind, size_t index);
/* shm.Segment.AdoptUse: records use with the claim of entry index if its
 * claimants said none (use 0); SHMLOCK_EUSEMISMATCH if it records
 * another; an entry not claimed records nothing. */
int shm_claim_adopt_use(shmlock_segment *seg, int kind, size_t index, uint32_t use);
/* The registry lock of the header (held while changing a directory). */
int shm_registry_lock(shmlock_segment *seg);
void shm_registry_unlock(shmlock_segment *seg);
/* shm's recountRefs: after the registry lock's holder died (or the machine
 * rebooted under it), each claimed entry's Refs from the records naming it. */
void shm_recount_refs(shmlock_segment *seg);

/* The data region named name (shm.Segment.Data): found, or claimed with
 * size bytes if no region has that name (size 0 only finds). *out gets its
 * memory. SHMLOCK_EINVAL for another
 * size (shm.ErrRegionSize), SHMLOCK_ETABLEFULL when the data area or the
 * directory is full (shm.ErrDataFull, ErrTableFull), SHMLOCK_EMALFORMED
 * for a damaged directory, SHMLOCK_ENOTFOUND. */
int shm_region(shmlock_segment *seg, const char *name, uint64_t size, void **out);

#endif
