/* upgrade: the C helper of clib/upgrade_test.go, beside the Go helper of
 * the same commands (upgWorker there):
 *
 *   upgrade worker SEG FILE NAME ROLE ROUNDS
 *	ROLE w (unique writer), u (upgrade, then unique), r (reader) or m
 *	(all three in turn); ROUNDS < 0 runs until killed. Writers add 1 to
 *	the record in FILE (RECORD_WORDS plain words, all equal when whole,
 *	word 0 the counter) one word at a time; readers check it is whole.
 *	Prints "ready", "report" for each acquisition told of a dead holder
 *	(it then repairs the record and marks the mutex consistent), and
 *	"done WRITES READS" at the end. A torn record nobody was told of is
 *	a failure (exit 1).
 *   upgrade hold SEG NAME MODE     MODE unique, shared or upgrade: takes it,
 *	prints "held", waits for a line on stdin, releases, prints "released".
 *   upgrade wait SEG NAME MODE     prints "waiting", takes it (blocking),
 *	prints "got RC", releases.
 *   upgrade timeouts SEG NAME MODE N MS
 *	N timed takes of MS ms each, every one of which must time out; MODE
 *	to-unique takes the upgrade lock (at once) and times out upgrading it.
 *	Prints "done".
 *   upgrade try SEG INDEX KIND     opens mutex INDEX (a clean one) and claims
 *	its reader record, prints "ready", waits for a line on stdin, then
 *	(whatever the words) one try of KIND unique, shared or upgrade (then
 *	a try to upgrade to unique and back), then a wait of 200 us of the
 *	same kind; each grant is released again. Prints "try RC WAITED" and
 *	"close RC"; a grant whose release fails exits 1.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/mman.h>

#include "helper.h"

enum { RECORD_WORDS = 8 };

static volatile uint64_t *map_record(const char *file)
{
	int fd = open(file, O_RDWR);
	if (fd < 0) {
		perror(file);
		exit(1);
	}
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	close(fd);
	return p;
}

static shmlock_upgrade *open_mutex(const char *segpath, const char *name, shmlock_segment **seg)
{
	int rc = shmlock_open(segpath, NULL, seg);
	if (rc)
		die("open segment", rc);
	shmlock_upgrade *m;
	if ((rc = shmlock_upgrade_named(*seg, name, &m)) != 0)
		die("named", rc);
	return m;
}

static bool whole(volatile uint64_t *r)
{
	for (int j = 1; j < RECORD_WORDS; j++)
		if (r[j] != r[0])
			return false;
	return true;
}

/* A dead holder that upgraded may be freed by a Go process that sets the
 * inconsistent bit just after clearing the unique hold (two operations):
 * a torn record with the bit still clear is given that moment. */
static bool told_late(shmlock_upgrade *m)
{
	for (int i = 0; i < 10000; i++) {
		if (shmlock_upgrade_inconsistent(m))
			return true;
		sched_yield();
	}
	return false;
}

/* fenced checks the fencing token of a unique or upgrade hold that has just
 * begun, C's or Go's: it must exceed every earlier one. The word after the
 * record keeps 1 + the last token (0 before any). */
static void fenced(shmlock_upgrade *m, volatile uint64_t *r)
{
	uint64_t g = shmlock_upgrade_generation(m) + 1;
	if (g <= r[RECORD_WORDS]) {
		fprintf(stderr, "fencing token %" PRIu64 " after %" PRIu64 "\n", g - 1, r[RECORD_WORDS] - 1);
		exit(1);
	}
	r[RECORD_WORDS] = g;
}

/* write holds the unique lock (report: the acquisition's rc). */
static void write_record(shmlock_upgrade *m, volatile uint64_t *r, int rc)
{
	if (rc == SHMLOCK_OWNERDEAD || rc == SHMLOCK_INCONSISTENT) {
		say("report");
		for (int j = 1; j < RECORD_WORDS; j++) /* a dead writer wrote word 0 first */
			r[j] = r[0];
		if ((rc = shmlock_upgrade_mark_consistent(m)) != 0)
			die("mark consistent", rc);
	} else if (!whole(r) && !told_late(m)) {
		fprintf(stderr, "writer: torn record without a report: %" PRIu64 " %" PRIu64 "\n", r[0], r[RECORD_WORDS - 1]);
		exit(1);
	} else if (!whole(r)) {
		say("report");
		for (int j = 1; j < RECORD_WORDS; j++)
			r[j] = r[0];
		if ((rc = shmlock_upgrade_mark_consistent(m)) != 0)
			die("mark consistent", rc);
	}
	uint64_t v = r[0] + 1;
	for (int j = 0; j < RECORD_WORDS; j++)
		r[j] = v;
}

static int worker(int argc, char **argv)
{
	if (argc != 7)
		return 2;
	shmlock_segment *seg;
	shmlock_upgrade *m = open_mutex(argv[2], argv[4], &seg);
	volatile uint64_t *r = map_record(argv[3]);
	const char *role = argv[5];
	long rounds = helper_atol(argv[6]);
	long writes = 0, reads = 0;
	say("ready");
	for (long i = 0; rounds < 0 || i < rounds; i++) {
		char k = role[0] == 'm' ? "wur"[i % 3] : role[0];
		int rc;
		switch (k) {
		case 'w':
			if ((rc = shmlock_upgrade_lock(m)) < 0)
				die("lock", rc);
			fenced(m, r);
			write_record(m, r, rc);
			if ((rc = shmlock_upgrade_unlock(m)) != 0)
				die("unlock", rc);
			writes++;
			break;
		case 'u': {
			int up = shmlock_upgrade_lock_upgrade(m);
			if (up < 0)
				die("lock upgrade", up);
			fenced(m, r);
			if ((rc = shmlock_upgrade_upgrade_to_unique(m)) < 0)
				die("upgrade to unique", rc);
			write_record(m, r, up == SHMLOCK_OWNERDEAD ? up : rc);
			if ((rc = shmlock_upgrade_unique_to_upgrade(m)) != 0)
				die("unique to upgrade", rc);
			if ((rc = shmlock_upgrade_unlock_upgrade(m)) != 0)
				die("unlock upgrade", rc);
			writes++;
			break;
		}
		default:
			if ((rc = shmlock_upgrade_lock_shared(m)) != 0)
				die("lock shared", rc);
			if (!whole(r) && !shmlock_upgrade_inconsistent(m) && !told_late(m)) {
				fprintf(stderr, "reader: torn record, mutex consistent\n");
				exit(1);
			}
			if ((rc = shmlock_upgrade_unlock_shared(m)) != 0)
				die("unlock shared", rc);
			reads++;
		}
	}
	say("done %ld %ld", writes, reads);
	int rc = shmlock_upgrade_close(m);
	if (rc)
		die("close", rc);
	shmlock_close(seg);
	return 0;
}

static int take(shmlock_upgrade *m, const char *mode)
{
	if (!strcmp(mode, "unique"))
		return shmlock_upgrade_lock(m);
	if (!strcmp(mode, "shared"))
		return shmlock_upgrade_lock_shared(m);
	if (!strcmp(mode, "upgrade"))
		return shmlock_upgrade_lock_upgrade(m);
	fprintf(stderr, "unknown mode %s\n", mode);
	exit(2);
}

static int give(shmlock_upgrade *m, const char *mode)
{
	if (!strcmp(mode, "unique"))
		return shmlock_upgrade_unlock(m);
	if (!strcmp(mode, "shared"))
		return shmlock_upgrade_unlock_shared(m);
	return shmlock_upgrade_unlock_upgrade(m);
}

static int hold_or_wait(int argc, char **argv, bool hold)
{
	if (argc != 5)
		return 2;
	shmlock_segment *seg;
	shmlock_upgrade *m = open_mutex(argv[2], argv[3], &seg);
	if (!hold)
		say("waiting");
	int rc = take(m, argv[4]);
	if (rc < 0)
		die("take", rc);
	if (hold) {
		say("held");
		char line[64];
		if (!fgets(line, sizeof line, stdin))
			return 1;
	} else {
		say("got %d", rc);
	}
	if ((rc = give(m, argv[4])) != 0)
		die("give", rc);
	say("released");
	if ((rc = shmlock_upgrade_close(m)) != 0)
		die("close", rc);
	shmlock_close(seg);
	return 0;
}

static int timeouts(int argc, char **argv)
{
	if (argc != 7)
		return 2;
	shmlock_segment *seg;
	shmlock_upgrade *m = open_mutex(argv[2], argv[3], &seg);
	const char *mode = argv[4];
	long n = helper_atol(argv[5]);
	int64_t timeout = helper_atol(argv[6]) * 1000000LL;
	for (long i = 0; i < n; i++) {
		int rc;
		if (!strcmp(mode, "unique")) {
			rc = shmlock_upgrade_timedlock(m, timeout);
		} else if (!strcmp(mode, "shared")) {
			rc = shmlock_upgrade_timedlock_shared(m, timeout);
		} else if (!strcmp(mode, "upgrade")) {
			rc = shmlock_upgrade_timedlock_upgrade(m, timeout);
		} else if (!strcmp(mode, "to-unique")) {
			if ((rc = shmlock_upgrade_trylock_upgrade(m)) != 0)
				die("trylock_upgrade", rc);
			rc = shmlock_upgrade_timed_upgrade_to_unique(m, timeout);
			int urc = shmlock_upgrade_unlock_upgrade(m);
			if (urc != 0)
				die("unlock_upgrade", urc);
		} else {
			fprintf(stderr, "unknown mode %s\n", mode);
			return 2;
		}
		if (rc != SHMLOCK_ETIMEDOUT) {
			fprintf(stderr, "%s take %ld: %d (%s), want a timeout\n", mode, i, rc, shmlock_strerror(rc));
			return 1;
		}
	}
	say("done");
	int rc = shmlock_upgrade_close(m);
	if (rc != 0)
		die("close", rc);
	shmlock_close(seg);
	return 0;
}

/* try is clib's replay of upgrade's FuzzEntry: the entry's and reader
 * records' words are whatever the test wrote there, and the calls must
 * return (a code or not) and a grant be released again. The mutex is
 * opened by index, so that no claim directory is involved. */
static shmlock_segment *try_seg; /* static: a handle whose close is refused is no leak */
static shmlock_upgrade *try_mutex;

static int try(int argc, char **argv)
{
	if (argc != 5)
		return 2;
	int rc = shmlock_open(argv[2], NULL, &try_seg);
	if (rc)
		die("open segment", rc);
	if ((rc = shmlock_upgrade_open(try_seg, (size_t)helper_atol(argv[3]), &try_mutex)) != 0)
		die("open mutex", rc);
	shmlock_upgrade *m = try_mutex;
	/* A shared hold claims the handle's reader record (the first, on a
	 * clean mutex), which the handle keeps: the words the test writes then
	 * lie under an open handle, as in FuzzEntry. */
	if ((rc = shmlock_upgrade_trylock_shared(m)) != 0 || (rc = shmlock_upgrade_unlock_shared(m)) != 0)
		die("claim a reader record", rc);
	say("ready"); /* the test writes the mutex's words now */
	char line[16];
	if (fgets(line, sizeof line, stdin) == NULL)
		return 1;
	const char *kind = argv[4];
	int got;
	if (!strcmp(kind, "unique")) {
		if ((got = shmlock_upgrade_trylock(m)) >= 0 && (rc = shmlock_upgrade_unlock(m)) != 0)
			die("unlock", rc);
	} else if (!strcmp(kind, "shared")) {
		if ((got = shmlock_upgrade_trylock_shared(m)) >= 0 && (rc = shmlock_upgrade_unlock_shared(m)) != 0)
			die("unlock shared", rc);
	} else if (!strcmp(kind, "upgrade")) {
		if ((got = shmlock_upgrade_trylock_upgrade(m)) >= 0) {
			if (shmlock_upgrade_try_upgrade_to_unique(m) >= 0 && (rc = shmlock_upgrade_unique_to_upgrade(m)) != 0)
				die("unique to upgrade", rc);
			if ((rc = shmlock_upgrade_unlock_upgrade(m)) != 0)
				die("unlock upgrade", rc);
		}
	} else {
		fprintf(stderr, "unknown kind %s\n", kind);
		return 2;
	}
	/* A wait of the same kind ends by its deadline, whatever the words. */
	const int64_t wait_ns = 200 * INT64_C(1000);
	int waited;
	if (!strcmp(kind, "unique")) {
		if ((waited = shmlock_upgrade_timedlock(m, wait_ns)) >= 0 && (rc = shmlock_upgrade_unlock(m)) != 0)
			die("unlock a waited grant", rc);
	} else if (!strcmp(kind, "shared")) {
		if ((waited = shmlock_upgrade_timedlock_shared(m, wait_ns)) >= 0 && (rc = shmlock_upgrade_unlock_shared(m)) != 0)
			die("unlock a waited shared grant", rc);
	} else if ((waited = shmlock_upgrade_timedlock_upgrade(m, wait_ns)) >= 0) {
		if (shmlock_upgrade_timed_upgrade_to_unique(m, wait_ns) >= 0 && (rc = shmlock_upgrade_unique_to_upgrade(m)) != 0)
			die("unique to upgrade after a wait", rc);
		if ((rc = shmlock_upgrade_unlock_upgrade(m)) != 0)
			die("unlock a waited upgrade grant", rc);
	}
	say("try %d %d", got, waited);
	/* A close may refuse a handle that the words say holds the mutex. */
	if ((rc = shmlock_upgrade_close(m)) == 0)
		shmlock_close(try_seg);
	say("close %d", rc);
	return 0;
}

int main(int argc, char **argv)
{
	helper_options(&argc, &argv);
	if (argc < 2)
		return 2;
	if (!strcmp(argv[1], "try"))
		return try(argc, argv);
	if (!strcmp(argv[1], "worker"))
		return worker(argc, argv);
	if (!strcmp(argv[1], "hold"))
		return hold_or_wait(argc, argv, true);
	if (!strcmp(argv[1], "timeouts"))
		return timeouts(argc, argv);
	if (!strcmp(argv[1], "wait"))
		return hold_or_wait(argc, argv, false);
	fprintf(stderr, "unknown command %s\n", argv[1]);
	return 2;
}
