/* flock.c: flock(2) on the shared file. Each worker opens the file once and
 * keeps the descriptor (flock locks belong to an open file description, so a
 * descriptor inherited over fork would be one lock holder for all): LOCK_EX,
 * LOCK_SH for rw90's reads, LOCK_UN. Two system calls per lock+unlock pair. */
#define PEER_NAME "flock"
#define PEER_ABOUT "flock(2) on the shared file, one descriptor per worker"
#define PEER_SHARED 1
#include "harness.h"

#include <sys/file.h>

static int fd = -1; /* this worker's own open file description */

static int peer_setup(void *area, const char *path)
{
    (void)area, (void)path;
    return 0;
}

static int peer_attach(void *area, const char *path)
{
    (void)area;
    fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    return fd < 0 ? errno : 0;
}

static inline void flock_or_die(int how, const char *what)
{
    while (flock(fd, how) != 0)
        if (errno != EINTR) h_die(what, errno);
}

static inline void peer_lock(void *area) { (void)area, flock_or_die(LOCK_EX, "flock(LOCK_EX)"); }
static inline void peer_unlock(void *area) { (void)area, flock_or_die(LOCK_UN, "flock(LOCK_UN)"); }
static inline void peer_lock_shared(void *area) { (void)area, flock_or_die(LOCK_SH, "flock(LOCK_SH)"); }
static inline void peer_unlock_shared(void *area) { peer_unlock(area); }
