/* shmlock_sidecar.h: the segment beside the bench file (PATH.shmlock) in
 * which the libshmlock drivers of the upgrade mutex and the lock manager
 * keep their lock, and the driver's peer_setup and peer_attach over it. The
 * driver makes the segment (removing a leftover of an interrupted run
 * first) and removes it when it exits, or when a signal stops it (the
 * harness's h_own_file); each worker opens it for itself.
 * Include after harness.h and shmlock.h; the driver defines the two
 * functions declared below. */
#ifndef SHMLOCK_BENCH_SIDECAR_H
#define SHMLOCK_BENCH_SIDECAR_H

/* h_sidecar_options fills the options the driver creates the segment with. */
static void h_sidecar_options(shmlock_options *o);
/* h_lock_open opens the driver's lock in seg, in this process: a shmlock
 * return code. */
static int h_lock_open(shmlock_segment *seg);

static char h_seg_path[4096];
static pid_t h_seg_creator;

static void h_seg_remove(void)
{
    if (getpid() == h_seg_creator) shmlock_remove(h_seg_path);
}

/* h_errno_of is shmlock return code rc as the contract's errno value: 0,
 * the system's errno for SHMLOCK_ESYS, EINVAL for any other failure. */
static int h_errno_of(int rc)
{
    if (rc == SHMLOCK_ESYS) return shmlock_errno();
    return rc ? EINVAL : 0;
}

/* h_sidecar_open creates the sidecar of path (create), or opens it, and
 * opens the lock in it. */
static int h_sidecar_open(const char *path, int create)
{
    snprintf(h_seg_path, sizeof h_seg_path, "%s.shmlock", path);
    shmlock_segment *seg;
    int rc;
    if (create) {
        shmlock_options o = {0};
        h_sidecar_options(&o);
        rc = shmlock_create(h_seg_path, &o, &seg);
        if (rc == 0) h_own_file(h_seg_path, 1);
    } else {
        rc = shmlock_open(h_seg_path, NULL, &seg);
    }
    if (rc == 0) rc = h_lock_open(seg);
    return h_errno_of(rc);
}

/* The driver's own sidecar of path, removed when the driver exits. */
static int peer_setup(void *area, const char *path)
{
    (void)area;
    h_seg_creator = getpid();
    snprintf(h_seg_path, sizeof h_seg_path, "%s.shmlock", path);
    shmlock_remove(h_seg_path); /* a leftover of an interrupted run */
    atexit(h_seg_remove);
    return h_sidecar_open(path, 1);
}

static int peer_attach(void *area, const char *path)
{
    (void)area;
    return h_sidecar_open(path, 0);
}

#endif
