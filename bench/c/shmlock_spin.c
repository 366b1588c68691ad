/* shmlock_spin.c: libshmlock's spinlock (clib/), pid/tid mode, driven from C.
 * The lock is a named spinlock of a shmlock segment beside the shared file
 * (FILE.shm, as shmctl bench does), so the C library is measured on the very
 * words the Go driver (shmlock_spin) uses. Each worker opens the segment
 * itself and holds the lock with one holder id (shmlock_holder_new) for the
 * whole run, as shmctl bench's Lock.Locker does. The lock calls go through
 * the static library, not inlined: a call, as glibc's pthread_mutex_lock. */
#define PEER_NAME "shmlock_spin_c"
#define PEER_ABOUT "libshmlock spinlock from C, pid/tid mode (robust), one holder per worker"
#define PEER_SHARED 0
#include "harness.h"

#include "shmlock.h"

#define LOCK_NAME "bench"

static shmlock_segment *seg;
static shmlock_spin *lock;
static uint64_t holder;
static char sidecar[4096];
static pid_t driver;

/* The errno a failed libshmlock call stands for, for the harness's messages. */
static int err_of(int rc) { return rc == SHMLOCK_ESYS ? shmlock_errno() : EPROTO; }

static int set_sidecar(const char *path)
{
    int n = snprintf(sidecar, sizeof sidecar, "%s.shm", path);
    return n > 0 && (size_t)n < sizeof sidecar ? 0 : ENAMETOOLONG;
}

/* The driver removes its segment when it exits (workers _exit). */
static void remove_sidecar(void)
{
    if (getpid() == driver) shmlock_remove(sidecar);
}

static int peer_setup(void *area, const char *path)
{
    (void)area;
    int err = set_sidecar(path);
    if (err) return err;
    /* One owner slot; no transaction tables, as shmctl bench's sidecar. */
    shmlock_options o = {.slots = 1, .txn_records = -1, .txn_arena_bytes = -1};
    int rc = shmlock_create(sidecar, &o, &seg);
    if (rc == SHMLOCK_EEXIST) {
        fprintf(stderr, "%s: %s exists, and the driver makes its own segment\n", PEER_NAME, sidecar);
        return EEXIST;
    }
    if (rc < 0) return err_of(rc);
    h_own_file(sidecar, 1);
    driver = getpid();
    atexit(remove_sidecar);
    /* Claim the name once here; the workers name it again. */
    rc = shmlock_spin_named(seg, LOCK_NAME, SHMLOCK_PIDTID, &lock);
    if (rc == 0) rc = shmlock_spin_close(lock);
    lock = NULL;
    int rc2 = shmlock_close(seg); /* the workers open their own */
    seg = NULL;
    return rc < 0 ? err_of(rc) : rc2 < 0 ? err_of(rc2) : 0;
}

static int peer_attach(void *area, const char *path)
{
    (void)area;
    int err = set_sidecar(path);
    if (err) return err;
    int rc = shmlock_open(sidecar, NULL, &seg);
    if (rc == 0) rc = shmlock_spin_named(seg, LOCK_NAME, SHMLOCK_PIDTID, &lock);
    if (rc < 0) return err_of(rc);
    holder = shmlock_holder_new();
    return 0;
}

static inline void peer_lock(void *area)
{
    (void)area;
    int rc = shmlock_spin_lock(lock, holder);
    if (rc == 0) return;
    if (rc > 0) { /* a worker died holding it: an error in a benchmark */
        h_lock_error();
        if (shmlock_spin_mark_consistent(lock, holder) == 0) return;
    }
    fprintf(stderr, "%s: lock: %s\n", PEER_NAME, shmlock_strerror(rc));
    _exit(1);
}

static inline void peer_unlock(void *area)
{
    (void)area;
    int rc = shmlock_spin_unlock(lock, holder);
    if (rc != 0) {
        fprintf(stderr, "%s: unlock: %s\n", PEER_NAME, shmlock_strerror(rc));
        _exit(1);
    }
}
