/* pthread_rwlock.c: glibc's pthread_rwlock_t in the shared mapping, process-shared,
 * of the default kind (readers preferred). The exclusive workloads take the
 * write lock; rw90 reads under the read lock. */
#define PEER_NAME "pthread_rwlock"
#define PEER_ABOUT "glibc pthread_rwlock_t, PROCESS_SHARED, default kind"
#define PEER_SHARED 1
#include "harness.h"

#include <pthread.h>

static int peer_setup(void *area, const char *path)
{
    (void)path;
    pthread_rwlockattr_t attr;
    int err = pthread_rwlockattr_init(&attr);
    if (!err) err = pthread_rwlockattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    if (!err) err = pthread_rwlock_init((pthread_rwlock_t *)area, &attr);
    pthread_rwlockattr_destroy(&attr);
    return err;
}

static int peer_attach(void *area, const char *path)
{
    (void)area, (void)path;
    return 0;
}

static inline void peer_lock(void *area)
{
    int err = pthread_rwlock_wrlock((pthread_rwlock_t *)area);
    if (err != 0) h_die("pthread_rwlock_wrlock", err);
}

static inline void peer_unlock(void *area)
{
    int err = pthread_rwlock_unlock((pthread_rwlock_t *)area);
    if (err != 0) h_die("pthread_rwlock_unlock", err);
}

static inline void peer_lock_shared(void *area)
{
    int err = pthread_rwlock_rdlock((pthread_rwlock_t *)area);
    if (err != 0) h_die("pthread_rwlock_rdlock", err);
}

static inline void peer_unlock_shared(void *area)
{
    peer_unlock(area);
}
