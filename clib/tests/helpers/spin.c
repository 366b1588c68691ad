/* spin.c: the C helper of clib/spin_test.go. Every subcommand opens the
 * segment at PATH, names the spinlock NAME in MODE (pidtid or token) and
 * works on the test's data region REGION_NAME (the words of spin_test.go's
 * region layout).
 *
 *   spin count  PATH NAME MODE ITERS     ITERS x {lock; counter++; unlock}
 *   spin worker PATH NAME REC SEED       the kill torture's worker (pid/tid)
 *   spin hold   PATH NAME MODE           lock, "held", wait for the release word, unlock
 *   spin wait   PATH NAME MODE           lock (measuring the wait), unlock
 *   spin try    PATH INDEX MODE          opens slot INDEX, prints "ready",
 *                                        waits for a line on stdin, then
 *                                        (whatever the slot's words) a try, a
 *                                        nested try if granted, a wait of
 *                                        200 us, each grant released; prints
 *                                        "try RC NESTED WAITED" and
 *                                        "close RC"; a grant whose release
 *                                        fails exits 1
 */
#include "helper.h"

#include <sched.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <time.h>

#include "internal.h"

/* The region's words, as spin_test.go lays them out. */
#define REGION_NAME "clib.spin.region"
enum {
	REGION_SIZE = 32768,
	OFF_COUNTER = 0,   /* plain: changed only under the lock */
	OFF_MARKER = 8,    /* atomic: the pid inside the critical section, or 0 */
	OFF_STOP = 16,     /* atomic: the workers stop when it is non-zero */
	OFF_RECLAIMS = 24, /* plain: reclaims of every worker */
	OFF_NEXT_GEN = 32, /* plain: the generation the next holder must find */
	OFF_RELEASE = 40,  /* atomic: hold releases when it is non-zero */
	OFF_GO = 48,       /* atomic: count starts when it is non-zero */
	OFF_RECORDS = 64,  /* per worker: tally, reclaims (plain), 16 bytes each */
	RECORD_SIZE = 16,
};

static shmlock_segment *seg;
static shmlock_spin *lock;
static uint8_t *region;

static uint64_t *plain(size_t off) { return (uint64_t *)(void *)(region + off); }
static a64 *word(size_t off) { return (a64 *)(void *)(region + off); }

static int parse_mode(const char *s)
{
	if (!strcmp(s, "pidtid"))
		return SHMLOCK_PIDTID;
	if (!strcmp(s, "token"))
		return SHMLOCK_TOKEN;
	fprintf(stderr, "unknown mode %s\n", s);
	exit(2);
}

static void open_all(const char *path, const char *name, int mode)
{
	int rc = shmlock_open(path, NULL, &seg);
	if (rc != 0)
		die("open", rc);
	if ((rc = shmlock_spin_named(seg, name, mode, &lock)) != 0)
		die("named", rc);
	void *p;
	if ((rc = shmlock_data(seg, REGION_NAME, REGION_SIZE, &p)) != 0)
		die("data region", rc);
	region = p;
}

static void close_all(void)
{
	int rc = shmlock_spin_close(lock);
	if (rc != 0)
		die("spin close", rc);
	if ((rc = shmlock_close(seg)) != 0)
		die("close", rc);
}

static uint64_t holder_for(int mode)
{
	return mode == SHMLOCK_TOKEN ? shmlock_token_new() : shmlock_holder_new();
}

static int cmd_count(int mode, long iters)
{
	uint64_t *counter = plain(OFF_COUNTER);
	uint64_t h = holder_for(mode);
	say("ready");
	while (atomic_load(word(OFF_GO)) == 0)
		sched_yield();
	for (long i = 0; i < iters; i++) {
		if (mode == SHMLOCK_TOKEN)
			h = shmlock_token_new(); /* a token per acquisition */
		int rc = shmlock_spin_lock(lock, h);
		if (rc != 0)
			die("lock", rc);
		*counter = *counter + 1;
		if ((rc = shmlock_spin_unlock(lock, h)) != 0)
			die("unlock", rc);
	}
	say("done %ld", iters);
	return 0;
}

static uint64_t rng_state;

static uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* hold keeps the lock a random while, as Go's kill worker does: not at all,
 * a few microseconds of work, or a sleep of up to 2 ms. */
static void hold(void)
{
	switch (rng_next() % 3) {
	case 0:
		break;
	case 1: {
		int64_t end = shm_now_ns() + (int64_t)(rng_next() % 20) * 1000;
		while (shm_now_ns() < end) {
		}
		break;
	}
	default: {
		struct timespec ts = {0, (long)(rng_next() % 2000) * 1000};
		nanosleep(&ts, NULL);
	}
	}
}

#define FAIL(...) (printf("FAIL "), say(__VA_ARGS__), 1)

static int cmd_worker(long rec, uint64_t seed)
{
	uint64_t pid = (uint64_t)getpid();
	rng_state = seed ^ pid;
	a64 *marker = word(OFF_MARKER), *stop = word(OFF_STOP);
	uint64_t *counter = plain(OFF_COUNTER), *next_gen = plain(OFF_NEXT_GEN), *reclaims = plain(OFF_RECLAIMS);
	uint64_t *tally = plain(OFF_RECORDS + (size_t)rec * RECORD_SIZE);
	uint64_t *my_reclaims = plain(OFF_RECORDS + (size_t)rec * RECORD_SIZE + 8);
	uint64_t h = shmlock_holder_new(), rounds = 0, reclaimed = 0;
	say("ready");
	while (atomic_load(stop) == 0) {
		int rc = shmlock_spin_lock(lock, h);
		if (rc < 0)
			return FAIL("lock: %s", shmlock_strerror(rc));
		bool dead = rc == SHMLOCK_OWNERDEAD;
		uint64_t gen = shmlock_spin_generation(lock), want = *next_gen;
		if (gen != want && !(dead && gen == want + 1))
			return FAIL("generation %" PRIu64 " after acquiring (reclaimed %d), want %" PRIu64, gen, dead, want);
		*next_gen = gen + 1;
		if (dead) {
			/* Printed before it is recorded: once the parent sees the
			 * record, the line is in the pipe even if we die next. */
			say("reclaimed");
			++*my_reclaims;
			++*reclaims;
			reclaimed++;
			atomic_store(marker, 0); /* repair: the dead holder's critical section is over */
		} else if (rc == SHMLOCK_OK && *reclaims != 0) {
			return FAIL("a holder died but the lock reports no inconsistency");
		}
		uint64_t m = atomic_load(marker);
		if (m != 0)
			return FAIL("DOUBLE OWNER: pid %" PRIu64 " is inside the critical section with me (%" PRIu64 ")", m, pid);
		atomic_store(marker, pid);
		++*counter;
		++*tally;
		hold();
		if ((m = atomic_load(marker)) != pid)
			return FAIL("DOUBLE OWNER: marker %" PRIu64 ", want mine (%" PRIu64 ")", m, pid);
		atomic_store(marker, 0);
		if ((rc = shmlock_spin_unlock(lock, h)) != 0)
			return FAIL("unlock: %s", shmlock_strerror(rc));
		rounds++;
		if (rng_next() % 4 == 0)
			sched_yield();
	}
	say("done rounds=%" PRIu64 " reclaims=%" PRIu64, rounds, reclaimed);
	return 0;
}

static int cmd_hold(int mode)
{
	uint64_t h = holder_for(mode);
	int rc = shmlock_spin_lock(lock, h);
	if (rc != 0)
		die("lock", rc);
	say("held");
	while (atomic_load(word(OFF_RELEASE)) == 0) {
		struct timespec ts = {0, 200000};
		nanosleep(&ts, NULL);
	}
	if ((rc = shmlock_spin_unlock(lock, h)) != 0)
		die("unlock", rc);
	say("released");
	return 0;
}

static int64_t cpu_ns(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
	       ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

/* cmd_wait prints the "waited" line of testproc.Waiting: the CPU and wall
 * time of its wait, for RequireSlept. */
static int cmd_wait(int mode)
{
	uint64_t h = holder_for(mode);
	int rc = shmlock_spin_trylock(lock, h);
	if (rc != SHMLOCK_EWOULDBLOCK)
		die("trylock: want the lock held", rc);
	/* The clocks start before "waiting" is said: the parent starts its
	 * BlockedFor when it reads the line, and a helper preempted between
	 * saying it and reading the clocks would report a wait shorter than
	 * the one it was given. */
	int64_t cpu = cpu_ns(), wall = shm_now_ns();
	say("waiting");
	if ((rc = shmlock_spin_lock(lock, h)) != 0)
		die("lock", rc);
	say("waited cpu=%" PRId64 " wall=%" PRId64, cpu_ns() - cpu, shm_now_ns() - wall);
	if ((rc = shmlock_spin_unlock(lock, h)) != 0)
		die("unlock", rc);
	return 0;
}

/* cmd_timeouts waits n times for 10 ms and wants a timeout each time (the
 * lock is held by the parent), for the contention counters' test. */
static int cmd_timeouts(int mode, long n)
{
	uint64_t h = holder_for(mode);
	for (long i = 0; i < n; i++) {
		int rc = shmlock_spin_timedlock(lock, h, 10 * INT64_C(1000000));
		if (rc != SHMLOCK_ETIMEDOUT)
			die("timedlock: want a timeout", rc);
	}
	say("done");
	return 0;
}

/* try is clib's replay of spinlock's FuzzSlot: the slot's words are
 * whatever the test wrote there, and the calls must return (a code or not)
 * and every grant be released again. It opens the slot by index, so that
 * no claim directory is involved. */
static int cmd_try(const char *path, size_t index, int mode)
{
	int rc = shmlock_open(path, NULL, &seg);
	if (rc != 0)
		die("open", rc);
	if ((rc = shmlock_spin_open(seg, index, mode, &lock)) != 0)
		die("open slot", rc);
	say("ready"); /* the test writes the slot's words now, under the open handle */
	char line[16];
	if (fgets(line, sizeof line, stdin) == NULL)
		return 1;
	uint64_t h = holder_for(mode);
	int got = shmlock_spin_trylock(lock, h), nested = SHMLOCK_EWOULDBLOCK;
	if (got >= 0) {
		nested = shmlock_spin_trylock(lock, h);
		if (nested >= 0 && (rc = shmlock_spin_unlock(lock, h)) != 0)
			die("the nested grant's release", rc);
		if ((rc = shmlock_spin_unlock(lock, h)) != 0)
			die("the grant's release", rc);
	}
	/* A wait ends by its deadline, whatever the words. */
	int waited = shmlock_spin_timedlock(lock, h, 200 * INT64_C(1000));
	if (waited >= 0 && (rc = shmlock_spin_unlock(lock, h)) != 0)
		die("the waited grant's release", rc);
	say("try %d %d %d", got, nested, waited);
	if ((rc = shmlock_spin_close(lock)) == 0)
		shmlock_close(seg);
	say("close %d", rc);
	return 0;
}

int main(int argc, char **argv)
{
	helper_options(&argc, &argv);
	if (argc < 4)
		goto usage;
	const char *cmd = argv[1];
	int rc;
	if (!strcmp(cmd, "try") && argc == 5)
		return cmd_try(argv[2], (size_t)helper_atol(argv[3]), parse_mode(argv[4]));
	if (!strcmp(cmd, "count") && argc == 6) {
		open_all(argv[2], argv[3], parse_mode(argv[4]));
		rc = cmd_count(parse_mode(argv[4]), helper_atol(argv[5]));
	} else if (!strcmp(cmd, "worker") && argc == 6) {
		open_all(argv[2], argv[3], SHMLOCK_PIDTID);
		rc = cmd_worker(helper_atol(argv[4]), strtoull(argv[5], NULL, 10));
	} else if (!strcmp(cmd, "hold") && argc == 5) {
		open_all(argv[2], argv[3], parse_mode(argv[4]));
		rc = cmd_hold(parse_mode(argv[4]));
	} else if (!strcmp(cmd, "timeouts") && argc == 6) {
		open_all(argv[2], argv[3], parse_mode(argv[4]));
		rc = cmd_timeouts(parse_mode(argv[4]), helper_atol(argv[5]));
	} else if (!strcmp(cmd, "wait") && argc == 5) {
		open_all(argv[2], argv[3], parse_mode(argv[4]));
		rc = cmd_wait(parse_mode(argv[4]));
	} else {
		goto usage;
	}
	close_all();
	return rc;
usage:
	fprintf(stderr, "usage: spin count|worker|hold|wait|timeouts PATH NAME ... | spin try PATH INDEX MODE\n");
	return 2;
}
