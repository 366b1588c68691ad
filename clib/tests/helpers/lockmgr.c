/* lockmgr: the C side of clib/lockmgr_test.go.
 *
 *   lockmgr count PATH RECORD ROUNDS   take "job" exclusively ROUNDS times (0: until
 *                                      the stop word is set), incrementing the plain
 *                                      counter and this worker's tally under it
 *   lockmgr hold PATH RES OWNER MODE   acquire (retrying, with a backoff of an hour:
 *                                      only a release or a death gets it going), print
 *                                      "held ...", wait for a line on stdin, release
 *   lockmgr try PATH RES OWNER MODE    one attempt; prints "rc=N CODE", and for a grant
 *                                      "version=V reclaimed=R inconsistent=I"; on a
 *                                      conflict one more, waiting up to 200 us: "waited
 *                                      rc=N CODE" (the same for a grant); marks a grant
 *                                      consistent ("consistent rc=N CODE"), releases it and
 *                                      checks its version and the next ("check rc=N CODE",
 *                                      twice)
 *   lockmgr late PATH RES OWNER        marks consistent, refreshes (a minute), then releases
 *                                      OWNER's hold of RES, without having taken it;
 *                                      prints "consistent rc=N CODE", "refresh rc=N CODE"
 *                                      and "rc=N CODE"
 *   lockmgr timeouts PATH RES OWNER N MS
 *                                      N exclusive acquisitions waiting MS ms each,
 *                                      every one of which must time out; prints "done"
 *
 * The scratch words are in the data region "lockmgr-test" (see
 * lockmgr_test.go for the offsets): the counter, the version of the last
 * exclusive grant and the tallies are plain words, read and written only
 * under the exclusive hold (two holders at once lose increments or see a
 * version go back); the marker, the stop word and the reclaim count are
 * atomic. */
#include <sched.h>
#include <stdbool.h>

#include "helper.h"
#include "internal.h" /* the region directory: the data regions have no public C API yet */

#define REGION "lockmgr-test"
#define REGION_SIZE 8192
#define OFF_COUNTER 0
#define OFF_LAST_VERSION 64
#define OFF_MARKER 128
#define OFF_STOP 192
#define OFF_RECLAIMS 256
#define OFF_RECORDS 1024
#define RECORD_SIZE 32

static unsigned char *scratch;

/* Plain words: one load and one store, never an atomic increment. */
static uint64_t plain_load(size_t off) { return __atomic_load_n((uint64_t *)(scratch + off), __ATOMIC_RELAXED); }
static void plain_store(size_t off, uint64_t v) { __atomic_store_n((uint64_t *)(scratch + off), v, __ATOMIC_RELAXED); }
static uint64_t *word(size_t off) { return (uint64_t *)(scratch + off); }

static int parse_mode(const char *s)
{
	if (strcmp(s, "exclusive") == 0)
		return SHMLOCK_EXCLUSIVE;
	if (strcmp(s, "collaborative") == 0)
		return SHMLOCK_COLLABORATIVE;
	fprintf(stderr, "bad mode %s\n", s);
	exit(2);
}

/* find_region looks region name up as FORMAT.md says a reader may, without
 * the registry lock: the test claimed it before starting any helper. */
static void *find_region(shmlock_segment *seg, const char *name, uint64_t size)
{
	uint64_t n, ndata, want[5] = {0};
	uint32_t len = (uint32_t)strlen(name);
	struct shm_region_entry *dir = shm_table_of(seg, SHM_REGION_DIRECTORY, &n);
	uint8_t *data = shm_table_of(seg, SHM_DATA, &ndata);
	if (dir == NULL || data == NULL || len == 0 || len > SHM_NAME_LEN)
		return NULL;
	memcpy(want, name, len); /* little-endian words, zero-padded */
	for (uint64_t i = 0; i < n; i++) {
		struct shm_region_entry *r = &dir[i];
		if (atomic_load(&r->state) != SHM_DIR_CLAIMED || atomic_load(&r->name_len) != len)
			continue;
		bool same = true;
		for (int j = 0; j < 5; j++)
			same = same && atomic_load(&r->name[j]) == want[j];
		if (same && atomic_load(&r->size) == size && atomic_load(&r->offset) + size <= ndata * 64)
			return data + atomic_load(&r->offset);
	}
	return NULL;
}

static shmlock_lockmgr *open_all(const char *path, shmlock_segment **seg)
{
	int rc = shmlock_open(path, NULL, seg);
	if (rc != 0)
		die("open", rc);
	if ((scratch = find_region(*seg, REGION, REGION_SIZE)) == NULL)
		die("data region", SHMLOCK_ENOTFOUND);
	shmlock_lockmgr *m = NULL;
	if ((rc = shmlock_lockmgr_open(*seg, &m)) != 0)
		die("lockmgr open", rc);
	return m;
}

static int count(const char *path, long rec, long rounds)
{
	shmlock_segment *seg;
	shmlock_lockmgr *m = open_all(path, &seg);
	char owner[32];
	snprintf(owner, sizeof owner, "c-worker-%ld", rec);
	size_t tally = OFF_RECORDS + (size_t)rec * RECORD_SIZE, reclaims = tally + 8;
	uint64_t me = (uint64_t)getpid(), done = 0, mine = 0, last = 0;
	shmlock_acquire_options o = {.retries = SHMLOCK_RETRY_FOREVER};
	int mode = SHMLOCK_EXCLUSIVE | (rec % 2 ? SHMLOCK_ACQUIRE_EAGER : 0); /* eager waiters beside the others */
	say("ready");
	while (rounds > 0 ? (long)done < rounds : __atomic_load_n(word(OFF_STOP), __ATOMIC_SEQ_CST) == 0) {
		shmlock_lock_info info;
		int rc = shmlock_lockmgr_acquire(m, "job", owner, mode, &o, &info);
		if (rc != 0)
			die("acquire", rc);
		uint64_t zero = 0;
		if (!__atomic_compare_exchange_n(word(OFF_MARKER), &zero, me, false, __ATOMIC_SEQ_CST,
		                                 __ATOMIC_SEQ_CST)) {
			/* A killed holder leaves its marker: only wrong if the hold
			 * was not reclaimed from it. */
			if (!info.reclaimed) {
				fprintf(stderr, "FAIL two holders: %" PRIu64 " and me (%" PRIu64 ")\n", zero, me);
				return 1;
			}
			__atomic_store_n(word(OFF_MARKER), me, __ATOMIC_SEQ_CST);
		}
		if (info.version <= last || info.version <= plain_load(OFF_LAST_VERSION)) {
			fprintf(stderr, "FAIL version %" PRIu64 " after %" PRIu64 " (mine) and %" PRIu64 " (anyone's)\n",
			        info.version, last, plain_load(OFF_LAST_VERSION));
			return 1;
		}
		last = info.version;
		plain_store(OFF_LAST_VERSION, info.version);
		if (info.reclaimed) {
			plain_store(reclaims, plain_load(reclaims) + 1);
			plain_store(OFF_RECLAIMS, plain_load(OFF_RECLAIMS) + 1);
			mine++;
			say("reclaimed");
		}
		plain_store(OFF_COUNTER, plain_load(OFF_COUNTER) + 1);
		plain_store(tally, plain_load(tally) + 1);
		done++;
		if (done % 4 == 0)
			usleep(100); /* hold for a while now and then, for the killer to find */
		else if (done % 2 == 0)
			sched_yield();
		__atomic_store_n(word(OFF_MARKER), 0, __ATOMIC_SEQ_CST);
		if ((rc = shmlock_lockmgr_release(m, "job", owner)) != 0)
			die("release", rc);
	}
	say("done rounds=%" PRIu64 " reclaims=%" PRIu64, done, mine);
	shmlock_lockmgr_close(m);
	shmlock_close(seg);
	return 0;
}

static int hold(const char *path, const char *res, const char *owner, int mode)
{
	shmlock_segment *seg;
	shmlock_lockmgr *m = open_all(path, &seg);
	const int64_t hour = 3600LL * 1000000000LL;
	shmlock_acquire_options o = {.retries = SHMLOCK_RETRY_FOREVER, .backoff_initial_ns = hour,
	                             .backoff_max_ns = hour};
	shmlock_lock_info info;
	say("waiting");
	int rc = shmlock_lockmgr_acquire(m, res, owner, mode, &o, &info);
	if (rc != 0)
		die("acquire", rc);
	say("held version=%" PRIu64 " reclaimed=%d inconsistent=%d", info.version, info.reclaimed, info.inconsistent);
	char line[64];
	if (fgets(line, sizeof line, stdin) == NULL)
		return 1;
	if ((rc = shmlock_lockmgr_release(m, res, owner)) != 0)
		die("release", rc);
	say("released");
	shmlock_lockmgr_close(m);
	shmlock_close(seg);
	return 0;
}

/* say_rc prints what a call returned: "LABELrc=N CODE". */
static void say_rc(const char *label, int rc)
{
	const char *code = shmlock_error_code(rc);
	say("%src=%d %s", label, rc, code ? code : "-");
}

/* say_grant prints what an acquisition returned, and what a grant says. */
static void say_grant(const char *label, int rc, const shmlock_lock_info *info)
{
	const char *code = shmlock_error_code(rc);
	if (rc != 0) {
		say("%src=%d %s", label, rc, code ? code : "-");
		return;
	}
	say("%src=0 - version=%" PRIu64 " reclaimed=%d inconsistent=%d", label, info->version, info->reclaimed,
	    info->inconsistent);
}

static int try(const char *path, const char *res, const char *owner, int mode)
{
	shmlock_segment *seg;
	shmlock_lockmgr *m = open_all(path, &seg);
	shmlock_lock_info info = {0};
	int rc = shmlock_lockmgr_acquire(m, res, owner, mode, NULL, &info);
	say_grant("", rc, &info);
	if (rc == SHMLOCK_ERESOURCE_LOCKED) {
		/* A wait ends by its deadline, whatever the table. */
		shmlock_acquire_options o = {.wait_ns = 200 * INT64_C(1000)};
		rc = shmlock_lockmgr_acquire(m, res, owner, mode, &o, &info);
		say_grant("waited ", rc, &info);
	}
	if (rc == 0) {
		say_rc("consistent ", shmlock_lockmgr_mark_consistent(m, res, owner));
		if ((rc = shmlock_lockmgr_release(m, res, owner)) != 0)
			die("release", rc);
		say_rc("check ", shmlock_lockmgr_check_version(m, res, info.version));
		say_rc("check ", shmlock_lockmgr_check_version(m, res, info.version + 1));
	}
	shmlock_lockmgr_close(m);
	shmlock_close(seg);
	return 0;
}

static int timeouts(const char *path, const char *res, const char *owner, long n, long ms)
{
	shmlock_segment *seg;
	shmlock_lockmgr *m = open_all(path, &seg);
	shmlock_acquire_options o = {.wait_ns = ms * 1000000LL};
	for (long i = 0; i < n; i++) {
		shmlock_lock_info info;
		int rc = shmlock_lockmgr_acquire(m, res, owner, SHMLOCK_EXCLUSIVE, &o, &info);
		if (rc != SHMLOCK_EWAIT_TIMEOUT) {
			fprintf(stderr, "acquisition %ld: %d (%s), want a timeout\n", i, rc, shmlock_strerror(rc));
			return 1;
		}
	}
	say("done");
	shmlock_lockmgr_close(m);
	shmlock_close(seg);
	return 0;
}

/* late marks consistent, refreshes, then releases, a hold this process
 * never took (an owner's, by name: late, after an expiry or a forced end,
 * say). */
static int late(const char *path, const char *res, const char *owner)
{
	shmlock_segment *seg;
	shmlock_lockmgr *m = open_all(path, &seg);
	say_rc("consistent ", shmlock_lockmgr_mark_consistent(m, res, owner));
	say_rc("refresh ", shmlock_lockmgr_refresh(m, res, owner, 60 * INT64_C(1000000000), NULL));
	say_rc("", shmlock_lockmgr_release(m, res, owner));
	shmlock_lockmgr_close(m);
	shmlock_close(seg);
	return 0;
}

int main(int argc, char **argv)
{
	helper_options(&argc, &argv);
	if (argc == 5 && strcmp(argv[1], "count") == 0)
		return count(argv[2], helper_atol(argv[3]), helper_atol(argv[4]));
	if (argc == 6 && strcmp(argv[1], "hold") == 0)
		return hold(argv[2], argv[3], argv[4], parse_mode(argv[5]));
	if (argc == 6 && strcmp(argv[1], "try") == 0)
		return try(argv[2], argv[3], argv[4], parse_mode(argv[5]));
	if (argc == 5 && strcmp(argv[1], "late") == 0)
		return late(argv[2], argv[3], argv[4]);
	if (argc == 7 && strcmp(argv[1], "timeouts") == 0)
		return timeouts(argv[2], argv[3], argv[4], helper_atol(argv[5]), helper_atol(argv[6]));
	fprintf(stderr, "usage: lockmgr count PATH RECORD ROUNDS | hold|try PATH RES OWNER MODE | late PATH RES OWNER | timeouts PATH RES OWNER N MS\n");
	return 2;
}
