/* harness.h: the driver contract of bench/README.md, for drivers in C and C++.
 *
 * A driver is one .c or .cpp file that defines, before including this header,
 *
 *   #define PEER_NAME   "pthread_mutex"       the JSON's "peer", also the binary's name
 *   #define PEER_ABOUT  "glibc pthread_mutex_t, PROCESS_SHARED"   first part of "detail"
 *   #define PEER_SHARED 0 or 1                1: it has a shared mode, and runs rw90
 *                                             and uncontended_shared
 *
 * and after including it, these functions:
 *
 *   static int  peer_setup(void *area, const char *path);   in the driver, once, before
 *                                    any worker starts: build the lock in area (56 KiB of
 *                                    the shared mapping). 0, or an errno value.
 *   static int  peer_attach(void *area, const char *path);  in each worker, after it
 *                                    mapped the file itself (e.g. open a descriptor).
 *   static inline void peer_lock(void *area);               exclusive
 *   static inline void peer_unlock(void *area);
 *   static inline void peer_lock_shared(void *area);        only if PEER_SHARED
 *   static inline void peer_unlock_shared(void *area);
 *
 * A lock call that reports a recoverable anomaly (a robust mutex's EOWNERDEAD)
 * counts it with h_lock_error(); that fails the run. One that cannot go on calls
 * h_die(), which ends the worker with status 1. A peer_setup that makes a file
 * of its own (a sidecar segment) records it with h_own_file(), so that a
 * SIGINT, SIGTERM or SIGHUP that stops the driver removes it with the shared
 * file. The header holds main(): the
 * hooks are static and defined in the same file, so the compiler inlines them
 * into the workload loops and a lock costs what it costs, not a call more.
 *
 * It is C11 (gnu11) and compiles as C++17 too, for the Boost drivers.
 */
#ifndef SHMLOCK_BENCH_HARNESS_H
#define SHMLOCK_BENCH_HARNESS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if !defined(PEER_NAME) || !defined(PEER_ABOUT) || !defined(PEER_SHARED)
#error "define PEER_NAME, PEER_ABOUT and PEER_SHARED before including harness.h"
#endif

#ifdef __cplusplus
#define H_STATIC_ASSERT(c, m) static_assert(c, m)
#define H_CAST(T, p) (reinterpret_cast<T>(p))
#else
#define H_STATIC_ASSERT(c, m) _Static_assert(c, m)
#define H_CAST(T, p) ((T)(p))
#endif

/* ---- the shared file ----------------------------------------------------
 *
 * 64 KiB, the same layout as shmctl bench (cmd/shmctl/internal/bench/file.go),
 * so every contender's hot words sit on the same cache lines. The counter,
 * the turn and the record are plain memory on purpose: the workloads update
 * them with ordinary loads and stores under the lock, so a lock that failed
 * to exclude loses updates or tears records, and validation says so.
 */
enum {
    H_MAX_PROCS = 64,
    H_SPIN_BEFORE_YIELD = 1000, /* waits outside a lock: plain loads, then sched_yield each */
    H_FILE_SIZE = 64 * 1024,
    H_GO_START = 1,
    H_GO_ABORT = 2,
};

struct h_stat { /* one worker's results, 64 bytes */
    uint64_t end_ns, reads, writes, torn, errors, done, retries;
    uint64_t cpu_ns; /* the process's CPU time in its workload loop; 0: unknown */
};

struct h_file {
    uint32_t ready;       /* 0x0000: workers at the start barrier */
    uint32_t go;          /* 0x0004: H_GO_START or H_GO_ABORT */
    uint8_t pad0[0x38];
    uint64_t counter;     /* 0x0040: counter, pingpong turns taken */
    uint8_t pad1[0x38];
    uint64_t turn;        /* 0x0080: pingpong: whose turn, 0 or 1 */
    uint8_t pad2[0x38];
    uint64_t record[8];   /* 0x00C0: rw90's record, one cache line */
    uint8_t pad3[0x1000 - 0x100];
    struct h_stat stat[H_MAX_PROCS]; /* 0x1000 */
    uint8_t area[H_FILE_SIZE - 0x2000]; /* 0x2000: the lock's 56 KiB */
};

H_STATIC_ASSERT(offsetof(struct h_file, counter) == 0x40, "counter at 0x40");
H_STATIC_ASSERT(offsetof(struct h_file, turn) == 0x80, "turn at 0x80");
H_STATIC_ASSERT(offsetof(struct h_file, record) == 0xC0, "record at 0xC0");
H_STATIC_ASSERT(offsetof(struct h_file, stat) == 0x1000, "stats at 0x1000");
H_STATIC_ASSERT(sizeof(struct h_stat) == 64, "a stat slot is 64 bytes");
H_STATIC_ASSERT(offsetof(struct h_file, area) == 0x2000, "lock area at 0x2000");
H_STATIC_ASSERT(sizeof(struct h_file) == H_FILE_SIZE, "the file is 64 KiB");

/* ---- the hooks the driver defines ---- */
static int peer_setup(void *area, const char *path);
static int peer_attach(void *area, const char *path);
static inline void peer_lock(void *area);
static inline void peer_unlock(void *area);
#if PEER_SHARED
static inline void peer_lock_shared(void *area);
static inline void peer_unlock_shared(void *area);
#endif

/* ---- helpers for the driver ---- */

static uint64_t h_lock_errors; /* this worker's anomalies, added to its stat slot */

static inline void h_lock_error(void) { h_lock_errors++; }

static void h_die(const char *what, int err)
{
    fprintf(stderr, "%s: %s: %s\n", PEER_NAME, what, strerror(err));
    _exit(1);
}

static inline void h_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- the files the driver made, removed when a signal stops it ----
 *
 * SIGINT, SIGTERM or SIGHUP (Ctrl-C, timeout(1), a closed terminal) killed
 * the driver at once and left the shared file and any sidecar behind. The
 * driver records each file it makes (h_own_file, with these signals blocked
 * from before the shared file is made until every worker is forked, so that
 * no file is made unrecorded and no worker unknown); the handler kills the
 * workers, unlinks the recorded paths and dies of the signal with its
 * default action, so the status is the shell's 128+N. It calls only
 * async-signal-safe functions on what was prepared before. A signal ignored
 * when the driver started (a shell's background job ignores SIGINT) stays
 * ignored.
 */
enum { H_OWN_MAX = 4, H_PATH_MAX = 4096 };
static char h_own[H_OWN_MAX][H_PATH_MAX];
static volatile sig_atomic_t h_owned;
static pid_t h_workers[H_MAX_PROCS];
static volatile sig_atomic_t h_nworkers;
static pid_t h_driver_pid;
static const int h_stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
static int h_handled[sizeof h_stop_signals / sizeof h_stop_signals[0]];

/* h_own_file records path, made by the driver, for removal on a signal.
 * A path without a slash is a libshmlock segment's bare name (pass
 * bare_is_shm), which the library puts in /dev/shm. */
static void h_own_file(const char *path, int bare_is_shm)
{
    if (h_owned >= H_OWN_MAX) return;
    const char *dir = bare_is_shm && !strchr(path, '/') ? "/dev/shm/" : "";
    int n = snprintf(h_own[h_owned], H_PATH_MAX, "%s%s", dir, path);
    if (n > 0 && n < H_PATH_MAX) h_owned = h_owned + 1;
}

static void h_on_stop(int sig)
{
    if (getpid() == h_driver_pid) {
        for (int i = 0; i < h_nworkers; i++) kill(h_workers[i], SIGKILL);
        for (int i = 0; i < h_owned; i++) unlink(h_own[i]);
    }
    signal(sig, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    raise(sig); /* pending until unblocked, then the default action: death */
    sigprocmask(SIG_UNBLOCK, &s, NULL);
}

/* h_stop_mask fills s with the signals that stop the driver. */
static void h_stop_mask(sigset_t *s)
{
    sigemptyset(s);
    for (size_t i = 0; i < sizeof h_stop_signals / sizeof h_stop_signals[0]; i++)
        sigaddset(s, h_stop_signals[i]);
}

/* h_catch_stops blocks the stop signals (old gets the mask before) and
 * installs the handler for those not ignored. */
static void h_catch_stops(sigset_t *old)
{
    sigset_t s;
    h_stop_mask(&s);
    sigprocmask(SIG_BLOCK, &s, old);
    h_driver_pid = getpid();
    for (size_t i = 0; i < sizeof h_stop_signals / sizeof h_stop_signals[0]; i++) {
        struct sigaction was, sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = h_on_stop;
        sigfillset(&sa.sa_mask); /* one removal at a time */
        if (sigaction(h_stop_signals[i], NULL, &was) == 0 && was.sa_handler != SIG_IGN) {
            sigaction(h_stop_signals[i], &sa, NULL);
            h_handled[i] = 1;
        }
    }
}

/* h_worker_stops gives a forked worker the default action back for the
 * signals the driver handles, and the mask from before. */
static void h_worker_stops(const sigset_t *old)
{
    for (size_t i = 0; i < sizeof h_stop_signals / sizeof h_stop_signals[0]; i++)
        if (h_handled[i]) signal(h_stop_signals[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, old, NULL);
}

/* ---- the harness ---- */

static uint64_t h_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* h_cpu_ns is the CPU time this process has used (every thread of it), or
 * 0 if it cannot be read. */
static uint64_t h_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* h_next is Vigna's splitmix64: rw90's choice of read or write, seeded with
 * worker index + 1, so every contender runs the same sequence. */
static inline uint64_t h_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* h_map maps path (64 KiB, MAP_SHARED); create makes or truncates it first
 * and allocates its memory (fallocate), so that a full /dev/shm stops the
 * driver here with ENOSPC rather than a worker with SIGBUS at its first
 * write; a file system without fallocate gets the size alone. */
static struct h_file *h_map(const char *path, int create)
{
    int flags = O_RDWR | O_NOFOLLOW | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0);
    int fd = open(path, flags, 0600);
    if (fd < 0) h_die(path, errno);
    if (create && fallocate(fd, 0, 0, H_FILE_SIZE) != 0) {
        if (errno != EOPNOTSUPP && errno != ENOSYS) h_die("fallocate", errno);
        if (ftruncate(fd, H_FILE_SIZE) != 0) h_die("ftruncate", errno);
    }
    void *p = mmap(NULL, H_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) h_die("mmap", errno);
    close(fd);
    return H_CAST(struct h_file *, p);
}

enum h_workload {
    W_UNCONTENDED,
    W_COUNTER,
    W_PINGPONG,
    W_PINGPONG_RETRY,
    W_RW90,
    W_UNCONTENDED_SHARED,
    W_UNKNOWN
};

static const char *const h_workload_names[] = {"uncontended",    "counter", "pingpong",
                                               "pingpong_retry", "rw90",    "uncontended_shared"};

/* h_spin_until waits outside any lock until *w == want: plain loads, then a
 * sched_yield per load (the contract's wait, the same for every contender). */
static inline void h_spin_until(volatile uint64_t *w, uint64_t want)
{
    for (unsigned spins = 0; __atomic_load_n(w, __ATOMIC_ACQUIRE) != want;)
        if (++spins > H_SPIN_BEFORE_YIELD) sched_yield();
}

/* h_run is one worker's loop; it fills the worker's stat slot but for done. */
static void h_run(struct h_file *f, enum h_workload w, int me, uint64_t n)
{
    void *area = f->area;
    volatile uint64_t *counter = &f->counter, *turn = &f->turn;
    struct h_stat *st = &f->stat[me];
    uint64_t reads = 0, writes = 0, torn = 0, errors = 0, retries = 0;
    const uint64_t mine = (uint64_t)me;

    switch (w) {
    case W_UNCONTENDED:
        for (uint64_t i = 0; i < n; i++) {
            peer_lock(area);
            peer_unlock(area);
        }
        break;
    case W_COUNTER:
        for (uint64_t i = 0; i < n; i++) {
            peer_lock(area);
            *counter = *counter + 1; /* a plain load and store */
            peer_unlock(area);
        }
        break;
    case W_PINGPONG: /* wait for the turn outside the lock, then take it */
        for (uint64_t i = 0; i < n; i++) {
            h_spin_until(turn, mine);
            peer_lock(area);
            if (*turn != mine) errors++;
            *counter = *counter + 1;
            *turn = 1 - mine;
            peer_unlock(area);
        }
        break;
    case W_PINGPONG_RETRY: /* wait for the turn inside the lock: a handoff under contention */
        for (uint64_t i = 0; i < n; i++) {
            for (;;) {
                peer_lock(area);
                if (*turn == mine) break;
                peer_unlock(area);
                retries++;
            }
            *counter = *counter + 1;
            *turn = 1 - mine;
            peer_unlock(area);
        }
        break;
    case W_RW90:
#if PEER_SHARED
    {
        volatile uint64_t *rec = f->record;
        uint64_t seed = mine + 1, copy[8];
        for (uint64_t i = 0; i < n; i++) {
            if (h_next(&seed) % 10 == 0) {
                peer_lock(area);
                uint64_t v = rec[0] + 1;
                for (int k = 0; k < 8; k++) rec[k] = v;
                peer_unlock(area);
                writes++;
                continue;
            }
            peer_lock_shared(area);
            for (int k = 0; k < 8; k++) copy[k] = rec[k];
            peer_unlock_shared(area);
            reads++;
            for (int k = 1; k < 8; k++) {
                if (copy[k] != copy[0]) {
                    torn++;
                    break;
                }
            }
        }
    }
#endif
        break;
    case W_UNCONTENDED_SHARED:
#if PEER_SHARED
        for (uint64_t i = 0; i < n; i++) {
            peer_lock_shared(area);
            peer_unlock_shared(area);
        }
#endif
        break;
    case W_UNKNOWN:
        break;
    }
    st->end_ns = h_now_ns();
    st->reads = reads;
    st->writes = writes;
    st->torn = torn;
    st->errors = errors + h_lock_errors;
    st->retries = retries;
}

/* h_worker is a forked child: it maps the file itself, waits at the start
 * barrier, runs the workload and marks its slot done. */
static int h_worker(const char *path, enum h_workload w, int me, uint64_t n)
{
    struct h_file *f = h_map(path, 0);
    int err = peer_attach(f->area, path);
    if (err != 0) h_die("attach", err);
    __atomic_add_fetch(&f->ready, 1, __ATOMIC_SEQ_CST);
    for (unsigned spins = 0;;) {
        uint32_t g = __atomic_load_n(&f->go, __ATOMIC_ACQUIRE);
        if (g == H_GO_START) break;
        if (g == H_GO_ABORT) return 1;
        if (++spins > H_SPIN_BEFORE_YIELD) sched_yield();
    }
    const uint64_t cpu0 = h_cpu_ns();
    h_run(f, w, me, n);
    const uint64_t cpu1 = h_cpu_ns();
    f->stat[me].cpu_ns = cpu0 != 0 && cpu1 > cpu0 ? cpu1 - cpu0 : 0;
    __atomic_store_n(&f->stat[me].done, 1, __ATOMIC_RELEASE);
    return 0;
}

/* h_result prints the contract's one JSON line; detail is plain ASCII. The
 * rates print with nine significant digits: a fixed number of decimals
 * loses the ratio to seconds on a slow run (ops_per_sec 38.6, a pingpong
 * on a loaded machine, is off by up to 0.13 % at one decimal). */
static void h_result(const char *workload, int procs, uint64_t iters, double seconds,
                     double ops, double cpu_seconds, int ok, const char *detail)
{
    printf("{\"peer\":\"%s\",\"workload\":\"", PEER_NAME);
    for (const char *c = workload; *c; c++) { /* the one string that comes from the user */
        if (*c == '"' || *c == '\\') putchar('\\');
        if ((unsigned char)*c >= 0x20) putchar(*c);
    }
    printf("\",\"procs\":%d,\"iters\":%llu,\"seconds\":%.9f,\"ops_per_sec\":%.9g,"
           "\"ns_per_op\":%.9g,\"cpu_seconds\":%.9f,\"ok\":%s,\"detail\":\"%s\"}\n",
           procs, (unsigned long long)iters, seconds, seconds > 0 ? ops / seconds : 0.0,
           ops > 0 ? seconds * 1e9 / ops : 0.0, cpu_seconds, ok ? "true" : "false", detail);
    fflush(stdout);
}

static int h_usage(const char *why)
{
    fprintf(stderr,
            "%s: %s\nusage: %s --workload "
            "uncontended|counter|pingpong|pingpong_retry|rw90|uncontended_shared "
            "--procs P --iters N --path FILE\n",
            PEER_NAME, why, PEER_NAME);
    return 2;
}

int main(int argc, char **argv)
{
    const char *workload = NULL, *path = NULL;
    long procs = 0;
    double iters_f = 0;
    for (int a = 1; a < argc; a++) { /* --flag value or --flag=value */
        const char *arg = argv[a], *eq = strchr(arg, '='), *val;
        size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (eq) val = eq + 1;
        else if (a + 1 < argc) val = argv[++a];
        else return h_usage("a flag without a value");
        char *end = NULL;
        if (klen == 10 && !strncmp(arg, "--workload", klen)) workload = val;
        else if (klen == 6 && !strncmp(arg, "--path", klen)) path = val;
        else if (klen == 7 && !strncmp(arg, "--procs", klen)) procs = strtol(val, &end, 10);
        else if (klen == 7 && !strncmp(arg, "--iters", klen)) iters_f = strtod(val, &end); /* 2e6 too */
        else return h_usage("unknown flag");
        if (end && (end == val || *end)) return h_usage("not a number");
    }
    if (!workload || !path || procs < 1 || procs > H_MAX_PROCS || !(iters_f >= 1) || iters_f > 1e18)
        return h_usage("needs --workload, --procs 1..64, --iters >= 1 and --path");
    const int p = (int)procs;
    const uint64_t n = (uint64_t)iters_f;

    enum h_workload w = W_UNKNOWN;
    for (int i = 0; i < W_UNKNOWN; i++)
        if (!strcmp(workload, h_workload_names[i])) w = (enum h_workload)i;
    const int pingpong = w == W_PINGPONG || w == W_PINGPONG_RETRY;
    const int shared = w == W_RW90 || w == W_UNCONTENDED_SHARED;
    if (w == W_UNKNOWN || (shared && !PEER_SHARED)) {
        h_result(workload, p, n, 0, 0, 0, 0, "unsupported workload");
        return 3;
    }
    if ((w == W_UNCONTENDED || w == W_UNCONTENDED_SHARED) && p != 1) {
        h_result(workload, p, n, 0, 0, 0, 0, "uncontended requires procs=1");
        return 2;
    }
    if (pingpong && p != 2) {
        h_result(workload, p, n, 0, 0, 0, 0, "pingpong requires procs=2");
        return 2;
    }

    sigset_t unblocked;
    h_catch_stops(&unblocked);
    struct h_file *f = h_map(path, 1);
    h_own_file(path, 0);
    int err = peer_setup(f->area, path);
    if (err != 0) {
        unlink(path);
        h_die("setup", err);
    }

    pid_t driver = getpid(), pids[H_MAX_PROCS];
    for (int i = 0; i < p; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            __atomic_store_n(&f->go, H_GO_ABORT, __ATOMIC_RELEASE);
            unlink(path);
            h_die("fork", errno);
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* workers die with the driver */
            if (getppid() != driver) _exit(1);
            h_worker_stops(&unblocked);
            _exit(h_worker(path, w, i, n));
        }
        pids[i] = pid;
        h_workers[i] = pid;
        h_nworkers = i + 1;
    }
    sigprocmask(SIG_SETMASK, &unblocked, NULL);
    /* Start barrier: every worker has mapped the file and attached. */
    while (__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE) < (uint32_t)p) {
        if (waitpid(-1, NULL, WNOHANG) > 0) { /* one died before the start */
            __atomic_store_n(&f->go, H_GO_ABORT, __ATOMIC_RELEASE);
            while (wait(NULL) > 0) {
            }
            h_result(workload, p, n, 0, 0, 0, 0, "worker exited before start");
            unlink(path);
            return 1;
        }
        usleep(50);
    }
    const uint64_t t0 = h_now_ns();
    __atomic_store_n(&f->go, H_GO_START, __ATOMIC_RELEASE);

    /* A worker failed if it exited otherwise than with status 0, or did not
     * finish its loop. */
    int failed = 0;
    uint64_t end = t0, reads = 0, writes = 0, torn = 0, errors = 0, retries = 0, cpu_ns = 0;
    int cpu_known = 1;
    for (int i = 0; i < p; i++) {
        int status;
        const struct h_stat *st = &f->stat[i];
        if (waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
            __atomic_load_n(&st->done, __ATOMIC_ACQUIRE) != 1) {
            failed++;
            continue;
        }
        if (st->end_ns > end) end = st->end_ns;
        reads += st->reads;
        writes += st->writes;
        torn += st->torn;
        errors += st->errors;
        retries += st->retries;
        cpu_ns += st->cpu_ns;
        cpu_known = cpu_known && st->cpu_ns != 0;
    }
    const double seconds = (double)(end - t0) / 1e9;
    const uint64_t counter = f->counter;
    double ops = (double)n * p;
    int ok = failed == 0 && errors == 0;
    char detail[512];
    int len = 0;
    switch (w) {
    case W_UNCONTENDED:
        len = snprintf(detail, sizeof detail, "%s; ns per lock+unlock pair", PEER_ABOUT);
        break;
    case W_UNCONTENDED_SHARED:
        len = snprintf(detail, sizeof detail, "%s; ns per shared lock+unlock pair", PEER_ABOUT);
        break;
    case W_COUNTER:
        ok = ok && counter == n * (uint64_t)p;
        len = snprintf(detail, sizeof detail, "%s; counter=%llu want=%llu", PEER_ABOUT,
                       (unsigned long long)counter, (unsigned long long)(n * (uint64_t)p));
        break;
    case W_PINGPONG:
    case W_PINGPONG_RETRY:
        ops = (double)n; /* a round trip is one turn each */
        ok = ok && counter == 2 * n;
        len = snprintf(detail, sizeof detail,
                       "%s; ops are round trips; turns=%llu want=%llu retries/turn=%.2f", PEER_ABOUT,
                       (unsigned long long)counter, (unsigned long long)(2 * n),
                       (double)retries / (double)(2 * n));
        break;
    case W_RW90: {
        int uniform = 1;
        for (int k = 1; k < 8; k++) uniform = uniform && f->record[k] == f->record[0];
        ok = ok && torn == 0 && uniform && f->record[0] == writes && reads + writes == n * (uint64_t)p;
        len = snprintf(detail, sizeof detail, "%s; reads=%llu writes=%llu torn=%llu record=%llu",
                       PEER_ABOUT, (unsigned long long)reads, (unsigned long long)writes,
                       (unsigned long long)torn, (unsigned long long)f->record[0]);
        break;
    }
    case W_UNKNOWN:
        break;
    }
    if ((failed || errors) && len > 0 && (size_t)len < sizeof detail)
        snprintf(detail + len, sizeof detail - (size_t)len, "; failed_workers=%d lock_errors=%llu",
                 failed, (unsigned long long)errors);
    h_result(workload, p, n, seconds, ops, cpu_known ? (double)cpu_ns / 1e9 : 0.0, ok, detail);
    munmap(f, H_FILE_SIZE);
    unlink(path);
    return ok ? 0 : 1;
}

#endif
