/* shmlock_upgrade.c: libshmlock's upgrade mutex (the C port of package
 * upgrade) in a shmlock segment beside the bench file (PATH.shmlock), one
 * handle per worker process. The exclusive workloads take the unique lock;
 * rw90 reads under shared holds. A reclaim report (OWNERDEAD,
 * INCONSISTENT) counts as a lock error: nobody dies in a bench. */
#define PEER_NAME "shmlock_upgrade_c"
#define PEER_ABOUT "libshmlock upgrade mutex (C), robust"
#define PEER_SHARED 1
#include "harness.h"

#include "shmlock.h"

#include "shmlock_sidecar.h"

static shmlock_upgrade *h_upg;

static void h_sidecar_options(shmlock_options *o)
{
    o->upgrades = 1;
    o->upgrade_readers = H_MAX_PROCS;
}

static int h_lock_open(shmlock_segment *seg) { return shmlock_upgrade_open(seg, 0, &h_upg); }

static inline void peer_lock(void *area)
{
    (void)area;
    int rc = shmlock_upgrade_lock(h_upg);
    if (rc < 0) h_die("shmlock_upgrade_lock", -rc);
    if (rc > 0) h_lock_error();
}

static inline void peer_unlock(void *area)
{
    (void)area;
    int rc = shmlock_upgrade_unlock(h_upg);
    if (rc != 0) h_die("shmlock_upgrade_unlock", -rc);
}

static inline void peer_lock_shared(void *area)
{
    (void)area;
    int rc = shmlock_upgrade_lock_shared(h_upg);
    if (rc != 0) h_die("shmlock_upgrade_lock_shared", -rc);
}

static inline void peer_unlock_shared(void *area)
{
    (void)area;
    int rc = shmlock_upgrade_unlock_shared(h_upg);
    if (rc != 0) h_die("shmlock_upgrade_unlock_shared", -rc);
}
