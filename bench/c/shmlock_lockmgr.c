/* shmlock_lockmgr.c: libshmlock's lock manager (the C port of package
 * lockmgr) in a shmlock segment beside the bench file (PATH.shmlock): one
 * named resource, "bench", which every worker acquires as owner
 * worker-PID, exclusively for the exclusive workloads and collaboratively
 * for rw90's reads, waiting as long as it takes (woken by releases), as
 * shmctl bench --lock lockmgr does in Go. A reclaim report counts as a
 * lock error: nobody dies in a bench. */
#define PEER_NAME "shmlock_lockmgr_c"
#define PEER_ABOUT "libshmlock lock manager (C), one named resource, robust"
#define PEER_SHARED 1
#include "harness.h"

#include "shmlock.h"

#include "shmlock_sidecar.h"

static shmlock_lockmgr *h_mgr;
static char h_owner[32];
static const shmlock_acquire_options h_wait = {.retries = SHMLOCK_RETRY_FOREVER};

static void h_sidecar_options(shmlock_options *o)
{
    /* As shmctl bench's (1 + lockmgr.MaxHolders/layout.LockMgrHolders):
     * the header, the resource's entry and the overflow entries its most
     * holders need. */
    o->lockmgr_entries = 9;
}

static int h_lock_open(shmlock_segment *seg)
{
    snprintf(h_owner, sizeof h_owner, "worker-%d", (int)getpid());
    return shmlock_lockmgr_open(seg, &h_mgr);
}

static inline void h_acquire(int mode)
{
    shmlock_lock_info info;
    int rc = shmlock_lockmgr_acquire(h_mgr, "bench", h_owner, mode, &h_wait, &info);
    if (rc != 0) h_die("shmlock_lockmgr_acquire", -rc);
    if (info.reclaimed || info.inconsistent) h_lock_error();
}

static inline void h_release(void)
{
    int rc = shmlock_lockmgr_release(h_mgr, "bench", h_owner);
    if (rc != 0) h_die("shmlock_lockmgr_release", -rc);
}

static inline void peer_lock(void *area)
{
    (void)area;
    h_acquire(SHMLOCK_EXCLUSIVE);
}

static inline void peer_unlock(void *area)
{
    (void)area;
    h_release();
}

static inline void peer_lock_shared(void *area)
{
    (void)area;
    h_acquire(SHMLOCK_COLLABORATIVE);
}

static inline void peer_unlock_shared(void *area)
{
    (void)area;
    h_release();
}
