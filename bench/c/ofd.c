/* ofd.c: Linux open file description locks, fcntl(F_OFD_SETLKW), on the whole
 * shared file. Unlike classic POSIX record locks they belong to the open file
 * description, not the process, so each worker opens the file once: F_WRLCK,
 * F_RDLCK for rw90's reads, F_UNLCK. Two system calls per lock+unlock pair. */
#define PEER_NAME "ofd"
#define PEER_ABOUT "fcntl(2) F_OFD_SETLKW on the whole shared file, one descriptor per worker"
#define PEER_SHARED 1
#include "harness.h"

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

static inline void ofd_or_die(short type, const char *what)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl); /* l_whence SEEK_SET, l_start 0, l_len 0: the whole file; l_pid 0 */
    fl.l_type = type;
    while (fcntl(fd, F_OFD_SETLKW, &fl) != 0)
        if (errno != EINTR) h_die(what, errno);
}

static inline void peer_lock(void *area) { (void)area, ofd_or_die(F_WRLCK, "F_OFD_SETLKW F_WRLCK"); }
static inline void peer_unlock(void *area) { (void)area, ofd_or_die(F_UNLCK, "F_OFD_SETLKW F_UNLCK"); }
static inline void peer_lock_shared(void *area) { (void)area, ofd_or_die(F_RDLCK, "F_OFD_SETLKW F_RDLCK"); }
static inline void peer_unlock_shared(void *area) { peer_unlock(area); }
