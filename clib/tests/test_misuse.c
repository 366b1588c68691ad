/* test_misuse.c: every exported function of libshmlock driven with bad
 * input and misuse (NULL pointers, bad names, paths that are no segment,
 * garbage options, out-of-range modes, counts and timeouts, releases by
 * non-holders, use after the segment's close). Each call must fail with its
 * documented code and leave the state as it was; under ASan and UBSan (make
 * test) none may crash, leak, overflow or touch freed memory.
 *
 * Not covered, by the API's contract: a handle used after its own close, or
 * a segment closed twice with no handle left (both are freed memory: the
 * header says a handle is closed once). */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#include "internal.h"

static char path[256];
static shmlock_segment *seg;

static void setup(void)
{
	check_temp_path(path, sizeof path, "misuse");
	shmlock_options o = {.slots = 4, .upgrades = 4, .upgrade_readers = 4, .lockmgr_entries = 8};
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

static bool exists(const char *p)
{
	struct stat st;
	return lstat(p, &st) == 0;
}

/* A name of n bytes of c. */
static char *repeat(char *buf, char c, size_t n)
{
	memset(buf, c, n);
	buf[n] = 0;
	return buf;
}

/* The lock names every named lock and region must refuse. */
static const char *bad_names[] = {
	"",
	"01234567890123456789012345678901234567890", /* 41 bytes */
	"\xff",                                         /* not UTF-8 */
	"a\x01",                                        /* a control character */
	"\xc0\xaf",                                     /* an overlong '/' */
	"\xed\xa0\x80",                                 /* a surrogate */
	"\xc2\x85",                                     /* U+0085, a C1 control */
	"a\x7f",
	"\xe2\x82",                                     /* cut short */
};
#define NBAD (sizeof bad_names / sizeof bad_names[0])

/* ------------------------------------------------------------------ errors */

static void test_error_functions(void)
{
	int codes[] = {INT_MIN, -1000, -74, -50, -5, -1, 0, 1, 2, 3, 1000, INT_MAX};
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		CHECK(shmlock_strerror(codes[i]) != NULL);
		if (codes[i] >= 0 || codes[i] < -73)
			CHECK(shmlock_error_code(codes[i]) == NULL);
	}
	CHECK(shmlock_error_code(SHMLOCK_EINVAL) == NULL);
	CHECK(shmlock_error_code(SHMLOCK_ERESOURCE_LOCKED) != NULL);
	/* Shared with the other handles, as READ_ONLY is: lockmgr.ErrClosed's code. */
	CHECK(shmlock_error_code(SHMLOCK_ECLOSED) != NULL && strcmp(shmlock_error_code(SHMLOCK_ECLOSED), "CLOSED") == 0);
	CHECK(shmlock_version() != NULL);
	CHECK(shmlock_identity_alive(0) == 0);
	CHECK(shmlock_identity_alive(UINT64_MAX) == 0);
	CHECK(shmlock_identity_alive(SHM_STALE_BIT | shmlock_self_identity()) == 0);
	CHECK(shmlock_identity_alive(shmlock_self_identity()) == 1);
	CHECK(shmlock_holder_new() != 0);
	CHECK(shmlock_holder_thread() != 0 && shmlock_holder_thread() == shmlock_holder_thread());
	CHECK((uint32_t)shmlock_token_new() != 0);
}

/* ------------------------------------------------------------------ paths */

typedef int (*open_fn)(const char *, const shmlock_options *, shmlock_segment **);
static const open_fn openers[] = {shmlock_open, shmlock_create, shmlock_open_or_create};

/* Each opener on p fails with want (create with want_create), sets no
 * handle, and leaves p as it was. */
static void check_open_fails(const char *p, int want, int want_create)
{
	struct stat before, after;
	bool had = p && lstat(p, &before) == 0;
	for (size_t i = 0; i < 3; i++) {
		shmlock_segment *s = NULL;
		int rc = openers[i](p, NULL, &s);
		if (rc != (openers[i] == shmlock_create ? want_create : want))
			fprintf(stderr, "  opener %zu on %s\n", i, p ? p : "NULL");
		CHECK_RC(rc, openers[i] == shmlock_create ? want_create : want);
		CHECK(s == NULL);
		if (s)
			shmlock_close(s);
	}
	if (had) {
		CHECK(lstat(p, &after) == 0);
		CHECK(after.st_ino == before.st_ino && after.st_size == before.st_size && after.st_mode == before.st_mode);
	}
}

static void write_file(const char *p, const void *b, size_t n)
{
	int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CHECK(fd >= 0);
	if (n)
		CHECK(write(fd, b, n) == (ssize_t)n);
	close(fd);
}

static void test_bad_paths(void)
{
	char dir[256], p[300];
	check_temp_path(dir, sizeof dir, "dir");
	CHECK(mkdir(dir, 0700) == 0);
	/* NULL out: nothing created. */
	snprintf(p, sizeof p, "%s/seg", dir);
	for (size_t i = 0; i < 3; i++)
		CHECK_RC(openers[i](p, NULL, NULL), SHMLOCK_EINVAL);
	CHECK(!exists(p));
	const char *bad[] = {NULL, "", ".", "..", "x/", "/dev/shm/"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		check_open_fails(bad[i], SHMLOCK_EBADPATH, SHMLOCK_EBADPATH);
		CHECK_RC(shmlock_remove(bad[i]), SHMLOCK_EBADPATH);
	}
	/* A directory. */
	check_open_fails(dir, SHMLOCK_ENOTREGULAR, SHMLOCK_EEXIST);
	CHECK_RC(shmlock_remove(dir), SHMLOCK_ENOTREGULAR);
	CHECK(exists(dir));
	/* A symlink to a good segment. */
	snprintf(p, sizeof p, "%s/link", dir);
	CHECK(symlink(path, p) == 0);
	check_open_fails(p, SHMLOCK_ESYMLINK, SHMLOCK_EEXIST);
	CHECK_RC(shmlock_remove(p), SHMLOCK_ESYMLINK);
	CHECK(exists(p) && exists(path));
	unlink(p);
	/* A dangling symlink: create must not create its target. */
	char target[300];
	snprintf(target, sizeof target, "%s/target", dir);
	CHECK(symlink(target, p) == 0);
	check_open_fails(p, SHMLOCK_ESYMLINK, SHMLOCK_EEXIST);
	CHECK(!exists(target));
	unlink(p);
	/* A FIFO: never opened for real (an open would block). */
	snprintf(p, sizeof p, "%s/fifo", dir);
	CHECK(mkfifo(p, 0600) == 0);
	check_open_fails(p, SHMLOCK_ENOTREGULAR, SHMLOCK_EEXIST);
	CHECK_RC(shmlock_remove(p), SHMLOCK_ENOTREGULAR);
	unlink(p);
	/* Empty, short and foreign files. */
	snprintf(p, sizeof p, "%s/empty", dir);
	write_file(p, NULL, 0);
	check_open_fails(p, SHMLOCK_ETRUNCATED, SHMLOCK_EEXIST);
	CHECK_RC(shmlock_remove(p), SHMLOCK_ETRUNCATED);
	unlink(p);
	snprintf(p, sizeof p, "%s/short", dir);
	write_file(p, SHM_MAGIC, 8);
	check_open_fails(p, SHMLOCK_ETRUNCATED, SHMLOCK_EEXIST);
	unlink(p);
	snprintf(p, sizeof p, "%s/foreign", dir);
	char junk[4096];
	memset(junk, 'j', sizeof junk);
	write_file(p, junk, sizeof junk);
	check_open_fails(p, SHMLOCK_EBADMAGIC, SHMLOCK_EEXIST);
	CHECK_RC(shmlock_remove(p), SHMLOCK_EBADMAGIC);
	unlink(p);
	/* A segment's header in a file of the wrong size (longer, then cut
	 * short): nothing maps past the file's end. */
	snprintf(p, sizeof p, "%s/resized", dir);
	{
		shmlock_segment *s = NULL;
		CHECK_RC(shmlock_create(p, NULL, &s), 0);
		size_t size = s ? s->size : 0;
		CHECK_RC(shmlock_close(s), 0);
		CHECK(truncate(p, (off_t)size + 4096) == 0);
		check_open_fails(p, SHMLOCK_ESIZE, SHMLOCK_EEXIST);
		CHECK(truncate(p, 4096) == 0);
		check_open_fails(p, SHMLOCK_ESIZE, SHMLOCK_EEXIST);
		CHECK(truncate(p, 100) == 0);
		check_open_fails(p, SHMLOCK_ETRUNCATED, SHMLOCK_EEXIST);
		CHECK_RC(shmlock_remove(p), 0); /* the magic is there: it is a segment's file */
	}
	/* A path longer than the kernel takes, and a name longer than a file
	 * system's names. */
	char *lng = malloc(PATH_MAX + 16);
	snprintf(lng, PATH_MAX + 16, "%s/", dir);
	size_t n = strlen(lng);
	memset(lng + n, 'a', PATH_MAX + 15 - n);
	lng[PATH_MAX + 15] = 0;
	check_open_fails(lng, SHMLOCK_ESYS, SHMLOCK_ESYS);
	CHECK(shmlock_errno() == ENAMETOOLONG);
	lng[n + NAME_MAX + 1] = 0;
	check_open_fails(lng, SHMLOCK_ESYS, SHMLOCK_ESYS);
	CHECK(shmlock_errno() == ENAMETOOLONG);
	CHECK_RC(shmlock_remove(lng), SHMLOCK_ESYS);
	free(lng);
	/* Bytes no name of Go's would hold are still a file name. */
	snprintf(p, sizeof p, "%s/\xff\x01 name", dir);
	{
		shmlock_segment *s = NULL;
		CHECK_RC(shmlock_open(p, NULL, &s), SHMLOCK_ESYS);
		CHECK(shmlock_errno() == ENOENT);
		CHECK_RC(shmlock_create(p, NULL, &s), 0);
		CHECK_RC(shmlock_close(s), 0);
		CHECK_RC(shmlock_remove(p), 0);
	}
	/* A directory that is not there. */
	snprintf(p, sizeof p, "%s/none/seg", dir);
	check_open_fails(p, SHMLOCK_ESYS, SHMLOCK_ESYS);
	CHECK(rmdir(dir) == 0);
}

/* ------------------------------------------------------------- options */

/* What each way to a new handle or region says on a segment that gives
 * none (no table, closed, read-only). */
struct refusals {
	int spin_open, spin_named, upgrade_open, upgrade_named, lockmgr_open, data_claim, data_find;
};

/* check_refused opens nothing through s but, where w says 0, the lock
 * manager (closed again). */
static void check_refused(shmlock_segment *s, struct refusals w)
{
	shmlock_spin *l = NULL;
	shmlock_upgrade *u = NULL;
	shmlock_lockmgr *m = NULL;
	void *d = NULL;
	CHECK_RC(shmlock_spin_open(s, 0, SHMLOCK_PIDTID, &l), w.spin_open);
	CHECK_RC(shmlock_spin_named(s, "refused", SHMLOCK_PIDTID, &l), w.spin_named);
	CHECK_RC(shmlock_upgrade_open(s, 0, &u), w.upgrade_open);
	CHECK_RC(shmlock_upgrade_named(s, "refused", &u), w.upgrade_named);
	CHECK_RC(shmlock_lockmgr_open(s, &m), w.lockmgr_open);
	CHECK_RC(shmlock_data(s, "refused", 64, &d), w.data_claim);
	CHECK_RC(shmlock_data(s, "refused", 0, &d), w.data_find);
	CHECK(l == NULL && u == NULL && d == NULL && (m == NULL) == (w.lockmgr_open != 0));
	if (m)
		CHECK_RC(shmlock_lockmgr_close(m), 0);
}

/* create with o fails with want and leaves no file. */
static void check_create_fails(const shmlock_options *o, int want, const char *what)
{
	char p[256];
	check_temp_path(p, sizeof p, "opts");
	shmlock_segment *s = NULL;
	int rc = shmlock_create(p, o, &s);
	if (rc != want)
		fprintf(stderr, "  options: %s\n", what);
	CHECK_RC(rc, want);
	CHECK(s == NULL);
	CHECK(!exists(p));
	if (s) {
		shmlock_close(s);
		shmlock_remove(p);
	}
}

static void test_create_options(void)
{
	shmlock_options o;
	/* Each count alone out of range: too many, INT64_MAX, INT64_MIN (which
	 * leaves the table out). */
	size_t fields[] = {offsetof(shmlock_options, slots), offsetof(shmlock_options, upgrades),
	                   offsetof(shmlock_options, upgrade_readers), offsetof(shmlock_options, txn_records),
	                   offsetof(shmlock_options, txn_arena_bytes), offsetof(shmlock_options, lockmgr_entries),
	                   offsetof(shmlock_options, claim_refs), offsetof(shmlock_options, data_bytes),
	                   offsetof(shmlock_options, data_regions)};
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		int64_t vals[] = {INT64_MAX, INT64_MAX / 2, (int64_t)1 << 41, (int64_t)1 << 62};
		for (size_t j = 0; j < sizeof vals / sizeof vals[0]; j++) {
			memset(&o, 0, sizeof o);
			*(int64_t *)(void *)((char *)&o + fields[i]) = vals[j];
			check_create_fails(&o, SHMLOCK_ELIMIT, "huge count");
		}
	}
	/* Products and sums that would overflow. */
	o = (shmlock_options){.upgrades = 1 << 20, .upgrade_readers = 4096};
	check_create_fails(&o, SHMLOCK_ELIMIT, "readers x upgrades");
	o = (shmlock_options){.upgrades = (int64_t)1 << 40, .upgrade_readers = (int64_t)1 << 40};
	check_create_fails(&o, SHMLOCK_ELIMIT, "readers x upgrades, both huge");
	o = (shmlock_options){.upgrade_readers = 4097};
	check_create_fails(&o, SHMLOCK_ELIMIT, "readers");
	o = (shmlock_options){.slots = INT64_MAX, .upgrades = INT64_MAX};
	check_create_fails(&o, SHMLOCK_ELIMIT, "claim refs of huge counts");
	o = (shmlock_options){.slots = 1 << 20, .upgrades = 1 << 20, .lockmgr_entries = 1 << 20, .txn_records = 1 << 20,
	                      .txn_arena_bytes = (int64_t)1 << 36, .data_bytes = (int64_t)1 << 36};
	check_create_fails(&o, SHMLOCK_ELIMIT, "every table at its limit: past the total");
	/* Unknown flags: a flag of a later version must not be dropped. */
	o = (shmlock_options){.flags = 1u << 20};
	check_create_fails(&o, SHMLOCK_EINVAL, "unknown flag");
	o = (shmlock_options){.flags = ~0u};
	check_create_fails(&o, SHMLOCK_EINVAL, "every flag");
	{
		shmlock_segment *s = NULL;
		CHECK_RC(shmlock_open(path, &o, &s), SHMLOCK_EINVAL);
		CHECK_RC(shmlock_open_or_create(path, &o, &s), SHMLOCK_EINVAL);
		CHECK(s == NULL);
	}
	/* Negative counts leave tables out; every one out still makes a
	 * segment, on which every kind of handle says its table is absent. */
	o = (shmlock_options){.slots = INT64_MIN, .upgrades = -1, .upgrade_readers = INT64_MIN, .txn_records = -1,
	                      .txn_arena_bytes = INT64_MIN, .lockmgr_entries = INT64_MIN, .claim_refs = INT64_MIN,
	                      .data_bytes = INT64_MIN, .data_regions = INT64_MIN, .ready_timeout_ns = INT64_MIN};
	char p[256];
	check_temp_path(p, sizeof p, "empty");
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(p, &o, &s), 0);
	if (s) {
		check_refused(s, (struct refusals){SHMLOCK_EINDEX, SHMLOCK_ETABLEFULL, SHMLOCK_EINDEX, SHMLOCK_ETABLEFULL,
		                                   SHMLOCK_ENOTABLE, SHMLOCK_EDATAFULL, SHMLOCK_ENOTFOUND});
		CHECK_RC(shmlock_close(s), 0);
		/* Opened with a timeout at either end of the range. */
		o = (shmlock_options){.ready_timeout_ns = INT64_MAX};
		CHECK_RC(shmlock_open(p, &o, &s), 0);
		CHECK_RC(shmlock_close(s), 0);
		o.ready_timeout_ns = INT64_MIN;
		CHECK_RC(shmlock_open(p, &o, &s), 0);
		CHECK_RC(shmlock_close(s), 0);
		CHECK_RC(shmlock_remove(p), 0);
	}
	/* An upgrade table without reader records: shared holds are refused. */
	o = (shmlock_options){.upgrades = 2, .upgrade_readers = -1};
	CHECK_RC(shmlock_create(p, &o, &s), 0);
	if (s) {
		shmlock_upgrade *u = NULL;
		CHECK_RC(shmlock_upgrade_open(s, 1, &u), 0);
		CHECK_RC(shmlock_upgrade_lock_shared(u), SHMLOCK_ETOOMANYREADERS);
		CHECK_RC(shmlock_upgrade_trylock_shared(u), SHMLOCK_ETOOMANYREADERS);
		CHECK_RC(shmlock_upgrade_lock(u), 0);
		CHECK_RC(shmlock_upgrade_unique_to_shared(u), SHMLOCK_ETOOMANYREADERS);
		CHECK_RC(shmlock_upgrade_unlock(u), 0); /* still the unique holder */
		CHECK_RC(shmlock_upgrade_close(u), 0);
		CHECK_RC(shmlock_close(s), 0);
		CHECK_RC(shmlock_remove(p), 0);
	}
	/* A lock manager table of one entry: its head alone, no resource. */
	o = (shmlock_options){.lockmgr_entries = 1};
	CHECK_RC(shmlock_create(p, &o, &s), 0);
	if (s) {
		shmlock_lockmgr *m = NULL;
		CHECK_RC(shmlock_lockmgr_open(s, &m), 0);
		CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ELOCK_TABLE_FULL);
		CHECK_RC(shmlock_lockmgr_release(m, "r", "o"), 0);
		CHECK_RC(shmlock_lockmgr_refresh(m, "r", "o", 1, NULL), SHMLOCK_ELOCK_NOT_HELD);
		CHECK_RC(shmlock_lockmgr_mark_consistent(m, "r", "o"), SHMLOCK_ELOCK_NOT_HELD);
		CHECK_RC(shmlock_lockmgr_check_version(m, "r", 0), SHMLOCK_EVERSION_CONFLICT);
		CHECK_RC(shmlock_lockmgr_close(m), 0);
		CHECK_RC(shmlock_close(s), 0);
		CHECK_RC(shmlock_remove(p), 0);
	}
}

/* ---------------------------------------------------------- data regions */

static void test_data(void)
{
	void *d = (void *)1;
	CHECK_RC(shmlock_data(NULL, "r", 8, &d), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_data(seg, NULL, 8, &d), SHMLOCK_EBADNAME);
	CHECK_RC(shmlock_data(seg, "r", 8, NULL), SHMLOCK_EINVAL);
	for (size_t i = 0; i < NBAD; i++)
		CHECK_RC(shmlock_data(seg, bad_names[i], 8, &d), SHMLOCK_EBADNAME);
	CHECK(d == (void *)1);
	CHECK_RC(shmlock_data(seg, "r", 0, &d), SHMLOCK_ENOTFOUND);
	CHECK_RC(shmlock_data(seg, "r", SIZE_MAX, &d), SHMLOCK_EDATAFULL);
	CHECK_RC(shmlock_data(seg, "r", (size_t)1 << 40, &d), SHMLOCK_EDATAFULL);
	CHECK_RC(shmlock_data(seg, "r", 0, &d), SHMLOCK_ENOTFOUND); /* nothing claimed */
	CHECK(d == (void *)1);
	char name[41];
	CHECK_RC(shmlock_data(seg, repeat(name, 'r', 40), 8, &d), 0);
	void *again = NULL;
	CHECK_RC(shmlock_data(seg, name, 9, &again), SHMLOCK_EREGIONSIZE);
	CHECK_RC(shmlock_data(seg, name, SIZE_MAX, &again), SHMLOCK_EREGIONSIZE);
	CHECK(again == NULL);
	CHECK_RC(shmlock_data(seg, name, 0, &again), 0);
	CHECK(again == d);
}

/* -------------------------------------------------------------- spinlocks */

static struct shm_owner_slot *slot_of(shmlock_spin *l)
{
	return (struct shm_owner_slot *)seg->tables[SHM_OWNER_SLOTS].base + shmlock_spin_index(l);
}

static void test_spin_handles(void)
{
	shmlock_spin *l = NULL;
	int modes[] = {-1, 2, 3, INT_MIN, INT_MAX};
	CHECK_RC(shmlock_spin_open(NULL, 0, SHMLOCK_PIDTID, &l), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_open(seg, 0, SHMLOCK_PIDTID, NULL), SHMLOCK_EINVAL);
	for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
		CHECK_RC(shmlock_spin_open(seg, 0, modes[i], &l), SHMLOCK_EINVAL);
		CHECK_RC(shmlock_spin_named(seg, "m", modes[i], &l), SHMLOCK_EINVAL);
	}
	size_t idx[] = {4, 5, (size_t)INT32_MAX + 1, SIZE_MAX};
	for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++)
		CHECK_RC(shmlock_spin_open(seg, idx[i], SHMLOCK_PIDTID, &l), SHMLOCK_EINDEX);
	CHECK_RC(shmlock_spin_named(NULL, "m", SHMLOCK_PIDTID, &l), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_named(seg, NULL, SHMLOCK_PIDTID, &l), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_named(seg, "m", SHMLOCK_PIDTID, NULL), SHMLOCK_EINVAL);
	for (size_t i = 0; i < NBAD; i++)
		CHECK_RC(shmlock_spin_named(seg, bad_names[i], SHMLOCK_PIDTID, &l), SHMLOCK_EBADNAME);
	CHECK(l == NULL);
	/* The other mode's name. */
	CHECK_RC(shmlock_spin_named(seg, "m", SHMLOCK_TOKEN, &l), 0);
	shmlock_spin *other = NULL;
	CHECK_RC(shmlock_spin_named(seg, "m", SHMLOCK_PIDTID, &other), SHMLOCK_EUSEMISMATCH);
	CHECK(other == NULL);
	CHECK_RC(shmlock_spin_close(l), 0);
	/* The directory is full: a fifth name. */
	shmlock_spin *h[4];
	char name[16];
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof name, "full%d", i);
		CHECK_RC(shmlock_spin_named(seg, name, SHMLOCK_PIDTID, &h[i]), 0);
	}
	CHECK_RC(shmlock_spin_named(seg, "full4", SHMLOCK_PIDTID, &l), SHMLOCK_ETABLEFULL);
	for (int i = 0; i < 4; i++)
		CHECK_RC(shmlock_spin_close(h[i]), 0);
	/* NULL handles. */
	CHECK_RC(shmlock_spin_close(NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_index(NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_lock(NULL, 1), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_trylock(NULL, 1), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_timedlock(NULL, 1, 1), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_unlock(NULL, 1), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_mark_consistent(NULL, 1), SHMLOCK_EINVAL);
	CHECK(shmlock_spin_inconsistent(NULL) == 0);
	CHECK(shmlock_spin_generation(NULL) == 0);
}

struct releaser {
	shmlock_spin *l;
	uint64_t holder;
};

static void *release_later(void *arg)
{
	struct releaser *r = arg;
	struct timespec ts = {0, 20 * 1000 * 1000};
	nanosleep(&ts, NULL); /* only so that the waiter likely sleeps first: nothing depends on it */
	CHECK_RC(shmlock_spin_unlock(r->l, r->holder), 0);
	return NULL;
}

/* A timed lock of l by h2 while h1 holds, with a timeout that must wait
 * until h1's release (another thread's). */
static void check_waits_for_release(shmlock_spin *l, uint64_t h1, uint64_t h2, int64_t timeout)
{
	CHECK_RC(shmlock_spin_lock(l, h1), 0);
	struct releaser r = {l, h1};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, release_later, &r) == 0);
	CHECK_RC(shmlock_spin_timedlock(l, h2, timeout), 0);
	pthread_join(t, NULL);
	CHECK_RC(shmlock_spin_unlock(l, h2), 0);
}

static void test_spin_pidtid(void)
{
	shmlock_spin *l = NULL;
	CHECK_RC(shmlock_spin_open(seg, 0, SHMLOCK_PIDTID, &l), 0);
	struct shm_owner_slot *s = slot_of(l);
	uint64_t h = shmlock_holder_new(), other = h + 1;
	uint64_t gen = shmlock_spin_generation(l);
	/* Holder 0 fits no lock. */
	CHECK_RC(shmlock_spin_lock(l, 0), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_trylock(l, 0), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_timedlock(l, 0, 1), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_unlock(l, 0), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_mark_consistent(l, 0), SHMLOCK_EBADIDENTITY);
	/* Releases of a free lock. */
	CHECK_RC(shmlock_spin_unlock(l, h), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_mark_consistent(l, h), SHMLOCK_ENOTOWNER);
	CHECK(atomic_load(&s->pid) == 0 && shmlock_spin_generation(l) == gen);
	/* Timeouts on a free lock: every one grants at once. */
	int64_t timeouts[] = {INT64_MIN, -2, -1, 0, 1, INT64_MAX - 1, INT64_MAX};
	for (size_t i = 0; i < sizeof timeouts / sizeof timeouts[0]; i++) {
		CHECK_RC(shmlock_spin_timedlock(l, h, timeouts[i]), 0);
		CHECK_RC(shmlock_spin_unlock(l, h), 0);
	}
	gen = shmlock_spin_generation(l);
	CHECK_RC(shmlock_spin_lock(l, h), 0);
	/* Held: another holder's release and mark change nothing; its tries
	 * fail; a short timeout runs out. */
	CHECK_RC(shmlock_spin_unlock(l, other), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_mark_consistent(l, other), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_trylock(l, other), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_spin_timedlock(l, other, 0), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_spin_timedlock(l, other, 1), SHMLOCK_ETIMEDOUT);
	CHECK(atomic_load(&s->pid) == shmlock_self_identity() && atomic_load(&s->tid) == h);
	CHECK(atomic_load(&s->recursion) == 0 && shmlock_spin_generation(l) == gen);
	/* Recursion to its limit: one more is refused and changes nothing. */
	atomic_store(&s->recursion, SHM_SLOT_RECURSION_MASK - 1);
	CHECK_RC(shmlock_spin_lock(l, h), 0);
	CHECK(atomic_load(&s->recursion) == SHM_SLOT_RECURSION_MASK);
	CHECK_RC(shmlock_spin_lock(l, h), SHMLOCK_ERECURSION);
	CHECK_RC(shmlock_spin_trylock(l, h), SHMLOCK_ERECURSION);
	CHECK_RC(shmlock_spin_timedlock(l, h, INT64_MAX), SHMLOCK_ERECURSION);
	CHECK(atomic_load(&s->recursion) == SHM_SLOT_RECURSION_MASK);
	/* The same at the limit with the inconsistent bit set: it is kept. */
	atomic_store(&s->recursion, SHM_SLOT_RECURSION_MASK | SHM_SLOT_INCONSISTENT);
	CHECK_RC(shmlock_spin_lock(l, h), SHMLOCK_ERECURSION);
	CHECK(atomic_load(&s->recursion) == (SHM_SLOT_RECURSION_MASK | SHM_SLOT_INCONSISTENT));
	CHECK_RC(shmlock_spin_mark_consistent(l, h), 0);
	atomic_store(&s->recursion, 1);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK(atomic_load(&s->pid) == shmlock_self_identity() && atomic_load(&s->recursion) == 0);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK_RC(shmlock_spin_unlock(l, h), SHMLOCK_ENOTOWNER);
	CHECK(atomic_load(&s->pid) == 0 && shmlock_spin_generation(l) == gen + 1);
	/* Timeouts that wait for ever (negative, or a deadline past the
	 * clock's range) get the lock once it is released. */
	check_waits_for_release(l, h, other, INT64_MAX);
	check_waits_for_release(l, h, other, INT64_MIN);
	check_waits_for_release(l, h, other, -1);
	CHECK_RC(shmlock_spin_close(l), 0);
}

static void test_spin_token(void)
{
	shmlock_spin *l = NULL;
	CHECK_RC(shmlock_spin_open(seg, 1, SHMLOCK_TOKEN, &l), 0);
	struct shm_owner_slot *s = slot_of(l);
	uint64_t t = shmlock_token_new(), u = shmlock_token_new() | 1;
	if (u == t)
		u ^= 2;
	/* A token whose low half is 0 cannot be slept on. */
	CHECK_RC(shmlock_spin_lock(l, UINT64_C(1) << 32), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_unlock(l, UINT64_C(1) << 32), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_lock(l, 0), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_unlock(l, t), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_lock(l, t), 0);
	CHECK_RC(shmlock_spin_trylock(l, t), SHMLOCK_EWOULDBLOCK); /* not recursive */
	CHECK_RC(shmlock_spin_timedlock(l, u, 1), SHMLOCK_ETIMEDOUT);
	CHECK_RC(shmlock_spin_unlock(l, u), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_mark_consistent(l, u), SHMLOCK_ENOTOWNER);
	CHECK(atomic_load(&s->token) == t);
	CHECK(shmlock_spin_generation(l) == 0);
	CHECK_RC(shmlock_spin_unlock(l, t), 0);
	check_waits_for_release(l, t, u, INT64_MAX);
	CHECK_RC(shmlock_spin_close(l), 0);
}

/* ---------------------------------------------------------- upgrade mutex */

typedef int (*upg_fn)(shmlock_upgrade *);
typedef int (*upg_timed_fn)(shmlock_upgrade *, int64_t);

static void test_upgrade_null(void)
{
	upg_fn fns[] = {
		shmlock_upgrade_close,          shmlock_upgrade_lock,           shmlock_upgrade_trylock,
		shmlock_upgrade_unlock,         shmlock_upgrade_lock_shared,    shmlock_upgrade_trylock_shared,
		shmlock_upgrade_unlock_shared,  shmlock_upgrade_lock_upgrade,   shmlock_upgrade_trylock_upgrade,
		shmlock_upgrade_unlock_upgrade, shmlock_upgrade_upgrade_to_unique, shmlock_upgrade_try_upgrade_to_unique,
		shmlock_upgrade_unique_to_shared, shmlock_upgrade_unique_to_upgrade, shmlock_upgrade_mark_consistent,
	};
	for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
		CHECK_RC(fns[i](NULL), SHMLOCK_EINVAL);
	upg_timed_fn timed[] = {shmlock_upgrade_timedlock, shmlock_upgrade_timedlock_shared,
	                        shmlock_upgrade_timedlock_upgrade, shmlock_upgrade_timed_upgrade_to_unique};
	int64_t timeouts[] = {INT64_MIN, -1, 0, 1, INT64_MAX};
	for (size_t i = 0; i < sizeof timed / sizeof timed[0]; i++)
		for (size_t j = 0; j < sizeof timeouts / sizeof timeouts[0]; j++)
			CHECK_RC(timed[i](NULL, timeouts[j]), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_index(NULL), SHMLOCK_EINVAL);
	CHECK(shmlock_upgrade_inconsistent(NULL) == 0);
	CHECK(shmlock_upgrade_generation(NULL) == 0);
	shmlock_upgrade *m = NULL;
	CHECK_RC(shmlock_upgrade_open(NULL, 0, &m), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_open(seg, 0, NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_open(seg, 4, &m), SHMLOCK_EINDEX);
	CHECK_RC(shmlock_upgrade_open(seg, SIZE_MAX, &m), SHMLOCK_EINDEX);
	CHECK_RC(shmlock_upgrade_named(NULL, "u", &m), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_named(seg, NULL, &m), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_upgrade_named(seg, "u", NULL), SHMLOCK_EINVAL);
	for (size_t i = 0; i < NBAD; i++)
		CHECK_RC(shmlock_upgrade_named(seg, bad_names[i], &m), SHMLOCK_EBADNAME);
	CHECK(m == NULL);
}

/* The state words of an upgrade mutex, to check that a refused call
 * changed none. */
struct upg_state {
	uint32_t state;
	uint64_t writer, upgrader, generation;
	uint32_t readers[4];
};

static struct upg_state upg_state(shmlock_upgrade *m)
{
	int i = shmlock_upgrade_index(m);
	struct shm_upgrade_entry *e = (struct shm_upgrade_entry *)seg->tables[SHM_UPGRADES].base + i;
	struct shm_reader_record *r = (struct shm_reader_record *)seg->tables[SHM_UPGRADE_READERS].base + 4 * i;
	struct upg_state s = {atomic_load(&e->state), atomic_load(&e->writer), atomic_load(&e->upgrader),
	                      atomic_load(&e->generation), {0}};
	for (int j = 0; j < 4; j++)
		s.readers[j] = atomic_load(&r[j].count);
	return s;
}

static bool same_state(struct upg_state a, struct upg_state b)
{
	return a.state == b.state && a.writer == b.writer && a.upgrader == b.upgrader && a.generation == b.generation &&
	       !memcmp(a.readers, b.readers, sizeof a.readers);
}

#define CHECK_UNCHANGED(m, call, want)                  \
	do {                                            \
		struct upg_state before_ = upg_state(m); \
		CHECK_RC(call, want);                   \
		CHECK(same_state(before_, upg_state(m))); \
	} while (0)

static void test_upgrade_misuse(void)
{
	shmlock_upgrade *a = NULL, *b = NULL;
	CHECK_RC(shmlock_upgrade_open(seg, 1, &a), 0);
	CHECK_RC(shmlock_upgrade_open(seg, 1, &b), 0);
	/* Releases and conversions of nothing held. */
	CHECK_UNCHANGED(a, shmlock_upgrade_unlock(a), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_unlock_shared(a), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_unlock_upgrade(a), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_upgrade_to_unique(a), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_try_upgrade_to_unique(a), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_timed_upgrade_to_unique(a, INT64_MAX), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_unique_to_shared(a), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_unique_to_upgrade(a), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_mark_consistent(a), SHMLOCK_ENOTHELD);
	/* Every timeout on a free mutex grants at once. */
	int64_t timeouts[] = {INT64_MIN, -1, 0, 1, INT64_MAX};
	for (size_t i = 0; i < sizeof timeouts / sizeof timeouts[0]; i++) {
		CHECK_RC(shmlock_upgrade_timedlock(a, timeouts[i]), 0);
		CHECK_RC(shmlock_upgrade_unlock(a), 0);
		CHECK_RC(shmlock_upgrade_timedlock_shared(a, timeouts[i]), 0);
		CHECK_RC(shmlock_upgrade_unlock_shared(a), 0);
		CHECK_RC(shmlock_upgrade_timedlock_upgrade(a, timeouts[i]), 0);
		CHECK_RC(shmlock_upgrade_timed_upgrade_to_unique(a, timeouts[i]), 0);
		CHECK_RC(shmlock_upgrade_unique_to_upgrade(a), 0);
		CHECK_RC(shmlock_upgrade_unlock_upgrade(a), 0);
	}
	/* a holds it unique: b's calls are refused and change nothing. */
	CHECK_RC(shmlock_upgrade_lock(a), 0);
	CHECK_UNCHANGED(a, shmlock_upgrade_unlock(b), SHMLOCK_ENOTOWNER);
	CHECK_UNCHANGED(a, shmlock_upgrade_unique_to_shared(b), SHMLOCK_ENOTOWNER);
	CHECK_UNCHANGED(a, shmlock_upgrade_unique_to_upgrade(b), SHMLOCK_ENOTOWNER);
	CHECK_UNCHANGED(a, shmlock_upgrade_unlock_shared(b), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_unlock_upgrade(b), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_mark_consistent(b), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_trylock(b), SHMLOCK_EWOULDBLOCK);
	CHECK_UNCHANGED(a, shmlock_upgrade_trylock_shared(b), SHMLOCK_EWOULDBLOCK);
	CHECK_UNCHANGED(a, shmlock_upgrade_trylock_upgrade(b), SHMLOCK_EWOULDBLOCK);
	CHECK_UNCHANGED(a, shmlock_upgrade_timedlock(b, 0), SHMLOCK_EWOULDBLOCK);
	CHECK_UNCHANGED(a, shmlock_upgrade_timedlock_upgrade(b, 0), SHMLOCK_EWOULDBLOCK);
	CHECK_UNCHANGED(a, shmlock_upgrade_timedlock(b, 1), SHMLOCK_ETIMEDOUT);
	CHECK_UNCHANGED(a, shmlock_upgrade_timedlock_shared(b, 1), SHMLOCK_ETIMEDOUT);
	CHECK_UNCHANGED(a, shmlock_upgrade_timedlock_upgrade(b, 1), SHMLOCK_ETIMEDOUT);
	/* and a's own conflicting requests. */
	CHECK_UNCHANGED(a, shmlock_upgrade_lock(a), SHMLOCK_EHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_timedlock(a, INT64_MAX), SHMLOCK_EHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_lock_shared(a), SHMLOCK_EHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_timedlock_shared(a, INT64_MIN), SHMLOCK_EHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_lock_upgrade(a), SHMLOCK_EHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_timedlock_upgrade(a, INT64_MAX), SHMLOCK_EHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_unlock_shared(a), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_unlock_upgrade(a), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_upgrade_to_unique(a), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_close(a), SHMLOCK_EHELD);
	CHECK_RC(shmlock_upgrade_unlock(a), 0);
	CHECK_RC(shmlock_upgrade_unlock(a), SHMLOCK_ENOTHELD);
	/* a holds the upgrade lock. */
	CHECK_RC(shmlock_upgrade_lock_upgrade(a), 0);
	CHECK_UNCHANGED(a, shmlock_upgrade_unlock_upgrade(b), SHMLOCK_ENOTOWNER);
	CHECK_UNCHANGED(a, shmlock_upgrade_upgrade_to_unique(b), SHMLOCK_ENOTOWNER);
	CHECK_UNCHANGED(a, shmlock_upgrade_lock_upgrade(a), SHMLOCK_EHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_lock(a), SHMLOCK_EHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_unlock(a), SHMLOCK_ENOTHELD);
	CHECK_UNCHANGED(a, shmlock_upgrade_close(a), SHMLOCK_EHELD);
	CHECK_RC(shmlock_upgrade_unlock_upgrade(a), 0);
	/* Shared holds nest up to the count's limit; one more is refused and
	 * leaves the count. */
	CHECK_RC(shmlock_upgrade_lock_shared(a), 0);
	CHECK_UNCHANGED(a, shmlock_upgrade_close(a), SHMLOCK_EHELD);
	struct shm_reader_record *r = NULL;
	struct shm_reader_record *rs = (struct shm_reader_record *)seg->tables[SHM_UPGRADE_READERS].base + 4;
	for (int j = 0; j < 4; j++)
		if (atomic_load(&rs[j].count) == 1)
			r = &rs[j];
	CHECK(r != NULL);
	if (r) {
		atomic_store(&r->count, (UINT32_C(1) << 29) - 1);
		CHECK_UNCHANGED(a, shmlock_upgrade_lock_shared(a), SHMLOCK_EOVERFLOW);
		CHECK_UNCHANGED(a, shmlock_upgrade_trylock_shared(a), SHMLOCK_EOVERFLOW);
		CHECK_UNCHANGED(a, shmlock_upgrade_timedlock_shared(a, INT64_MAX), SHMLOCK_EOVERFLOW);
		atomic_store(&r->count, 1);
	}
	CHECK_RC(shmlock_upgrade_unlock_shared(a), 0);
	CHECK_RC(shmlock_upgrade_unlock_shared(a), SHMLOCK_ENOTHELD);
	/* Too many readers: every record taken. */
	shmlock_upgrade *h[5];
	for (int i = 0; i < 5; i++)
		CHECK_RC(shmlock_upgrade_open(seg, 2, &h[i]), 0);
	for (int i = 0; i < 4; i++)
		CHECK_RC(shmlock_upgrade_lock_shared(h[i]), 0);
	CHECK_UNCHANGED(h[0], shmlock_upgrade_lock_shared(h[4]), SHMLOCK_ETOOMANYREADERS);
	CHECK_UNCHANGED(h[0], shmlock_upgrade_timedlock_shared(h[4], INT64_MAX), SHMLOCK_ETOOMANYREADERS);
	for (int i = 0; i < 4; i++)
		CHECK_RC(shmlock_upgrade_unlock_shared(h[i]), 0);
	for (int i = 0; i < 5; i++)
		CHECK_RC(shmlock_upgrade_close(h[i]), 0);
	CHECK_RC(shmlock_upgrade_close(a), 0);
	CHECK_RC(shmlock_upgrade_close(b), 0);
}

/* ------------------------------------------------------------ lock manager */

static void test_lockmgr_misuse(void)
{
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(NULL, &m), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_open(seg, NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_close(NULL), SHMLOCK_EINVAL);
	shmlock_lock_info info;
	memset(&info, 0xa5, sizeof info);
	CHECK_RC(shmlock_lockmgr_acquire(NULL, "r", "o", SHMLOCK_EXCLUSIVE, NULL, &info), SHMLOCK_EINVAL);
	CHECK(info.version == 0 && info.attempts == 0); /* cleared on every return */
	CHECK_RC(shmlock_lockmgr_release(NULL, "r", "o"), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_refresh(NULL, "r", "o", 1, NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_mark_consistent(NULL, "r", "o"), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_check_version(NULL, "r", 1), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	char owner33[34], res41[42];
	repeat(owner33, 'o', 33);
	repeat(res41, 'r', 41);
	const char *bad_res[] = {NULL, "", res41, "\xff", "a\x01", "a\x7f", "\xc2\x85", "\xed\xa0\x80"};
	const char *bad_own[] = {NULL, "", owner33, "\xff", "a\x1f", "a\x7f", "\xc2\x9f", "\xe2\x82"};
	for (size_t i = 0; i < sizeof bad_res / sizeof bad_res[0]; i++) {
		CHECK_RC(shmlock_lockmgr_acquire(m, bad_res[i], "o", SHMLOCK_EXCLUSIVE, NULL, NULL),
		         SHMLOCK_EINVALID_RESOURCE);
		CHECK_RC(shmlock_lockmgr_release(m, bad_res[i], "o"), SHMLOCK_EINVALID_RESOURCE);
		CHECK_RC(shmlock_lockmgr_refresh(m, bad_res[i], "o", 1, NULL), SHMLOCK_EINVALID_RESOURCE);
		CHECK_RC(shmlock_lockmgr_mark_consistent(m, bad_res[i], "o"), SHMLOCK_EINVALID_RESOURCE);
		CHECK_RC(shmlock_lockmgr_check_version(m, bad_res[i], 0), SHMLOCK_EINVALID_RESOURCE);
	}
	for (size_t i = 0; i < sizeof bad_own / sizeof bad_own[0]; i++) {
		CHECK_RC(shmlock_lockmgr_acquire(m, "r", bad_own[i], SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EINVALID_OWNER);
		CHECK_RC(shmlock_lockmgr_release(m, "r", bad_own[i]), SHMLOCK_EINVALID_OWNER);
		CHECK_RC(shmlock_lockmgr_refresh(m, "r", bad_own[i], 1, NULL), SHMLOCK_EINVALID_OWNER);
		CHECK_RC(shmlock_lockmgr_mark_consistent(m, "r", bad_own[i]), SHMLOCK_EINVALID_OWNER);
	}
	int modes[] = {0, 3, -1, INT_MIN, INT_MAX, SHMLOCK_ACQUIRE_EAGER, SHMLOCK_ACQUIRE_EAGER | 3,
	               SHMLOCK_EXCLUSIVE | 0x200, SHMLOCK_EXCLUSIVE | SHMLOCK_COLLABORATIVE};
	for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
		CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", modes[i], NULL, NULL), SHMLOCK_EINVALID_MODE);
	shmlock_acquire_options bad_opts[] = {
		{.ttl_ns = -1},
		{.ttl_ns = INT64_MIN},
		{.wait_ns = -1},
		{.wait_ns = INT64_MIN},
		{.retries = -2},
		{.retries = INT_MIN},
		{.backoff_initial_ns = INT64_MAX},
		{.backoff_initial_ns = 2000, .backoff_max_ns = 1000},
	};
	for (size_t i = 0; i < sizeof bad_opts / sizeof bad_opts[0]; i++)
		CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_EXCLUSIVE, &bad_opts[i], NULL),
		         SHMLOCK_EINVALID_OPTIONS);
	CHECK_RC(shmlock_lockmgr_refresh(m, "r", "o", -1, NULL), SHMLOCK_EINVALID_OPTIONS);
	CHECK_RC(shmlock_lockmgr_refresh(m, "r", "o", INT64_MIN, NULL), SHMLOCK_EINVALID_OPTIONS);
	/* None of that made the resource. */
	CHECK_RC(shmlock_lockmgr_check_version(m, "r", 0), SHMLOCK_EVERSION_CONFLICT);
	/* Releases of what nobody holds. */
	CHECK_RC(shmlock_lockmgr_release(m, "r", "o"), 0);
	CHECK_RC(shmlock_lockmgr_refresh(m, "r", "o", 1, NULL), SHMLOCK_ELOCK_NOT_HELD);
	CHECK_RC(shmlock_lockmgr_mark_consistent(m, "r", "o"), SHMLOCK_ELOCK_NOT_HELD);
	/* A hold for ever (ttl INT64_MAX: the deadline saturates), then every
	 * other owner's call is refused and changes nothing. */
	shmlock_acquire_options forever = {.ttl_ns = INT64_MAX};
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_EXCLUSIVE, &forever, &info), 0);
	CHECK(info.expires_ns == INT64_MAX);
	uint64_t v = info.version;
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EALREADY_HELD);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "p", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ERESOURCE_LOCKED);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "p", SHMLOCK_COLLABORATIVE, NULL, NULL), SHMLOCK_ERESOURCE_LOCKED);
	shmlock_acquire_options waits[] = {
		{.retries = 1, .backoff_initial_ns = 1, .backoff_max_ns = 1},
		{.retries = 1, .backoff_initial_ns = 1, .backoff_max_ns = INT64_MAX},
		{.retries = 2, .backoff_initial_ns = INT64_MAX, .backoff_max_ns = INT64_MAX, .wait_ns = 1},
		{.retries = SHMLOCK_RETRY_FOREVER, .wait_ns = 1000},
		{.retries = INT_MAX, .wait_ns = 1000, .backoff_max_ns = INT64_MAX},
		{.wait_ns = 1},
	};
	int want[] = {SHMLOCK_EACQUISITION_FAILED, SHMLOCK_EACQUISITION_FAILED, SHMLOCK_EWAIT_TIMEOUT,
	              SHMLOCK_EWAIT_TIMEOUT, SHMLOCK_EWAIT_TIMEOUT, SHMLOCK_EWAIT_TIMEOUT};
	for (size_t i = 0; i < sizeof waits / sizeof waits[0]; i++) {
		int rc = shmlock_lockmgr_acquire(m, "r", "p", SHMLOCK_EXCLUSIVE | SHMLOCK_ACQUIRE_EAGER, &waits[i], &info);
		CHECK_RC(rc, want[i]);
		/* A wait bounded by a run of retries may also run out first. */
		if (i == 1 && rc == SHMLOCK_EWAIT_TIMEOUT)
			check_failures--;
	}
	CHECK_RC(shmlock_lockmgr_release(m, "r", "p"), SHMLOCK_ELOCK_NOT_HELD);
	CHECK_RC(shmlock_lockmgr_refresh(m, "r", "p", INT64_MAX, NULL), SHMLOCK_ELOCK_NOT_HELD);
	CHECK_RC(shmlock_lockmgr_mark_consistent(m, "r", "p"), SHMLOCK_ELOCK_NOT_HELD);
	CHECK_RC(shmlock_lockmgr_check_version(m, "r", v + 1), SHMLOCK_EVERSION_CONFLICT);
	CHECK_RC(shmlock_lockmgr_check_version(m, "r", v), 0);
	/* The holder's refreshes at either end of the range. */
	CHECK_RC(shmlock_lockmgr_refresh(m, "r", "o", INT64_MAX, &info), 0);
	CHECK(info.expires_ns == INT64_MAX && info.version == v);
	CHECK_RC(shmlock_lockmgr_refresh(m, "r", "o", 0, &info), 0);
	CHECK(info.expires_ns == 0);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "o"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "o"), 0);
	CHECK_RC(shmlock_lockmgr_close(m), 0);
}

/* ---------------------------------------------------- after the segment */

/* Handles of every kind outlive their segment's close: acquisitions say
 * ECLOSED, releases still release (and a holder still marks consistent), and the mapping stays until the last
 * handle goes (ASan reports a touch of anything freed). */
static void test_after_segment_close(void)
{
	char p[256];
	check_temp_path(p, sizeof p, "closed");
	shmlock_options o = {.slots = 2, .upgrades = 2, .upgrade_readers = 2, .lockmgr_entries = 4};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(p, &o, &s), 0);
	if (!s)
		return;
	shmlock_spin *l = NULL;
	shmlock_upgrade *u = NULL, *u2 = NULL;
	shmlock_lockmgr *m = NULL;
	void *d = NULL;
	uint64_t h = shmlock_holder_new();
	CHECK_RC(shmlock_spin_named(s, "spin", SHMLOCK_PIDTID, &l), 0);
	CHECK_RC(shmlock_upgrade_named(s, "upg", &u), 0);
	CHECK_RC(shmlock_upgrade_named(s, "upg", &u2), 0);
	CHECK_RC(shmlock_lockmgr_open(s, &m), 0);
	CHECK_RC(shmlock_data(s, "data", 64, &d), 0);
	CHECK_RC(shmlock_spin_lock(l, h), 0);
	CHECK_RC(shmlock_upgrade_lock_shared(u), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_close(s), 0);
	/* A second close, with handles still open: refused. */
	CHECK_RC(shmlock_close(s), SHMLOCK_ECLOSED);
	/* Another segment opened now cannot take the old one's address: the
	 * handles keep its mapping. */
	shmlock_segment *s2 = NULL;
	CHECK_RC(shmlock_open(p, NULL, &s2), 0);
	CHECK(s2 && s2->base != s->base);
	/* Nothing new through the closed segment, not even a region it has. */
	check_refused(s, (struct refusals){SHMLOCK_ECLOSED, SHMLOCK_ECLOSED, SHMLOCK_ECLOSED, SHMLOCK_ECLOSED,
	                                   SHMLOCK_ECLOSED, SHMLOCK_ECLOSED, SHMLOCK_ECLOSED});
	void *d2 = NULL;
	CHECK_RC(shmlock_data(s, "data", 0, &d2), SHMLOCK_ECLOSED);
	CHECK(d2 == NULL);
	/* Acquisitions refused, whatever the timeout. */
	uint64_t h2 = shmlock_holder_new();
	CHECK_RC(shmlock_spin_trylock(l, h2), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_spin_timedlock(l, h2, INT64_MAX), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_spin_lock(l, h), SHMLOCK_ECLOSED); /* not even a recursion */
	CHECK_RC(shmlock_upgrade_lock(u2), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_upgrade_timedlock(u2, INT64_MAX), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_upgrade_lock_upgrade(u2), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_upgrade_timedlock_shared(u2, INT64_MIN), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_upgrade_lock_shared(u), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r2", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_lockmgr_refresh(m, "r", "o", 1, NULL), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_lockmgr_check_version(m, "r", 1), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ECLOSED); /* its own hold */
	shmlock_acquire_options wait = {.retries = SHMLOCK_RETRY_FOREVER, .wait_ns = INT64_MAX};
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "p", SHMLOCK_COLLABORATIVE, &wait, NULL), SHMLOCK_ECLOSED);
	/* The holds are visible to the other open, and released from here. */
	shmlock_spin *ls = NULL;
	CHECK_RC(shmlock_spin_named(s2, "spin", SHMLOCK_PIDTID, &ls), 0);
	CHECK_RC(shmlock_spin_trylock(ls, h2), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_spin_unlock(l, h2), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK_RC(shmlock_spin_trylock(ls, h2), 0);
	CHECK_RC(shmlock_spin_unlock(l, h2), 0); /* the same process, a holder id it holds by */
	CHECK_RC(shmlock_upgrade_unlock_shared(u2), SHMLOCK_ENOTHELD);
	CHECK_RC(shmlock_upgrade_close(u), SHMLOCK_EHELD);
	CHECK_RC(shmlock_upgrade_unlock_shared(u), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "p"), SHMLOCK_ELOCK_NOT_HELD);
	CHECK_RC(shmlock_lockmgr_mark_consistent(m, "r", "p"), SHMLOCK_ELOCK_NOT_HELD);
	CHECK_RC(shmlock_lockmgr_mark_consistent(m, "r", "o"), 0); /* a holder's, as a release */
	CHECK_RC(shmlock_lockmgr_release(m, "r", "o"), 0);
	/* Handles closed in any order; the last frees the old mapping. */
	CHECK_RC(shmlock_spin_close(l), 0);
	CHECK_RC(shmlock_lockmgr_close(m), 0);
	CHECK_RC(shmlock_upgrade_close(u), 0);
	CHECK_RC(shmlock_upgrade_close(u2), 0);
	CHECK_RC(shmlock_spin_close(ls), 0);
	/* Every claim went back: the directory has room for both again. */
	CHECK_RC(shmlock_spin_named(s2, "a", SHMLOCK_PIDTID, &l), 0);
	CHECK_RC(shmlock_spin_named(s2, "b", SHMLOCK_PIDTID, &ls), 0);
	CHECK_RC(shmlock_spin_close(l), 0);
	CHECK_RC(shmlock_spin_close(ls), 0);
	CHECK_RC(shmlock_close(s2), 0);
	CHECK_RC(shmlock_remove(p), 0);
}

/* ----------------------------------------------------------- read-only */

static void test_read_only(void)
{
	shmlock_options o = {.flags = SHMLOCK_READ_ONLY};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_open(path, &o, &s), 0);
	if (!s)
		return;
	check_refused(s, (struct refusals){SHMLOCK_EREADONLY, SHMLOCK_EREADONLY, SHMLOCK_EREADONLY, SHMLOCK_EREADONLY,
	                                   0 /* to read versions */, SHMLOCK_EREADONLY, SHMLOCK_ENOTFOUND});
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(s, &m), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "ro", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EREADONLY);
	CHECK_RC(shmlock_lockmgr_release(m, "ro", "o"), SHMLOCK_EREADONLY);
	CHECK_RC(shmlock_lockmgr_refresh(m, "ro", "o", 1, NULL), SHMLOCK_EREADONLY);
	CHECK_RC(shmlock_lockmgr_mark_consistent(m, "ro", "o"), SHMLOCK_EREADONLY);
	CHECK_RC(shmlock_lockmgr_check_version(m, "ro", 0), SHMLOCK_EVERSION_CONFLICT);
	CHECK_RC(shmlock_lockmgr_close(m), 0);
	CHECK_RC(shmlock_close(s), 0);
}

int main(void)
{
	srand((unsigned)getpid());
	setup();
	RUN(test_error_functions);
	RUN(test_bad_paths);
	RUN(test_create_options);
	RUN(test_data);
	RUN(test_spin_handles);
	RUN(test_spin_pidtid);
	RUN(test_spin_token);
	RUN(test_upgrade_null);
	RUN(test_upgrade_misuse);
	RUN(test_lockmgr_misuse);
	RUN(test_after_segment_close);
	RUN(test_read_only);
	teardown();
	return CHECK_DONE();
}
