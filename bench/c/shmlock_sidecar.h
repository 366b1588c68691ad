/* shmlock_sidecar.h: the segment beside the bench file (PATH.shmlock) in
 * which the libshmlock drivers of the upgrade mutex and the lock manager
 * keep their lock. The driver makes it (removing a leftover of an
 * interrupted run first) and removes it when it exits; each worker opens it
 * for itself. Include after harness.h and shmlock.h. */
#ifndef SHMLOCK_BENCH_SIDECAR_H
#define SHMLOCK_BENCH_SIDECAR_H

static char h_seg_path[4096];
static pid_t h_seg_creator;

static void h_seg_remove(void)
{
    if (getpid() == h_seg_creator) shmlock_remove(h_seg_path);
}

/* h_seg_open creates the sidecar of path with o (create), or opens it; 0,
 * or an errno value. */
static int h_seg_open(const char *path, const shmlock_options *o, int create, shmlock_segment **seg)
{
    snprintf(h_seg_path, sizeof h_seg_path, "%s.shmlock", path);
    int rc = create ? shmlock_create(h_seg_path, o, seg) : shmlock_open(h_seg_path, NULL, seg);
    if (rc == SHMLOCK_ESYS) return shmlock_errno();
    return rc ? EINVAL : 0;
}

/* h_seg_setup is peer_setup's first step: the driver's own sidecar of
 * path, to be removed when the driver exits. */
static void h_seg_setup(const char *path)
{
    h_seg_creator = getpid();
    snprintf(h_seg_path, sizeof h_seg_path, "%s.shmlock", path);
    shmlock_remove(h_seg_path); /* a leftover of an interrupted run */
    atexit(h_seg_remove);
}

#endif
