/* ident.c: packed identities (internal/proc), liveness, holder ids and
 * tokens (spinlock.NewHolder, ThreadHolder, NewToken), random numbers and
 * the boot id (the clock is in clock.c).
 *
 * A packed identity is one word (FORMAT.md, Identities):
 *
 *	bit  63      stale: recorded under a previous boot, never alive
 *	bits 22..62  start time of the process in clock ticks since boot,
 *	             field 22 of /proc/<pid>/stat, low 41 bits
 *	bits  0..21  pid
 *
 * Fork: a child has another pid, so this process's identity and the random
 * generators (whose state a child would otherwise share with its parent,
 * drawing the same tokens) are reset by a pthread_atfork child handler,
 * which bumps fork_gen; per-thread caches compare their generation with it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

int64_t shm_test_liveness_ns;

/* How long an "alive" answer of shm_alive is believed (as Go's callers
 * cache theirs); "dead" answers are never cached: a dead process stays dead. */
#define ALIVE_CACHE_NS (50 * 1000 * 1000)
#define ALIVE_CACHE_SIZE 16 /* per thread */

/* Bumped in the child of every fork: per-process caches compare against it. */
static a64 fork_gen = 1;
static a64 self_ident;     /* this process's packed identity; 0 not yet read */
static a64 self_ident_gen; /* fork_gen when self_ident was read */

static void after_fork_child(void)
{
	atomic_fetch_add(&fork_gen, 1);
	atomic_store(&self_ident, 0);
}

__attribute__((constructor)) static void ident_init(void)
{
	pthread_atfork(NULL, NULL, after_fork_child);
}

/* ------------------------------------------------------------ /proc stat */

/* State byte of /proc/<pid>/stat meaning the process has exited. */
static bool exited_state(char s) { return s == 'Z' || s == 'X' || s == 'x'; }

enum { STAT_OK, STAT_NOPROC, STAT_UNKNOWN };

/* Reads the state (field 3) and start time (field 22) from the stat file
 * at path (/proc/<pid>/stat, or a thread's). The command name (field 2)
 * may contain anything, so fields are counted from the last ')'.
 * STAT_NOPROC: no such process; STAT_UNKNOWN: /proc could not tell. */
static int read_stat_at(const char *path, char *state, uint64_t *start)
{
	char buf[1024];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH ? STAT_NOPROC : STAT_UNKNOWN;
	ssize_t n;
	do
		n = read(fd, buf, sizeof buf - 1);
	while (n < 0 && errno == EINTR);
	int err = errno;
	close(fd);
	if (n < 0)
		return err == ESRCH ? STAT_NOPROC : STAT_UNKNOWN; /* reaped after open */
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p || !memchr(buf, '(', (size_t)(p - buf)))
		return STAT_UNKNOWN;
	p++;
	/* Fields 3.. are separated by white space. */
	for (int field = 3; field <= 22; field++) {
		while (*p == ' ' || *p == '\t' || *p == '\n')
			p++;
		if (!*p)
			return STAT_UNKNOWN;
		char *f = p;
		while (*p && *p != ' ' && *p != '\t' && *p != '\n')
			p++;
		if (field == 3) {
			if (p - f != 1 || !((*f >= 'A' && *f <= 'Z') || (*f >= 'a' && *f <= 'z')))
				return STAT_UNKNOWN;
			*state = *f;
		} else if (field == 22) {
			uint64_t v = 0;
			if (f == p)
				return STAT_UNKNOWN;
			for (char *c = f; c < p; c++) {
				if (*c < '0' || *c > '9' || v > (UINT64_MAX - 9) / 10)
					return STAT_UNKNOWN;
				v = v * 10 + (uint64_t)(*c - '0');
			}
			*start = v;
		}
	}
	return STAT_OK;
}

static int read_stat(uint32_t pid, char *state, uint64_t *start)
{
	char path[32];
	snprintf(path, sizeof path, "/proc/%u/stat", pid);
	return read_stat_at(path, state, start);
}

/* group_runs reports whether a thread of process pid, whose leader is a
 * zombie, still runs: a process whose main thread exited (pthread_exit in
 * main) shows Z in /proc/<pid>/stat until its last thread exits, and its
 * threads may hold locks. When /proc cannot tell it says yes, as
 * shm_alive_uncached errs (Go: proc.groupRuns). */
static bool group_runs(uint32_t pid)
{
	char dir[40];
	snprintf(dir, sizeof dir, "/proc/%u/task", pid);
	DIR *d = opendir(dir);
	if (d == NULL)
		return errno != ENOENT && errno != ESRCH;
	bool runs = false;
	struct dirent *t;
	while (!runs && (t = readdir(d)) != NULL) {
		if (t->d_name[0] < '0' || t->d_name[0] > '9')
			continue;
		char path[80], state = 0;
		uint64_t start;
		snprintf(path, sizeof path, "%s/%.20s/stat", dir, t->d_name);
		switch (read_stat_at(path, &state, &start)) {
		case STAT_OK:
			runs = !exited_state(state);
			break;
		case STAT_UNKNOWN:
			runs = true; /* cannot tell: alive */
			break;
		}
	}
	closedir(d);
	return runs;
}

static uint64_t pack(uint32_t pid, uint64_t start)
{
	return (uint64_t)pid | (start & SHM_START_MASK) << SHM_PID_BITS;
}

uint64_t shm_self(void)
{
	uint64_t id = atomic_load(&self_ident);
	if (SHM_LIKELY(id != 0 && atomic_load(&self_ident_gen) == atomic_load(&fork_gen)))
		return id;
	uint64_t gen = atomic_load(&fork_gen);
	char state;
	uint64_t start = 0;
	pid_t pid = getpid();
	if (read_stat((uint32_t)pid, &state, &start) != STAT_OK)
		start = 0; /* as Go off Linux: no start time; liveness falls back to kill */
	id = pack((uint32_t)pid, start);
	atomic_store(&self_ident_gen, gen);
	atomic_store(&self_ident, id);
	return id;
}

/* Whether process pid reads start times as this process does (Go:
 * proc.readsOurClock): the kernel adds the reader's time namespace's
 * boot-time offset to field 22, so a process of another time namespace read
 * its own start shifted. A namespace that cannot be read (another user's
 * process) says yes, as on a kernel without them. 1 yes, 0 no, -1 it ended. */
static int reads_our_clock(uint32_t pid)
{
	struct stat own, its;
	char path[64];
	if (stat("/proc/self/ns/time", &own) != 0)
		return 1;
	snprintf(path, sizeof path, "/proc/%u/ns/time", pid);
	if (stat(path, &its) != 0)
		return errno == ENOENT || errno == ESRCH ? -1 : 1;
	return own.st_ino == its.st_ino;
}

bool shm_alive_uncached(uint64_t identity)
{
	if (identity == 0 || (identity & SHM_STALE_BIT))
		return false;
	uint32_t pid = (uint32_t)(identity & SHM_PID_MASK);
	uint64_t start = identity >> SHM_PID_BITS & SHM_START_MASK;
	if (pid == 0)
		return false;
	char state = 0;
	uint64_t got = 0;
	switch (read_stat(pid, &state, &got)) {
	case STAT_OK:
		if ((got & SHM_START_MASK) != start && reads_our_clock(pid) != 0)
			return false;
		if (state == 'X' || state == 'x')
			return false;
		return state != 'Z' || group_runs(pid);
	case STAT_NOPROC:
		return false;
	default:
		/* /proc cannot tell (hidepid): kill cannot see pid reuse, so it errs
		 * toward "alive", which only delays a takeover. */
		return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
	}
}

/* The per-thread cache of "alive" answers. */
struct alive_entry {
	uint64_t identity;
	int64_t when;
};
static _Thread_local struct alive_entry alive_cache[ALIVE_CACHE_SIZE];
static _Thread_local unsigned alive_next;

bool shm_alive(uint64_t identity)
{
	if (identity == 0 || (identity & SHM_STALE_BIT))
		return false;
	if (identity == shm_self())
		return true;
	int64_t now = shm_now_ns();
	for (int i = 0; i < ALIVE_CACHE_SIZE; i++) {
		struct alive_entry *e = &alive_cache[i];
		if (e->identity == identity && now - e->when < ALIVE_CACHE_NS)
			return true;
	}
	if (!shm_alive_uncached(identity))
		return false;
	struct alive_entry *e = &alive_cache[alive_next++ % ALIVE_CACHE_SIZE];
	e->identity = identity;
	e->when = now;
	return true;
}

SHM_EXPORT uint64_t shmlock_self_identity(void) { return shm_self(); }

SHM_EXPORT int shmlock_identity_alive(uint64_t identity) { return shm_alive_uncached(identity); }

/* ---------------------------------------------------------------- random */

/* Each thread draws from a splitmix64 sequence seeded by getrandom, and
 * reseeds in the child of a fork (or a parent and child would draw the same
 * tokens). */
static _Thread_local uint64_t rng_state;
static _Thread_local uint64_t rng_gen; /* fork_gen at seeding; 0 never seeded */

static void rng_seed(void)
{
	uint64_t seed = 0;
	ssize_t n;
	do
		n = getrandom(&seed, sizeof seed, 0);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof seed) {
		/* No getrandom: mix what differs between threads and processes. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 40 ^
		       (uint64_t)syscall(SYS_gettid) << 20 ^ (uint64_t)(uintptr_t)&rng_state;
	}
	rng_state = seed;
	rng_gen = atomic_load(&fork_gen);
}

static uint64_t rng_next(void)
{
	if (SHM_UNLIKELY(rng_gen != atomic_load(&fork_gen)))
		rng_seed();
	uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

uint64_t shm_random64(void)
{
	for (;;) {
		uint64_t v = rng_next();
		if (v != 0)
			return v;
	}
}

SHM_EXPORT uint64_t shmlock_holder_new(void) { return shm_random64(); }

/* The thread's holder: its tid in the low 32 bits (shmctl slots shows it),
 * random bits above; drawn again in the child of a fork (another tid). */
static _Thread_local uint64_t thread_holder;
static _Thread_local uint64_t thread_holder_gen;

SHM_EXPORT uint64_t shmlock_holder_thread(void)
{
	uint64_t gen = atomic_load(&fork_gen);
	if (SHM_UNLIKELY(thread_holder == 0 || thread_holder_gen != gen)) {
		uint64_t tid = (uint64_t)syscall(SYS_gettid);
		thread_holder = (tid & 0xffffffffu) | rng_next() << 32;
		thread_holder_gen = gen;
	}
	return thread_holder;
}

SHM_EXPORT uint64_t shmlock_token_new(void)
{
	for (;;) {
		uint64_t t = rng_next();
		if ((uint32_t)t != 0)
			return t;
	}
}

/* ---------------------------------------------------------------- boot id */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Parses the text form of a UUID ("cddbe62e-c18c-4f84-81af-5713d1ef1944"). */
static int parse_uuid(const char *s, size_t n, uint8_t out[16])
{
	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
		n--;
	if (n != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-')
		return -1;
	int k = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '-')
			continue;
		int hi = hexval(s[i]), lo = i + 1 < n ? hexval(s[i + 1]) : -1;
		if (hi < 0 || lo < 0 || k >= 16)
			return -1;
		out[k++] = (uint8_t)(hi << 4 | lo);
		i++;
	}
	return k == 16 ? 0 : -1;
}

static pthread_once_t boot_once = PTHREAD_ONCE_INIT;
static uint8_t boot_id[16];
static int boot_rc;

static void read_boot_id(void)
{
	char buf[64];
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		boot_rc = shm_sys_error(errno);
		return;
	}
	ssize_t n = read(fd, buf, sizeof buf - 1);
	int err = errno;
	close(fd);
	if (n < 0) {
		boot_rc = shm_sys_error(err);
		return;
	}
	boot_rc = parse_uuid(buf, (size_t)n, boot_id) == 0 ? 0 : shm_sys_error(EINVAL);
}

int shm_boot_id(uint8_t out[16])
{
	pthread_once(&boot_once, read_boot_id);
	if (boot_rc == 0)
		memcpy(out, boot_id, 16);
	return boot_rc;
}
