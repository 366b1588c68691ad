/* broken.c: a "lock" that excludes nothing and, on its tenth acquisition,
 * writes where a holder would: the harness's checks must fail the run. Built
 * only by the tests. */
#define PEER_NAME "broken"
#define PEER_ABOUT "no lock, one stray write"
#define PEER_SHARED 1
#include "harness.h"

static unsigned long locks, shared_locks;

static struct h_file *file_of(void *area)
{
    return (struct h_file *)((char *)area - offsetof(struct h_file, area));
}

static int peer_setup(void *area, const char *path) { (void)area, (void)path; return 0; }
static int peer_attach(void *area, const char *path) { (void)area, (void)path; return 0; }

/* Exclusive: the counter jumps by 1000 once. */
static inline void peer_lock(void *area)
{
    if (++locks == 10) file_of(area)->counter += 1000;
}
static inline void peer_unlock(void *area) { (void)area; }

/* Shared: one word of the record changes under a reader's nose once. */
static inline void peer_lock_shared(void *area)
{
    if (++shared_locks == 10) file_of(area)->record[3] += 1;
}
static inline void peer_unlock_shared(void *area) { (void)area; }
