/* pthread_mutex.c: glibc's pthread_mutex_t in the shared mapping, process-shared.
 * Built twice: ROBUST=1 (pthread_mutex_robust: the kernel and glibc hand a dead
 * holder's lock to the next locker with EOWNERDEAD, as shmlock does) and ROBUST=0
 * (pthread_mutex: a holder that dies wedges it), which prices robustness. */
#ifndef ROBUST
#error "build with -DROBUST=0 or -DROBUST=1"
#endif
#if ROBUST
#define PEER_NAME "pthread_mutex_robust"
#define PEER_ABOUT "glibc pthread_mutex_t, PROCESS_SHARED, ROBUST"
#else
#define PEER_NAME "pthread_mutex"
#define PEER_ABOUT "glibc pthread_mutex_t, PROCESS_SHARED"
#endif
#define PEER_SHARED 0
#include "harness.h"

#include <pthread.h>

static int peer_setup(void *area, const char *path)
{
    (void)path;
    pthread_mutexattr_t attr;
    int err = pthread_mutexattr_init(&attr);
    if (!err) err = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
#if ROBUST
    if (!err) err = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
#endif
    if (!err) err = pthread_mutex_init((pthread_mutex_t *)area, &attr);
    pthread_mutexattr_destroy(&attr);
    return err;
}

static int peer_attach(void *area, const char *path)
{
    (void)area, (void)path;
    return 0;
}

static inline void peer_lock(void *area)
{
    int err = pthread_mutex_lock((pthread_mutex_t *)area);
    if (err == 0) return;
#if ROBUST
    if (err == EOWNERDEAD) { /* a worker died holding it: an error in a benchmark */
        h_lock_error();
        err = pthread_mutex_consistent((pthread_mutex_t *)area);
        if (err == 0) return;
    }
#endif
    h_die("pthread_mutex_lock", err);
}

static inline void peer_unlock(void *area)
{
    int err = pthread_mutex_unlock((pthread_mutex_t *)area);
    if (err != 0) h_die("pthread_mutex_unlock", err);
}
