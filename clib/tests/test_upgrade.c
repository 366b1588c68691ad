/* test_upgrade.c: the upgrade mutex (upgrade.c) in one process, its
 * threads and forked children killed with SIGKILL. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "check.h"
#include "internal.h"

static char path[256];
static shmlock_segment *seg;

static void setup(void)
{
	check_temp_path(path, sizeof path, "upgrade");
	shmlock_options o = {0};
	o.upgrades = 8;
	o.upgrade_readers = 16;
	int rc = shmlock_create(path, &o, &seg);
	CHECK_RC(rc, 0);
	if (rc)
		exit(1);
}

static void teardown(void)
{
	CHECK_RC(shmlock_close(seg), 0);
	CHECK_RC(shmlock_remove(path), 0);
}

static shmlock_upgrade *named(const char *name)
{
	shmlock_upgrade *m = NULL;
	int rc = shmlock_upgrade_named(seg, name, &m);
	CHECK_RC(rc, 0);
	if (rc)
		exit(1);
	return m;
}

static void test_unique(void)
{
	shmlock_upgrade *a = named("unique"), *b = named("unique");
	CHECK(shmlock_upgrade_index(a) == shmlock_upgrade_index(b));
	uint64_t g0 = shmlock_upgrade_generation(a);
	CHECK_RC(shmlock_upgrade_lock(a), 0);
	CHECK_RC(shmlock_upgrade_trylock(b), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_timedlock(b, 0), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_timedlock(b, 2000000), SHMLOCK_ETIMEDOUT);
	CHECK_RC(shmlock_upgrade_trylock_shared(b), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_timedlock_shared(b, 1000000), SHMLOCK_ETIMEDOUT);
	CHECK_RC(shmlock_upgrade_trylock_upgrade(b), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_timedlock_upgrade(b, 1000000), SHMLOCK_ETIMEDOUT);
	/* Misuse. */
	CHECK_RC(shmlock_upgrade_lock(a), SHMLOCK_EHELD);
	CHECK_RC(shmlock_upgrade_lock_shared(a), SHMLOCK_EHELD);
	CHECK_RC(shmlock_upgrade_lock_upgrade(a), SHMLOCK_EHELD);
	CHECK_RC(shmlock_upgrade_unlock(b), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_upgrade_unlock_shared(a), SHMLOCK_ENOTHELD);
	CHECK_RC(shmlock_upgrade_unlock_upgrade(a), SHMLOCK_ENOTHELD);
	CHECK_RC(shmlock_upgrade_upgrade_to_unique(a), SHMLOCK_ENOTHELD);
	CHECK_RC(shmlock_upgrade_unique_to_shared(b), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_upgrade_mark_consistent(b), SHMLOCK_ENOTHELD);
	CHECK_RC(shmlock_upgrade_mark_consistent(a), 0);
	CHECK_RC(shmlock_upgrade_close(a), SHMLOCK_EHELD);
	CHECK(!shmlock_upgrade_inconsistent(a));
	CHECK_RC(shmlock_upgrade_unlock(a), 0);
	CHECK(shmlock_upgrade_generation(a) == g0 + 1); /* the release bumps it; failed tries do not */
	CHECK_RC(shmlock_upgrade_unlock(a), SHMLOCK_ENOTHELD);
	g0 = shmlock_upgrade_generation(a);
	CHECK_RC(shmlock_upgrade_lock(a), 0);
	CHECK(shmlock_upgrade_generation(b) == g0);
	CHECK_RC(shmlock_upgrade_unlock(a), 0);
	CHECK(shmlock_upgrade_generation(b) == g0 + 1);
	CHECK_RC(shmlock_upgrade_trylock(b), 0);
	CHECK_RC(shmlock_upgrade_unlock(b), 0);
	CHECK_RC(shmlock_upgrade_close(a), 0);
	CHECK_RC(shmlock_upgrade_close(b), 0);
}

static void test_shared(void)
{
	shmlock_upgrade *a = named("shared"), *b = named("shared"), *w = named("shared");
	CHECK_RC(shmlock_upgrade_lock_shared(a), 0);
	CHECK_RC(shmlock_upgrade_lock_shared(a), 0); /* nests */
	CHECK_RC(shmlock_upgrade_trylock_shared(b), 0);
	CHECK_RC(shmlock_upgrade_trylock(w), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_timedlock(w, 3000000), SHMLOCK_ETIMEDOUT);
	CHECK_RC(shmlock_upgrade_lock(a), SHMLOCK_EHELD);
	CHECK_RC(shmlock_upgrade_close(a), SHMLOCK_EHELD);
	/* A timed-out writer left nothing behind: readers still come in. */
	CHECK_RC(shmlock_upgrade_trylock_shared(w), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(w), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(w), SHMLOCK_ENOTHELD);
	CHECK_RC(shmlock_upgrade_unlock_shared(a), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(a), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(a), SHMLOCK_ENOTHELD);
	CHECK_RC(shmlock_upgrade_trylock(w), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_unlock_shared(b), 0);
	CHECK_RC(shmlock_upgrade_trylock(w), 0);
	CHECK_RC(shmlock_upgrade_unlock(w), 0);
	CHECK_RC(shmlock_upgrade_close(a), 0);
	CHECK_RC(shmlock_upgrade_close(b), 0);
	CHECK_RC(shmlock_upgrade_close(w), 0);
}

static void test_upgrade(void)
{
	shmlock_upgrade *u = named("upg"), *r = named("upg"), *o = named("upg");
	CHECK_RC(shmlock_upgrade_lock_upgrade(u), 0);
	CHECK_RC(shmlock_upgrade_lock_upgrade(u), SHMLOCK_EHELD);
	CHECK_RC(shmlock_upgrade_trylock_upgrade(o), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_unlock_upgrade(o), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_upgrade_trylock(o), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_lock_shared(r), 0); /* readers share with the upgrade holder */
	CHECK_RC(shmlock_upgrade_try_upgrade_to_unique(u), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_timed_upgrade_to_unique(u, 0), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_timed_upgrade_to_unique(u, 2000000), SHMLOCK_ETIMEDOUT);
	/* The cancelled upgrade lets readers in again. */
	CHECK_RC(shmlock_upgrade_trylock_shared(o), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(o), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(r), 0);
	CHECK_RC(shmlock_upgrade_upgrade_to_unique(u), 0);
	CHECK_RC(shmlock_upgrade_upgrade_to_unique(u), SHMLOCK_EHELD);
	CHECK_RC(shmlock_upgrade_trylock_shared(r), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_unlock_upgrade(u), SHMLOCK_ENOTHELD); /* leave the unique lock first */
	CHECK_RC(shmlock_upgrade_unlock(u), SHMLOCK_ENOTHELD);
	CHECK_RC(shmlock_upgrade_mark_consistent(u), 0);
	CHECK_RC(shmlock_upgrade_unique_to_upgrade(u), 0);
	CHECK_RC(shmlock_upgrade_trylock_shared(r), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(r), 0);
	CHECK_RC(shmlock_upgrade_try_upgrade_to_unique(u), 0);
	CHECK_RC(shmlock_upgrade_unique_to_shared(u), 0); /* drops the upgrade lock too */
	CHECK_RC(shmlock_upgrade_unlock_upgrade(u), SHMLOCK_ENOTHELD);
	CHECK_RC(shmlock_upgrade_trylock_upgrade(o), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(u), 0);
	CHECK_RC(shmlock_upgrade_unlock_upgrade(o), 0);
	/* Writer to upgrade, and to shared. */
	CHECK_RC(shmlock_upgrade_lock(u), 0);
	CHECK_RC(shmlock_upgrade_unique_to_upgrade(u), 0);
	CHECK_RC(shmlock_upgrade_trylock(o), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_trylock_shared(r), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(r), 0);
	CHECK_RC(shmlock_upgrade_unlock_upgrade(u), 0);
	CHECK_RC(shmlock_upgrade_lock(u), 0);
	CHECK_RC(shmlock_upgrade_unique_to_shared(u), 0);
	CHECK_RC(shmlock_upgrade_trylock(o), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_unlock_shared(u), 0);
	/* A writer's downgrade to upgrade needs the upgrade lock free. */
	CHECK_RC(shmlock_upgrade_lock(u), 0);
	CHECK_RC(shmlock_upgrade_unique_to_upgrade(o), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_upgrade_unlock(u), 0);
	CHECK_RC(shmlock_upgrade_unique_to_upgrade(u), SHMLOCK_ENOTHELD);
	CHECK_RC(shmlock_upgrade_unique_to_shared(u), SHMLOCK_ENOTHELD);
	CHECK_RC(shmlock_upgrade_close(u), 0);
	CHECK_RC(shmlock_upgrade_close(r), 0);
	CHECK_RC(shmlock_upgrade_close(o), 0);
}

static void test_bad_input(void)
{
	shmlock_upgrade *m = NULL;
	CHECK_RC(shmlock_upgrade_named(NULL, "x", &m), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_named(seg, NULL, &m), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_named(seg, "", &m), SHMLOCK_EBADNAME);
	CHECK_RC(shmlock_upgrade_named(seg, "01234567890123456789012345678901234567890", &m), SHMLOCK_EBADNAME);
	CHECK_RC(shmlock_upgrade_open(seg, 8, &m), SHMLOCK_EINDEX);
	CHECK_RC(shmlock_upgrade_open(seg, 0, NULL), SHMLOCK_EINVAL);
	CHECK(m == NULL);
	CHECK_RC(shmlock_upgrade_lock(NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_trylock(NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_lock_shared(NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_unlock_shared(NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_lock_upgrade(NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_upgrade_to_unique(NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_close(NULL), SHMLOCK_EINVAL);
	CHECK(shmlock_upgrade_generation(NULL) == 0);
	CHECK(shmlock_upgrade_inconsistent(NULL) == 0);
}

/* Too many readers: every record taken by a live handle. */
static void test_records(void)
{
	shmlock_upgrade *h[17];
	for (int i = 0; i < 17; i++)
		h[i] = named("records");
	for (int i = 0; i < 16; i++)
		CHECK_RC(shmlock_upgrade_lock_shared(h[i]), 0);
	CHECK_RC(shmlock_upgrade_lock_shared(h[16]), SHMLOCK_ETOOMANYREADERS);
	CHECK_RC(shmlock_upgrade_unlock_shared(h[0]), 0);
	CHECK_RC(shmlock_upgrade_close(h[0]), 0); /* frees its record */
	CHECK_RC(shmlock_upgrade_lock_shared(h[16]), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(h[16]), 0);
	for (int i = 1; i < 16; i++)
		CHECK_RC(shmlock_upgrade_unlock_shared(h[i]), 0);
	for (int i = 1; i < 17; i++)
		CHECK_RC(shmlock_upgrade_close(h[i]), 0);
}

/* Threads, one handle each: writers increment a plain counter and a
 * record of words, readers check the record is whole. */
enum { THREADS = 4, ROUNDS = 3000, WORDS = 8 };
static volatile uint64_t data[WORDS];
static volatile uint64_t counter;
static int torn;

static void *worker(void *arg)
{
	long id = (long)arg;
	shmlock_upgrade *m = named("threads");
	for (int i = 0; i < ROUNDS; i++) {
		int kind = (int)((id + i) % 4);
		if (kind == 0 || kind == 1) {
			if (kind == 0)
				CHECK_RC(shmlock_upgrade_lock(m), 0);
			else {
				CHECK_RC(shmlock_upgrade_lock_upgrade(m), 0);
				CHECK_RC(shmlock_upgrade_upgrade_to_unique(m), 0);
			}
			uint64_t v = counter + 1;
			counter = v;
			for (int j = 0; j < WORDS; j++)
				data[j] = v;
			if (kind == 0)
				CHECK_RC(shmlock_upgrade_unlock(m), 0);
			else {
				CHECK_RC(shmlock_upgrade_unique_to_upgrade(m), 0);
				CHECK_RC(shmlock_upgrade_unlock_upgrade(m), 0);
			}
		} else {
			CHECK_RC(shmlock_upgrade_lock_shared(m), 0);
			for (int j = 1; j < WORDS; j++)
				if (data[j] != data[0])
					__atomic_add_fetch(&torn, 1, __ATOMIC_SEQ_CST);
			CHECK_RC(shmlock_upgrade_unlock_shared(m), 0);
		}
	}
	CHECK_RC(shmlock_upgrade_close(m), 0);
	return NULL;
}

static void test_threads(void)
{
	pthread_t t[THREADS];
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK(counter == (uint64_t)THREADS * ROUNDS / 2);
	CHECK(torn == 0);
}

/* A forked child takes a hold in mode and reports it on a pipe; it is then
 * SIGKILLed and reaped. */
enum { HOLD_UNIQUE, HOLD_SHARED, HOLD_UPGRADED, HOLD_UPGRADE };

static void child_holds(const char *name, int mode)
{
	int p[2];
	CHECK(pipe(p) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		shmlock_upgrade *m;
		if (shmlock_upgrade_named(seg, name, &m) != 0)
			_exit(1);
		int rc = 0;
		switch (mode) {
		case HOLD_UNIQUE: rc = shmlock_upgrade_lock(m); break;
		case HOLD_SHARED: rc = shmlock_upgrade_lock_shared(m); break;
		case HOLD_UPGRADE: rc = shmlock_upgrade_lock_upgrade(m); break;
		case HOLD_UPGRADED:
			rc = shmlock_upgrade_lock_upgrade(m);
			if (rc >= 0)
				rc = shmlock_upgrade_upgrade_to_unique(m);
			break;
		}
		char c = rc >= 0 ? 'y' : 'n';
		if (write(p[1], &c, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	char c = 0;
	CHECK(read(p[0], &c, 1) == 1 && c == 'y');
	kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
	close(p[0]);
	close(p[1]);
}

static void test_dead_writer(void)
{
	shmlock_upgrade *m = named("deadw"), *r = named("deadw");
	child_holds("deadw", HOLD_UNIQUE);
	CHECK(!shmlock_upgrade_inconsistent(m));
	uint64_t g = shmlock_upgrade_generation(m);
	CHECK_RC(shmlock_upgrade_trylock(m), SHMLOCK_EWOULDBLOCK); /* a try never takes over */
	CHECK_RC(shmlock_upgrade_lock(m), SHMLOCK_OWNERDEAD);
	CHECK(shmlock_upgrade_generation(m) > g);
	CHECK(shmlock_upgrade_inconsistent(m));
	CHECK_RC(shmlock_upgrade_unlock(m), 0);
	CHECK_RC(shmlock_upgrade_lock(m), SHMLOCK_INCONSISTENT);
	CHECK_RC(shmlock_upgrade_unlock(m), 0);
	CHECK_RC(shmlock_upgrade_lock_upgrade(m), 0);
	CHECK_RC(shmlock_upgrade_upgrade_to_unique(m), SHMLOCK_INCONSISTENT);
	CHECK_RC(shmlock_upgrade_mark_consistent(m), 0);
	CHECK_RC(shmlock_upgrade_unique_to_upgrade(m), 0);
	CHECK_RC(shmlock_upgrade_unlock_upgrade(m), 0);
	CHECK(!shmlock_upgrade_inconsistent(m));
	CHECK_RC(shmlock_upgrade_lock(m), 0);
	CHECK_RC(shmlock_upgrade_unlock(m), 0);
	/* A reader frees a dead writer on its way in; the next writer is told. */
	child_holds("deadw", HOLD_UNIQUE);
	CHECK_RC(shmlock_upgrade_lock_shared(r), 0);
	CHECK(shmlock_upgrade_inconsistent(r));
	CHECK_RC(shmlock_upgrade_unlock_shared(r), 0);
	CHECK_RC(shmlock_upgrade_lock(m), SHMLOCK_INCONSISTENT);
	CHECK_RC(shmlock_upgrade_mark_consistent(m), 0);
	CHECK_RC(shmlock_upgrade_unlock(m), 0);
	CHECK_RC(shmlock_upgrade_close(m), 0);
	CHECK_RC(shmlock_upgrade_close(r), 0);
}

static void test_dead_reader_and_upgrader(void)
{
	shmlock_upgrade *m = named("deadr");
	child_holds("deadr", HOLD_SHARED);
	CHECK_RC(shmlock_upgrade_trylock(m), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_upgrade_lock(m), 0); /* a dead reader's hold is dropped, no report */
	CHECK_RC(shmlock_upgrade_unlock(m), 0);
	/* A dead upgrade holder: the next upgrade holder takes it over. */
	child_holds("deadr", HOLD_UPGRADE);
	CHECK_RC(shmlock_upgrade_lock_upgrade(m), SHMLOCK_OWNERDEAD);
	CHECK_RC(shmlock_upgrade_upgrade_to_unique(m), 0);
	CHECK_RC(shmlock_upgrade_unique_to_upgrade(m), 0);
	CHECK_RC(shmlock_upgrade_unlock_upgrade(m), 0);
	/* Dead while upgraded: a writer frees it, and is told. */
	child_holds("deadr", HOLD_UPGRADED);
	CHECK_RC(shmlock_upgrade_lock(m), SHMLOCK_OWNERDEAD);
	CHECK_RC(shmlock_upgrade_unlock(m), 0);
	CHECK_RC(shmlock_upgrade_lock(m), SHMLOCK_INCONSISTENT);
	CHECK_RC(shmlock_upgrade_mark_consistent(m), 0);
	CHECK_RC(shmlock_upgrade_unlock(m), 0);
	/* Dead while upgraded: an upgrade seeker takes it over. */
	child_holds("deadr", HOLD_UPGRADED);
	CHECK_RC(shmlock_upgrade_lock_upgrade(m), SHMLOCK_OWNERDEAD);
	CHECK_RC(shmlock_upgrade_upgrade_to_unique(m), SHMLOCK_INCONSISTENT);
	CHECK_RC(shmlock_upgrade_mark_consistent(m), 0);
	CHECK_RC(shmlock_upgrade_unique_to_upgrade(m), 0);
	CHECK_RC(shmlock_upgrade_unlock_upgrade(m), 0);
	CHECK_RC(shmlock_upgrade_close(m), 0);
}

/* A sleeping writer is woken by a reader's release. */
static shmlock_upgrade *sleeper;
static int sleeper_rc = 99;
static void *sleep_writer(void *arg)
{
	sleeper_rc = shmlock_upgrade_lock(sleeper);
	return arg;
}

static void test_wake(void)
{
	shmlock_upgrade *r = named("wake");
	sleeper = named("wake");
	CHECK_RC(shmlock_upgrade_lock_shared(r), 0);
	pthread_t t;
	pthread_create(&t, NULL, sleep_writer, NULL);
	/* Wait until the writer has taken the writers' mutex and sleeps. */
	for (;;) {
		int rc = shmlock_upgrade_trylock_upgrade(r);
		if (rc == SHMLOCK_EWOULDBLOCK)
			break;
		CHECK_RC(rc, 0);
		CHECK_RC(shmlock_upgrade_unlock_upgrade(r), 0);
		usleep(1000);
	}
	usleep(20000); /* not needed for correctness: lets it reach its futex */
	CHECK(__atomic_load_n(&sleeper_rc, __ATOMIC_SEQ_CST) == 99);
	CHECK_RC(shmlock_upgrade_unlock_shared(r), 0);
	pthread_join(t, NULL);
	CHECK_RC(sleeper_rc, 0);
	CHECK_RC(shmlock_upgrade_unlock(sleeper), 0);
	CHECK_RC(shmlock_upgrade_close(r), 0);
	CHECK_RC(shmlock_upgrade_close(sleeper), 0);
}

/* A handle outlives the segment's close: its calls fail with ECLOSED and
 * its close frees it (ASan sees any use of freed segment memory). */
static void test_segment_closed_first(void)
{
	char p2[256];
	check_temp_path(p2, sizeof p2, "upgrade-closed");
	shmlock_segment *s2;
	CHECK_RC(shmlock_create(p2, NULL, &s2), 0);
	shmlock_upgrade *m;
	CHECK_RC(shmlock_upgrade_open(s2, 0, &m), 0);
	CHECK_RC(shmlock_close(s2), 0);
	CHECK_RC(shmlock_upgrade_trylock(m), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_upgrade_lock_shared(m), SHMLOCK_ECLOSED);
	CHECK(shmlock_upgrade_generation(m) == 0);
	CHECK_RC(shmlock_upgrade_close(m), 0);
	CHECK_RC(shmlock_remove(p2), 0);
}

/* The holds a handle can have when its segment is closed, and how each is
 * given back: upgrade/close_test.go's TestUseAfterClose for C. */
enum { MAX_RELEASES = 2 };
typedef int (*upgrade_op)(shmlock_upgrade *);
static int take_shared_twice(shmlock_upgrade *m)
{
	int rc = shmlock_upgrade_lock_shared(m);
	return rc ? rc : shmlock_upgrade_lock_shared(m);
}
static int take_upgraded(shmlock_upgrade *m)
{
	int rc = shmlock_upgrade_lock_upgrade(m);
	return rc ? rc : shmlock_upgrade_upgrade_to_unique(m);
}
static int take_shared_and_upgrade(shmlock_upgrade *m)
{
	int rc = shmlock_upgrade_lock_shared(m);
	return rc ? rc : shmlock_upgrade_lock_upgrade(m);
}
static const struct {
	const char *name;
	upgrade_op take;
	upgrade_op release[MAX_RELEASES];
} closed_holds[] = {
	{"nothing", NULL, {NULL}},
	{"shared", take_shared_twice, {shmlock_upgrade_unlock_shared, shmlock_upgrade_unlock_shared}},
	{"unique", shmlock_upgrade_lock, {shmlock_upgrade_unlock}},
	{"upgrade", shmlock_upgrade_lock_upgrade, {shmlock_upgrade_unlock_upgrade}},
	{"upgraded", take_upgraded, {shmlock_upgrade_unique_to_upgrade, shmlock_upgrade_unlock_upgrade}},
	{"shared-and-upgrade", take_shared_and_upgrade, {shmlock_upgrade_unlock_shared, shmlock_upgrade_unlock_upgrade}},
};

/* A segment closed while a handle holds the mutex: the handle's
 * acquisitions fail with ECLOSED, but its releases still reach the file
 * (the handle keeps the mapping), its close refuses while it holds
 * (EHELD) and then gives its reader record and its claim back, so the
 * mutex is free for everyone else. Kept, the holds would stall every
 * other process until this one exits. */
static void test_release_after_segment_close(void)
{
	for (size_t k = 0; k < sizeof closed_holds / sizeof closed_holds[0]; k++) {
		char p2[256];
		check_temp_path(p2, sizeof p2, "upgrade-release-closed");
		shmlock_segment *s2, *observer;
		CHECK_RC(shmlock_create(p2, NULL, &s2), 0);
		CHECK_RC(shmlock_open(p2, NULL, &observer), 0);
		shmlock_upgrade *m;
		CHECK_RC(shmlock_upgrade_named(s2, "closed", &m), 0);
		if (closed_holds[k].take)
			CHECK_RC(closed_holds[k].take(m), 0);
		CHECK_RC(shmlock_close(s2), 0);

		CHECK_RC(shmlock_upgrade_trylock(m), SHMLOCK_ECLOSED);
		CHECK_RC(shmlock_upgrade_trylock_shared(m), SHMLOCK_ECLOSED);
		CHECK_RC(shmlock_upgrade_trylock_upgrade(m), SHMLOCK_ECLOSED);
		if (closed_holds[k].release[0] != NULL) {
			CHECK_RC(shmlock_upgrade_close(m), SHMLOCK_EHELD);
			for (int i = 0; i < MAX_RELEASES && closed_holds[k].release[i] != NULL; i++) {
				int rc = closed_holds[k].release[i](m);
				if (rc != 0)
					fprintf(stderr, "%s: release %d after the segment's close\n", closed_holds[k].name, i);
				CHECK_RC(rc, 0);
			}
		}
		CHECK_RC(shmlock_upgrade_close(m), 0);

		/* The mutex is free: a unique lock needs no reader counted, and
		 * no record or claim is left to this process. */
		shmlock_upgrade *o;
		CHECK_RC(shmlock_upgrade_named(observer, "closed", &o), 0);
		CHECK_RC(shmlock_upgrade_trylock(o), 0);
		CHECK_RC(shmlock_upgrade_unlock(o), 0);
		CHECK_RC(shmlock_upgrade_close(o), 0);
		uint64_t n;
		struct shm_reader_record *rs = shm_table_of(observer, SHM_UPGRADE_READERS, &n);
		for (uint64_t i = 0; i < n; i++)
			CHECK(atomic_load(&rs[i].owner) == 0 && atomic_load(&rs[i].count) == 0);
		/* Every handle of "closed" is closed: its claim went with the
		 * last (a claim kept would hold the entry until this process
		 * exits). */
		struct shm_dir_entry *d = shm_table_of(observer, SHM_UPGRADE_DIRECTORY, &n);
		for (uint64_t i = 0; i < n; i++)
			CHECK(atomic_load(&d[i].state) == SHM_DIR_FREE && atomic_load(&d[i].refs) == 0);
		CHECK_RC(shmlock_close(observer), 0);
		CHECK_RC(shmlock_remove(p2), 0);
	}
}

/* closing is a segment of its own that a test closes under a handle of
 * mutex 0 (m), and a second mapping of it (observer, with its own handle
 * o) that sees the file afterwards. */
struct closing {
	char path[256];
	shmlock_segment *seg, *observer;
	shmlock_upgrade *m, *o;
	struct shm_upgrade_entry *e; /* mutex 0, through the observer */
};

static void closing_open(struct closing *c, const char *name)
{
	check_temp_path(c->path, sizeof c->path, name);
	CHECK_RC(shmlock_create(c->path, NULL, &c->seg), 0);
	CHECK_RC(shmlock_open(c->path, NULL, &c->observer), 0);
	CHECK_RC(shmlock_upgrade_open(c->seg, 0, &c->m), 0);
	CHECK_RC(shmlock_upgrade_open(c->observer, 0, &c->o), 0);
	uint64_t n;
	c->e = shm_table_of(c->observer, SHM_UPGRADES, &n);
}

/* closing_done: the test closed seg and m; the observer's handle finds the
 * mutex free, then the observer goes and the file with it. */
static void closing_done(struct closing *c)
{
	CHECK_RC(shmlock_upgrade_trylock(c->o), 0);
	CHECK_RC(shmlock_upgrade_unlock(c->o), 0);
	CHECK_RC(shmlock_upgrade_close(c->o), 0);
	CHECK_RC(shmlock_close(c->observer), 0);
	CHECK_RC(shmlock_remove(c->path), 0);
}

/* The news of a dead holder after the segment's close: inconsistent still
 * says so, and a holder that repaired the data may still mark it
 * consistent (Go: Inconsistent and MarkConsistent never check the close),
 * which another mapping sees. */
static void test_consistent_after_close(void)
{
	struct closing c;
	closing_open(&c, "upgrade-consistent-closed");
	atomic_fetch_or(&c.e[0].state, SHM_UPG_INCONSISTENT); /* as a reclaim leaves it */
	CHECK_RC(shmlock_upgrade_lock(c.m), SHMLOCK_INCONSISTENT);
	CHECK_RC(shmlock_close(c.seg), 0);
	CHECK(shmlock_upgrade_inconsistent(c.m) == 1);
	CHECK_RC(shmlock_upgrade_mark_consistent(c.m), 0);
	CHECK(shmlock_upgrade_inconsistent(c.m) == 0);
	CHECK(shmlock_upgrade_inconsistent(c.o) == 0);
	CHECK_RC(shmlock_upgrade_unlock(c.m), 0);
	CHECK_RC(shmlock_upgrade_close(c.m), 0);
	closing_done(&c); /* its trylock: not INCONSISTENT any more */
}

/* A thread that waits holding part of the mutex (the close watch). */
struct part_waiter {
	shmlock_upgrade *m;
	int upgrade_first; /* lock_upgrade, then upgrade_to_unique; else op */
	int (*op)(shmlock_upgrade *);
	int rc;
};

static void *part_waiter(void *arg)
{
	struct part_waiter *w = arg;
	if (w->upgrade_first) {
		w->rc = shmlock_upgrade_lock_upgrade(w->m);
		if (w->rc == 0)
			w->rc = shmlock_upgrade_upgrade_to_unique(w->m);
	} else {
		w->rc = w->op(w->m);
	}
	return NULL;
}

/* A wait that holds part of the mutex when its segment closes (upgrade's
 * closeWatch): shmlock_close wakes it and returns only once it has given
 * back what it held, so right after the close another mapping finds none
 * of it left. Kept until the waiter's next liveness slice, it would have
 * kept every other process out meanwhile.
 *   - a writer with the writers' mutex and UPG_WRITE, draining a reader;
 *   - an upgrade holder's upgrade_to_unique with UPG_PENDING, draining one;
 *   - a lock_upgrade with the upgrader word, waiting for a writer. */
static void test_close_wakes_partial_holds(void)
{
	for (int k = 0; k < 3; k++) {
		struct closing c;
		closing_open(&c, "upgrade-close-watch");
		shmlock_segment *s2 = c.seg;
		shmlock_upgrade *m = c.m, *o = c.o;
		struct shm_upgrade_entry *e = c.e;
		if (k < 2)
			CHECK_RC(shmlock_upgrade_lock_shared(o), 0); /* the reader they drain */
		else
			CHECK_RC(shmlock_upgrade_lock(o), 0); /* the writer it waits for */
		struct part_waiter w = {.m = m, .upgrade_first = k == 1, .op = k == 0 ? shmlock_upgrade_lock : shmlock_upgrade_lock_upgrade, .rc = 99};
		pthread_t t;
		pthread_create(&t, NULL, part_waiter, &w);
		while (atomic_load(&s2->watchers) == 0) {
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, NULL);
		}
		CHECK_RC(shmlock_close(s2), 0);
		uint32_t st = atomic_load(&e[0].state);
		switch (k) {
		case 0:
			CHECK((st & SHM_UPG_WRITE) == 0 && atomic_load(&e[0].writer) == 0);
			break;
		case 1:
			CHECK((st & SHM_UPG_PENDING) == 0 && (st & SHM_UPG_WRITE) == 0);
			break;
		default:
			CHECK((st & SHM_UPG_UPGRADE) == 0 && atomic_load(&e[0].upgrader) == 0);
		}
		pthread_join(t, NULL);
		CHECK_RC(w.rc, SHMLOCK_ECLOSED);
		if (k == 1)
			CHECK_RC(shmlock_upgrade_unlock_upgrade(m), 0); /* its upgrade lock, given back after the close */
		CHECK_RC(shmlock_upgrade_close(m), 0);
		CHECK_RC(k < 2 ? shmlock_upgrade_unlock_shared(o) : shmlock_upgrade_unlock(o), 0);
		closing_done(&c);
	}
}

/* A reader record whose count a damage set to 2^32-1: the next shared
 * hold would wrap it to 0 and count nothing its release could find; it is
 * refused (overflow), the record unchanged. */
static void test_wrapped_count(void)
{
	shmlock_upgrade *m = named("wrapped");
	CHECK_RC(shmlock_upgrade_lock_shared(m), 0);
	uint64_t n;
	struct shm_reader_record *rs = shm_table_of(seg, SHM_UPGRADE_READERS, &n), *r = NULL;
	for (uint64_t i = 0; i < n && r == NULL; i++)
		if (atomic_load(&rs[i].owner) == shmlock_self_identity() && atomic_load(&rs[i].count) == 1)
			r = &rs[i];
	CHECK(r != NULL);
	if (r == NULL)
		return;
	atomic_store(&r->count, UINT32_MAX);
	CHECK_RC(shmlock_upgrade_trylock_shared(m), SHMLOCK_EOVERFLOW);
	CHECK_RC(shmlock_upgrade_lock_shared(m), SHMLOCK_EOVERFLOW);
	CHECK(atomic_load(&r->count) == UINT32_MAX);
	atomic_store(&r->count, 1);
	CHECK_RC(shmlock_upgrade_unlock_shared(m), 0);
	CHECK_RC(shmlock_upgrade_close(m), 0);
}

/* A writer killed on the fast path after its CAS of the unique bit and
 * before its step back (it found a live upgrade holder) leaves the bit
 * under the live holder's UPG_UPGRADE. A reader, whom the upgrade holder
 * does not block, must release the dead writer and get in, not wait for
 * as long as the upgrade lock is held (Go:
 * TestDeadFastPathWriterUnderUpgradeHolder). And a writer that moves down
 * to the upgrade lock takes a dead seeker's bare upgrader word over
 * (Go: TestUniqueToUpgradeOverDeadSeeker). */
static void test_dead_fast_path_writer(void)
{
	shmlock_upgrade *u = named("deadfast"), *r = named("deadfast");
	uint64_t n;
	struct shm_upgrade_entry *e = shm_table_of(seg, SHM_UPGRADES, &n);
	e += shmlock_upgrade_index(u);
	child_holds("deadfast", HOLD_UNIQUE);
	uint64_t dead = atomic_load(&e->writer); /* the dead child's word, unique bit and all */
	CHECK(dead != 0);
	CHECK_RC(shmlock_upgrade_lock(u), SHMLOCK_OWNERDEAD); /* clear it away first */
	CHECK_RC(shmlock_upgrade_mark_consistent(u), 0);
	CHECK_RC(shmlock_upgrade_unlock(u), 0);

	CHECK_RC(shmlock_upgrade_lock_upgrade(u), 0);
	atomic_store(&e->writer, dead); /* as the killed fast-path writer left it */
	CHECK_RC(shmlock_upgrade_timedlock_shared(r, 5 * INT64_C(1000000000)), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(r), 0);
	CHECK_RC(shmlock_upgrade_unlock_upgrade(u), 0);
	CHECK_RC(shmlock_upgrade_lock(u), SHMLOCK_INCONSISTENT);
	CHECK_RC(shmlock_upgrade_mark_consistent(u), 0);

	/* A seeker killed between its CAS of the upgrader word and
	 * UPG_UPGRADE: the holder of the unique lock moves down over it. */
	atomic_store(&e->upgrader, dead & ~(uint64_t)SHM_UPG_WRITER_UNIQUE);
	CHECK_RC(shmlock_upgrade_unique_to_upgrade(u), 0);
	CHECK_RC(shmlock_upgrade_unlock_upgrade(u), 0);
	CHECK_RC(shmlock_upgrade_close(u), 0);
	CHECK_RC(shmlock_upgrade_close(r), 0);
}

/* An operator's force (Go's ForceUnlock) takes the writer word of a
 * release and gives it back when it sees the holder id gone, but may be
 * off its CPU for long in between: the release waits for the word for as
 * long as the forcer lives and has it. Here the release is a writer's
 * abandon at the close of its segment (it waited for the upgrade lock),
 * and the forcer a child that gives the word back when the release first
 * checks that it lives (the hook), after FORCE_GIVE_BACK_WAIT yields:
 *   - k = 0: the forcer is slow: it gives the word back from then on. A
 *     release that stopped after those yields left the word given back to
 *     its identity with nobody to free it, for as long as this process
 *     lived.
 *   - k = 1: the forcer gives the word back and exits (shmctl unlock
 *     --force does, just after) before the check reads /proc: the check
 *     says dead, of a forcer whose word the release loaded before the
 *     give-back. A release that trusted that load left the word given
 *     back, as above.
 * No deadline in the test: the writer waits until the close, and the
 * forcer gives the word back when the release tells it to. */
static struct {
	pid_t pid;
	uint64_t id;
	int go;           /* write end of the pipe that tells it to give the word back */
	bool told;
	bool exits_first; /* k = 1 */
	int checks;       /* the release's liveness checks of it */
} forcer;

static void tell_forcer(void)
{
	char c = 'g';
	CHECK(write(forcer.go, &c, 1) == 1);
	forcer.told = true;
}

/* forcer_checked is the hook, in the writer's thread. */
static void forcer_checked(uint64_t id)
{
	if (id != forcer.id || forcer.checks++ != 0)
		return;
	tell_forcer();
	siginfo_t si;
	if (forcer.exits_first) /* until it has given the word back and exited; not reaped */
		CHECK(waitid(P_PID, (id_t)forcer.pid, &si, WEXITED | WNOWAIT) == 0);
}

/* start_forcer forks the forcer: it takes the word from the writer's
 * identity self, and gives it back once told. */
static void start_forcer(a64 *word, uint64_t self)
{
	int took[2], go[2];
	CHECK(pipe(took) == 0 && pipe(go) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		uint64_t me = shm_self(), o = self;
		if (!atomic_compare_exchange_strong(word, &o, me))
			_exit(2);
		char c = 'y';
		if (write(took[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(1);
		o = me;
		_exit(atomic_compare_exchange_strong(word, &o, self) ? 0 : 3);
	}
	char c = 0;
	CHECK(read(took[0], &c, 1) == 1 && c == 'y');
	forcer.pid = pid;
	forcer.id = atomic_load(word);
	forcer.go = go[1];
	forcer.told = false;
	forcer.checks = 0;
	close(took[0]);
	close(took[1]);
	close(go[0]);
}

static void test_slow_force_give_back(void)
{
	for (int k = 0; k < 2; k++) {
		struct closing c;
		closing_open(&c, "upgrade-giveback");
		CHECK_RC(shmlock_upgrade_lock_upgrade(c.o), 0); /* what the writer waits for */
		struct part_waiter w = {.m = c.m, .op = shmlock_upgrade_lock, .rc = 99};
		pthread_t t;
		pthread_create(&t, NULL, part_waiter, &w);
		uint64_t self = shm_self();
		while (atomic_load(&c.seg->watchers) == 0 || atomic_load(&c.e[0].writer) != self)
			sched_yield(); /* it waits for the upgrade lock, holding the word */
		forcer.exits_first = k == 1;
		start_forcer(&c.e[0].writer, self);
		shm_test_hook_alive = forcer_checked;
		CHECK_RC(shmlock_close(c.seg), 0); /* the writer abandons: its release finds the forcer's word */
		pthread_join(t, NULL);
		shm_test_hook_alive = NULL;
		CHECK(forcer.checks >= 1);
		if (!forcer.told) /* a release that never checked: the forcer gives the word back now */
			tell_forcer();
		int st;
		waitpid(forcer.pid, &st, 0);
		close(forcer.go);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		CHECK_RC(w.rc, SHMLOCK_ECLOSED);
		CHECK(atomic_load(&c.e[0].writer) == 0);
		CHECK_RC(shmlock_upgrade_close(c.m), 0);
		CHECK_RC(shmlock_upgrade_unlock_upgrade(c.o), 0);
		closing_done(&c);
	}
}

/* A unique holder that releases and exits (a process whose last act is
 * its unlock) between a repairer's load of the writer word, which named
 * it, and the repairer's check that it lives: the check reads a zombie in
 * /proc and says dead, of a holder whose word the repairer loaded before
 * the release. Here the repairer is a reader at its liveness slice, and
 * the holder a child that unlocks and exits when the reader first checks
 * it (the hook), before the check reads /proc. A repairer that trusted
 * its load marked the mutex inconsistent and moved the generation on
 * before its CAS of the word failed: the next writer was told of a reclaim
 * that never was. */
static struct {
	pid_t pid;
	uint64_t id;
	int go; /* write end of the pipe that tells it to unlock and exit */
	int checks;
} releaser;

static void releaser_checked(uint64_t id)
{
	if (id != releaser.id || releaser.checks++ != 0)
		return;
	char c = 'g';
	CHECK(write(releaser.go, &c, 1) == 1);
	siginfo_t si; /* until it has unlocked and exited; not reaped */
	CHECK(waitid(P_PID, (id_t)releaser.pid, &si, WEXITED | WNOWAIT) == 0);
}

static void test_clean_release_then_exit(void)
{
	shmlock_upgrade *r = named("cleanexit");
	int held[2], go[2];
	CHECK(pipe(held) == 0 && pipe(go) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		shmlock_upgrade *m;
		char c = 'y';
		if (shmlock_upgrade_named(seg, "cleanexit", &m) != 0 || shmlock_upgrade_lock(m) != 0)
			_exit(1);
		if (write(held[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(1);
		_exit(shmlock_upgrade_unlock(m) == 0 ? 0 : 3);
	}
	char c = 0;
	CHECK(read(held[0], &c, 1) == 1 && c == 'y');
	uint64_t n;
	struct shm_upgrade_entry *e = shm_table_of(seg, SHM_UPGRADES, &n);
	e += shmlock_upgrade_index(r);
	releaser.pid = pid;
	uint64_t w = atomic_load(&e->writer);
	CHECK(w & SHM_UPG_WRITER_UNIQUE); /* the fast path's hold: marked before the takeover's CAS */
	releaser.id = w & ~SHM_UPG_WRITER_UNIQUE;
	releaser.go = go[1];
	releaser.checks = 0;
	uint64_t g = shmlock_upgrade_generation(r);
	shm_test_hook_alive = releaser_checked;
	CHECK_RC(shmlock_upgrade_lock_shared(r), 0); /* waits, and checks the holder at a slice */
	shm_test_hook_alive = NULL;
	CHECK(releaser.checks >= 1);
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(!shmlock_upgrade_inconsistent(r));
	CHECK(shmlock_upgrade_generation(r) == g + 1); /* the release's bump, and no other */
	CHECK_RC(shmlock_upgrade_unlock_shared(r), 0);
	CHECK_RC(shmlock_upgrade_lock(r), 0); /* not told of a reclaim */
	CHECK_RC(shmlock_upgrade_unlock(r), 0);
	for (int i = 0; i < 2; i++) {
		close(held[i]);
		close(go[i]);
	}
	CHECK_RC(shmlock_upgrade_close(r), 0);
}

int main(void)
{
	setup();
	RUN(test_unique);
	RUN(test_shared);
	RUN(test_upgrade);
	RUN(test_bad_input);
	RUN(test_records);
	RUN(test_threads);
	RUN(test_dead_writer);
	RUN(test_dead_reader_and_upgrader);
	RUN(test_wake);
	RUN(test_segment_closed_first);
	RUN(test_release_after_segment_close);
	RUN(test_consistent_after_close);
	RUN(test_close_wakes_partial_holds);
	RUN(test_wrapped_count);
	RUN(test_dead_fast_path_writer);
	RUN(test_slow_force_give_back);
	RUN(test_clean_release_then_exit);
	teardown();
	return CHECK_DONE();
}
