/* test_lockmgr.c: the lock manager in one process (and its forked
 * children), under ASan and UBSan. The words are read through internal.h
 * where a test must see what the table holds. */
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "check.h"
#include "internal.h"

static const int64_t MS = 1000000;

static void sleep_ns(int64_t ns)
{
	struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
	while (nanosleep(&ts, &ts) != 0) {
	}
}

/* A fresh segment with a lock-manager table of entries entries (the
 * header included); the caller closes it and removes path. */
static shmlock_segment *new_segment(char *path, size_t n, int64_t entries)
{
	check_temp_path(path, n, "lockmgr");
	shmlock_options o = {.lockmgr_entries = entries};
	shmlock_segment *seg = NULL;
	int rc = shmlock_create(path, &o, &seg);
	CHECK_RC(rc, 0);
	if (rc != 0) {
		fprintf(stderr, "cannot create %s\n", path);
		exit(1);
	}
	return seg;
}

static void done_segment(shmlock_segment *seg, shmlock_lockmgr *m, const char *path)
{
	if (m)
		CHECK_RC(shmlock_lockmgr_close(m), 0);
	CHECK_RC(shmlock_close(seg), 0);
	CHECK_RC(shmlock_remove(path), 0);
}

/* The entry of resource name, found by scanning the table, or NULL. */
static struct shm_lockmgr_entry *entry_named(shmlock_segment *seg, const char *name)
{
	uint64_t count;
	struct shm_lockmgr_entry *t = shm_table_of(seg, SHM_LOCKMGR, &count);
	for (uint64_t i = 1; i < count; i++) {
		if ((atomic_load(&t[i].ctl) & 3) != 1)
			continue;
		char buf[41] = {0};
		for (int j = 0; j < 5; j++) {
			uint64_t w = atomic_load(&t[i].name[j]);
			for (int k = 0; k < 8; k++)
				buf[j * 8 + k] = (char)(w >> (8 * k));
		}
		if (strcmp(buf, name) == 0)
			return &t[i];
	}
	return NULL;
}

/* The used holder records of e and its overflow chain. */
static int holder_count_of(shmlock_segment *seg, struct shm_lockmgr_entry *e)
{
	uint64_t count;
	struct shm_lockmgr_entry *t = shm_table_of(seg, SHM_LOCKMGR, &count);
	int n = 0;
	for (struct shm_lockmgr_entry *o = e; o != NULL;) {
		for (int j = 0; j < 2; j++)
			n += atomic_load(&o->holders[j].process) != 0;
		uint32_t next = atomic_load(&o->next);
		o = next != 0 && next < count ? &t[next] : NULL;
	}
	return n;
}

/* The hashes Go's lockmgr stored for these names (its hashWords). */
static void test_hash_matches_go(void)
{
	static const struct {
		const char *name;
		uint64_t hash;
	} want[] = {
		{"a", UINT64_C(0xf7e8e6f7ad8fab5f)},
		{"orders", UINT64_C(0xa634ba29732225d1)},
		{"exactly8", UINT64_C(0x76d97995024cdd9a)},
		{"ninechars", UINT64_C(0x40f531e410663472)},
		{"r\xc3\xa9sum\xc3\xa9-\xc3\xbc", UINT64_C(0x379c0c902913a1b5)},
		{"0123456789012345678901234567890123456789", UINT64_C(0x6481706114802244)},
	};
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 64);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	uint64_t count;
	struct shm_lockmgr_entry *t = shm_table_of(seg, SHM_LOCKMGR, &count);
	CHECK(count == 64);
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		CHECK_RC(shmlock_lockmgr_acquire(m, want[i].name, "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
		struct shm_lockmgr_entry *e = entry_named(seg, want[i].name);
		CHECK(e != NULL);
		if (e == NULL)
			continue;
		CHECK(atomic_load(&e->hash) == want[i].hash);
		if (i == 0) /* the first resource sits at its home entry */
			CHECK(e == &t[1 + want[i].hash % (count - 1)]);
		CHECK(atomic_load(&e->lock) == 0);
		CHECK_RC(shmlock_lockmgr_release(m, want[i].name, "o"), 0);
	}
	done_segment(seg, m, path);
}

/* The attempt counter of an acquisition that retries without end passes
 * INT_MAX attempts without overflowing (signed overflow is undefined: the
 * tests' UBSan stops there), and info.attempts stays at INT_MAX. The hook
 * counts INT_MAX - 1 attempts as made: the first failure is the INT_MAX'th,
 * and retries = INT_MAX allows one more. */
static void test_attempts_past_int_max(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 16);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "busy", "alice", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	shm_test_lockmgr_attempts_before = INT_MAX - 1;
	shmlock_acquire_options o = {.retries = INT_MAX, .backoff_initial_ns = 1, .backoff_max_ns = 1};
	shmlock_lock_info info;
	CHECK_RC(shmlock_lockmgr_acquire(m, "busy", "bob", SHMLOCK_EXCLUSIVE, &o, &info), SHMLOCK_EACQUISITION_FAILED);
	shm_test_lockmgr_attempts_before = 0;
	CHECK(info.attempts == INT_MAX);
	CHECK_RC(shmlock_lockmgr_release(m, "busy", "alice"), 0);
	done_segment(seg, m, path);
}

static void test_grant_release(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 16);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	shmlock_lock_info info;
	CHECK_RC(shmlock_lockmgr_acquire(m, "orders", "alice", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	CHECK(info.version == 1 && info.attempts == 1 && !info.reclaimed && !info.inconsistent);
	CHECK(info.acquired_ns > 0 && info.expires_ns == 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "orders", "bob", SHMLOCK_EXCLUSIVE, NULL, &info), SHMLOCK_ERESOURCE_LOCKED);
	CHECK(info.attempts == 1);
	CHECK_RC(shmlock_lockmgr_acquire(m, "orders", "bob", SHMLOCK_COLLABORATIVE, NULL, NULL), SHMLOCK_ERESOURCE_LOCKED);
	CHECK_RC(shmlock_lockmgr_acquire(m, "orders", "alice", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EALREADY_HELD);
	shmlock_acquire_options o = {.retries = 2, .backoff_initial_ns = 1 * MS};
	CHECK_RC(shmlock_lockmgr_acquire(m, "orders", "bob", SHMLOCK_EXCLUSIVE, &o, &info), SHMLOCK_EACQUISITION_FAILED);
	CHECK(info.attempts == 3);
	o = (shmlock_acquire_options){.wait_ns = 20 * MS, .backoff_initial_ns = 1 * MS};
	CHECK_RC(shmlock_lockmgr_acquire(m, "orders", "bob", SHMLOCK_EXCLUSIVE, &o, NULL), SHMLOCK_EWAIT_TIMEOUT);
	CHECK_RC(shmlock_lockmgr_check_version(m, "orders", 1), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "orders", "bob"), SHMLOCK_ELOCK_NOT_HELD);
	CHECK_RC(shmlock_lockmgr_release(m, "orders", "alice"), 0);
	CHECK_RC(shmlock_lockmgr_check_version(m, "orders", 1), SHMLOCK_EVERSION_CONFLICT);
	CHECK_RC(shmlock_lockmgr_check_version(m, "orders", 2), 0);
	CHECK_RC(shmlock_lockmgr_check_version(m, "nothing", 0), SHMLOCK_EVERSION_CONFLICT);
	/* Releasing what nobody holds, or what does not exist, succeeds. */
	CHECK_RC(shmlock_lockmgr_release(m, "orders", "alice"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "nothing", "alice"), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "orders", "bob", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	CHECK(info.version == 3);
	struct shm_lockmgr_entry *e = entry_named(seg, "orders");
	CHECK(e != NULL);
	if (e) {
		CHECK(atomic_load(&e->grants) == 2 && atomic_load(&e->releases) == 1);
		CHECK(atomic_load(&e->conflicts) == 4); /* counted at the first attempt of each */
		CHECK(((atomic_load(&e->ctl) >> 3) & 3) == SHMLOCK_EXCLUSIVE);
	}
	CHECK_RC(shmlock_lockmgr_release(m, "orders", "bob"), 0);
	if (e)
		CHECK(atomic_load(&e->ctl) == 1); /* a resource, no mode, consistent */
	done_segment(seg, m, path);
}

/* acquire_collaborative grants owners owner-0 to owner-(n-1) collaborative
 * holds of resource, checking that each grant's version is above the last;
 * it returns the last version. */
static uint64_t acquire_collaborative(shmlock_lockmgr *m, const char *resource, int n)
{
	char owner[32];
	uint64_t last = 0;
	for (int i = 0; i < n; i++) {
		shmlock_lock_info info;
		snprintf(owner, sizeof owner, "owner-%d", i);
		CHECK_RC(shmlock_lockmgr_acquire(m, resource, owner, SHMLOCK_COLLABORATIVE, NULL, &info), 0);
		CHECK(info.version > last);
		last = info.version;
	}
	return last;
}

static void test_collaborative_overflow(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 16);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	char owner[32];
	uint64_t last = acquire_collaborative(m, "doc", 16);
	CHECK_RC(shmlock_lockmgr_acquire(m, "doc", "one-more", SHMLOCK_COLLABORATIVE, NULL, NULL),
	         SHMLOCK_ETOO_MANY_HOLDERS);
	CHECK_RC(shmlock_lockmgr_acquire(m, "doc", "writer", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ERESOURCE_LOCKED);
	/* Seven overflow entries hold the 14 holders past the first two. */
	uint64_t count;
	struct shm_lockmgr_entry *t = shm_table_of(seg, SHM_LOCKMGR, &count);
	int overflows = 0;
	for (uint64_t i = 1; i < count; i++)
		overflows += (atomic_load(&t[i].ctl) & 3) == 3;
	CHECK(overflows == 7);
	/* Released in another order than granted. */
	for (int i = 15; i >= 0; i -= 2) {
		snprintf(owner, sizeof owner, "owner-%d", i);
		CHECK_RC(shmlock_lockmgr_release(m, "doc", owner), 0);
	}
	CHECK_RC(shmlock_lockmgr_acquire(m, "doc", "writer", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ERESOURCE_LOCKED);
	for (int i = 0; i < 16; i += 2) {
		snprintf(owner, sizeof owner, "owner-%d", i);
		CHECK_RC(shmlock_lockmgr_release(m, "doc", owner), 0);
	}
	shmlock_lock_info info;
	CHECK_RC(shmlock_lockmgr_acquire(m, "doc", "writer", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	CHECK(info.version == last + 17); /* 16 ends, then this grant */
	CHECK_RC(shmlock_lockmgr_release(m, "doc", "writer"), 0);
	done_segment(seg, m, path);
}

/* A collaborative resource that needs an overflow entry in a table whose
 * every other entry is a resource nobody holds (a resource stays in the
 * table after its last release) recycles one, as an insert does, rather
 * than fail with SHMLOCK_ELOCK_TABLE_FULL (lockmgr's
 * TestOverflowRecyclesIdleResource). */
static void test_overflow_recycles_idle(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 4); /* three resources */
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "idle-1", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "idle-1", "o"), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "idle-2", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "idle-2", "o"), 0);
	char owner[32];
	uint64_t last = acquire_collaborative(m, "shared", 6); /* three entries' records */
	CHECK_RC(shmlock_lockmgr_acquire(m, "shared", "one-more", SHMLOCK_COLLABORATIVE, NULL, NULL),
	         SHMLOCK_ELOCK_TABLE_FULL);
	uint64_t count;
	struct shm_lockmgr_entry *t = shm_table_of(seg, SHM_LOCKMGR, &count);
	for (uint64_t i = 1; i < count; i++)
		CHECK(atomic_load(&t[i].lock) == 0);
	for (int i = 0; i < 6; i++) {
		snprintf(owner, sizeof owner, "owner-%d", i);
		CHECK_RC(shmlock_lockmgr_release(m, "shared", owner), 0);
	}
	CHECK_RC(shmlock_lockmgr_acquire(m, "idle-1", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "idle-1", "o"), 0);
	done_segment(seg, m, path);
}

static void test_ttl_expiry_refresh(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 16);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	shmlock_acquire_options o = {.ttl_ns = 20 * MS};
	shmlock_lock_info info;
	CHECK_RC(shmlock_lockmgr_acquire(m, "job", "short", SHMLOCK_EXCLUSIVE, &o, &info), 0);
	CHECK(info.expires_ns == info.acquired_ns + 20 * MS);
	uint64_t v = info.version;
	sleep_ns(30 * MS);
	/* Expired: the next acquisition ends it and is told inconsistent. */
	CHECK_RC(shmlock_lockmgr_acquire(m, "job", "next", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	CHECK(info.version == v + 2 && !info.reclaimed && info.inconsistent);
	CHECK_RC(shmlock_lockmgr_release(m, "job", "short"), SHMLOCK_ELOCK_TIMEOUT);
	CHECK_RC(shmlock_lockmgr_release(m, "job", "short"), SHMLOCK_ELOCK_NOT_HELD); /* told once */
	CHECK_RC(shmlock_lockmgr_refresh(m, "job", "short", 0, NULL), SHMLOCK_ELOCK_NOT_HELD);
	CHECK_RC(shmlock_lockmgr_mark_consistent(m, "job", "short"), SHMLOCK_ELOCK_NOT_HELD);
	CHECK_RC(shmlock_lockmgr_mark_consistent(m, "job", "next"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "job", "next"), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "job", "next", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	CHECK(!info.inconsistent);
	/* Refresh: to no expiry, then to a short one that passes. */
	CHECK_RC(shmlock_lockmgr_refresh(m, "job", "next", 10 * MS, &info), 0);
	CHECK(info.expires_ns >= info.acquired_ns + 10 * MS);
	CHECK_RC(shmlock_lockmgr_refresh(m, "job", "next", 0, &info), 0);
	CHECK(info.expires_ns == 0);
	sleep_ns(15 * MS);
	CHECK_RC(shmlock_lockmgr_acquire(m, "job", "other", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ERESOURCE_LOCKED);
	CHECK_RC(shmlock_lockmgr_refresh(m, "job", "next", 5 * MS, &info), 0);
	sleep_ns(10 * MS);
	CHECK_RC(shmlock_lockmgr_refresh(m, "job", "next", 0, NULL), SHMLOCK_ELOCK_TIMEOUT);
	/* The refresh told the owner: a release is not told again (and finds
	 * nobody holding the resource, as Go's does). */
	CHECK_RC(shmlock_lockmgr_release(m, "job", "next"), 0);
	CHECK_RC(shmlock_lockmgr_refresh(m, "job", "other", 0, NULL), SHMLOCK_ELOCK_NOT_HELD);
	CHECK_RC(shmlock_lockmgr_refresh(m, "job", "next", -1, NULL), SHMLOCK_EINVALID_OPTIONS);
	/* An owner whose hold expired and who acquires again is not told of
	 * the old hold at the new one's releases: the grant is its news, as
	 * in Go (lockertest ExpiredOwnerAcquiresAgain). Ended by its own
	 * acquisition, and ended by another's first. */
	CHECK_RC(shmlock_lockmgr_acquire(m, "again", "a", SHMLOCK_EXCLUSIVE, &o, NULL), 0);
	sleep_ns(30 * MS);
	CHECK_RC(shmlock_lockmgr_acquire(m, "again", "a", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	CHECK(info.inconsistent);
	CHECK_RC(shmlock_lockmgr_release(m, "again", "a"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "again", "a"), 0); /* nobody holds it */
	CHECK_RC(shmlock_lockmgr_acquire(m, "again", "a", SHMLOCK_EXCLUSIVE, &o, NULL), 0);
	sleep_ns(30 * MS);
	CHECK_RC(shmlock_lockmgr_acquire(m, "again", "b", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "again", "b"), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "again", "a", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "again", "a"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "again", "a"), 0);
	/* A ttl so long that the expiry overflows ("for ever") does not end
	 * the hold at once: it saturates (Go: TestHugeTTLDoesNotExpire). */
	int64_t huge[] = {INT64_MAX, INT64_MAX - 1000 * MS};
	for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
		shmlock_acquire_options forever = {.ttl_ns = huge[i]};
		CHECK_RC(shmlock_lockmgr_acquire(m, "long", "alice", SHMLOCK_EXCLUSIVE, &forever, &info), 0);
		CHECK(info.expires_ns > info.acquired_ns);
		CHECK_RC(shmlock_lockmgr_acquire(m, "long", "bob", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ERESOURCE_LOCKED);
		CHECK_RC(shmlock_lockmgr_refresh(m, "long", "alice", huge[i], &info), 0);
		CHECK(info.expires_ns > info.acquired_ns);
		CHECK_RC(shmlock_lockmgr_acquire(m, "long", "bob", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ERESOURCE_LOCKED);
		CHECK_RC(shmlock_lockmgr_release(m, "long", "alice"), 0);
	}
	done_segment(seg, m, path);
}

/* An expired owner is told even after another hold's end has taken
 * last_expired: a grant that finds no free record, only the one of a hold
 * it has just ended for its TTL, grows the chain while it can and leaves
 * that record the owner's tombstone. Here "c" ends "a"'s hold with "b" in
 * the other record, and "d" then ends "b"'s. */
static void test_expired_owner_told_while_chain_grows(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 16);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "a", SHMLOCK_COLLABORATIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "b", SHMLOCK_COLLABORATIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_refresh(m, "r", "a", 1, NULL), 0);
	sleep_ns(MS); /* a's TTL passes */
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "c", SHMLOCK_COLLABORATIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_refresh(m, "r", "b", 1, NULL), 0);
	sleep_ns(MS); /* b's TTL passes */
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "d", SHMLOCK_COLLABORATIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "a"), SHMLOCK_ELOCK_TIMEOUT);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "b"), SHMLOCK_ELOCK_TIMEOUT);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "c"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "d"), 0);
	done_segment(seg, m, path);
}

/* Versions only grow, also when entries are recycled for other names. */
static void test_versions_recycled(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 4); /* three resources */
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	uint64_t seen[8] = {0}, max = 0;
	char name[16];
	for (int round = 0; round < 40; round++) {
		int r = (round * 5) % 8;
		snprintf(name, sizeof name, "res-%d", r);
		shmlock_lock_info info;
		CHECK_RC(shmlock_lockmgr_acquire(m, name, "o", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
		CHECK(info.version > seen[r]);
		seen[r] = info.version;
		max = info.version > max ? info.version : max;
		CHECK_RC(shmlock_lockmgr_release(m, name, "o"), 0);
	}
	/* With every entry held, a fourth name finds no room. */
	CHECK_RC(shmlock_lockmgr_acquire(m, "res-0", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "res-1", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "res-2", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "res-3", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ELOCK_TABLE_FULL);
	uint64_t count;
	struct shm_lockmgr_entry *t = shm_table_of(seg, SHM_LOCKMGR, &count);
	CHECK(atomic_load(&t[0].grants) > 0); /* recycled entries' statistics */
	CHECK(atomic_load(&t[0].lock) == 0);
	done_segment(seg, m, path);
}

/* recycled_setup makes a table of one resource, where "a" was held and
 * released: its entry, returned, is the one the next name recycles. */
static struct shm_lockmgr_entry *recycled_setup(char *path, size_t size, shmlock_segment **seg, shmlock_lockmgr **m)
{
	*seg = new_segment(path, size, 2); /* one resource */
	*m = NULL;
	CHECK_RC(shmlock_lockmgr_open(*seg, m), 0);
	CHECK_RC(shmlock_lockmgr_acquire(*m, "a", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_release(*m, "a", "o"), 0);
	struct shm_lockmgr_entry *e = entry_named(*seg, "a");
	CHECK(e != NULL);
	return e;
}

/* An entry recycled for another resource changes its version: the new
 * resource starts one above the entry's last version, so its first grant
 * is two above it. Readers take an entry whose version did not move while
 * they read it for one that held still (lockmgr's read). */
static void test_recycled_entry_changes_version(void)
{
	char path[128];
	shmlock_segment *seg;
	shmlock_lockmgr *m;
	struct shm_lockmgr_entry *e = recycled_setup(path, sizeof path, &seg, &m);
	uint64_t last = e ? atomic_load(&e->version) : 0;
	shmlock_lock_info info;
	CHECK_RC(shmlock_lockmgr_acquire(m, "b", "o", SHMLOCK_EXCLUSIVE, NULL, &info), 0); /* recycles a */
	CHECK(entry_named(seg, "b") == e);
	CHECK(info.version == last + 2);
	CHECK_RC(shmlock_lockmgr_release(m, "b", "o"), 0);
	done_segment(seg, m, path);
}

/* A resource that takes a recycled entry starts with the entry's contention
 * counters at zero (table.insert): they are exported under its name. a's
 * counters are written directly, as a contended wait would have bumped
 * them. */
static void test_recycled_entry_stats_reset(void)
{
	char path[128];
	shmlock_segment *seg;
	shmlock_lockmgr *m;
	struct shm_lockmgr_entry *e = recycled_setup(path, sizeof path, &seg, &m);
	uint64_t count;
	struct shm_lockmgr_entry *t = shm_table_of(seg, SHM_LOCKMGR, &count);
	struct shm_lock_stats *st = shm_lock_stats(seg, SHM_LOCKMGR, (uint64_t)(e - t));
	CHECK(st != NULL);
	if (st == NULL) {
		done_segment(seg, m, path);
		return;
	}
	shm_stats_wait(st, shm_now_ns(), true);
	SHM_STATS_ADD(st, sleeps);
	SHM_STATS_ADD(st, reclaims);
	CHECK_RC(shmlock_lockmgr_acquire(m, "b", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0); /* recycles a */
	CHECK(entry_named(seg, "b") == e);
	const unsigned char *b = (const unsigned char *)(const void *)st;
	for (size_t i = 0; i < sizeof *st; i++)
		CHECK(b[i] == 0);
	CHECK_RC(shmlock_lockmgr_release(m, "b", "o"), 0);
	done_segment(seg, m, path);
}

/* The thread's cache of its last pair of names (check_names) answers only
 * for exactly those names: a name one byte longer than a cached name of the
 * longest length is still refused, another owner of the cached resource is
 * another owner, and another resource is another entry. */
static void test_name_cache(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 8);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	const char *res40 = "0123456789012345678901234567890123456789";
	const char *own32 = "01234567890123456789012345678901";
	shmlock_lock_info info;
	for (int round = 0; round < 2; round++) { /* the second round is answered from the cache */
		CHECK_RC(shmlock_lockmgr_acquire(m, res40, own32, SHMLOCK_EXCLUSIVE, NULL, &info), 0);
		CHECK(info.version == (uint64_t)(2 * round + 1));
		CHECK_RC(shmlock_lockmgr_release(m, res40, own32), 0);
	}
	CHECK_RC(shmlock_lockmgr_acquire(m, "01234567890123456789012345678901234567890", own32, SHMLOCK_EXCLUSIVE, NULL,
	                                 NULL),
	         SHMLOCK_EINVALID_RESOURCE);
	CHECK_RC(shmlock_lockmgr_acquire(m, res40, "012345678901234567890123456789012", SHMLOCK_EXCLUSIVE, NULL, NULL),
	         SHMLOCK_EINVALID_OWNER);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "o"), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o2", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ERESOURCE_LOCKED);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EALREADY_HELD);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r2", "o", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	CHECK(info.version == 1);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "o2"), SHMLOCK_ELOCK_NOT_HELD);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "o"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "r2", "o"), 0);
	done_segment(seg, m, path);
}

static void test_bad_input(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 8);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(NULL, &m), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	static const char *bad[] = {
		"", "a\nb", "tab\there", "del\x7f", "\xc2\x85next-line", "\xff", "\xc3", "\xed\xa0\x80surrogate",
		"\xe0\x80\x80overlong", "01234567890123456789012345678901234567890",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_RC(shmlock_lockmgr_acquire(m, bad[i], "o", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EINVALID_RESOURCE);
		CHECK_RC(shmlock_lockmgr_acquire(m, "r", bad[i], SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EINVALID_OWNER);
		CHECK_RC(shmlock_lockmgr_release(m, bad[i], "o"), SHMLOCK_EINVALID_RESOURCE);
		CHECK_RC(shmlock_lockmgr_check_version(m, bad[i], 0), SHMLOCK_EINVALID_RESOURCE);
	}
	CHECK_RC(shmlock_lockmgr_acquire(m, NULL, "o", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EINVALID_RESOURCE);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", NULL, SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EINVALID_OWNER);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "012345678901234567890123456789012", SHMLOCK_EXCLUSIVE, NULL, NULL),
	         SHMLOCK_EINVALID_OWNER);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "01234567890123456789012345678901", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "0123456789012345678901234567890123456789", "\xe2\x82\xac", SHMLOCK_EXCLUSIVE,
	                                 NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", 0, NULL, NULL), SHMLOCK_EINVALID_MODE);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", 3, NULL, NULL), SHMLOCK_EINVALID_MODE);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_ACQUIRE_EAGER, NULL, NULL), SHMLOCK_EINVALID_MODE);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_EXCLUSIVE | 0x200, NULL, NULL), SHMLOCK_EINVALID_MODE);
	shmlock_acquire_options o[] = {
		{.ttl_ns = -1}, {.wait_ns = -1}, {.retries = -2},
		{.backoff_initial_ns = 2000 * MS}, {.backoff_initial_ns = 10 * MS, .backoff_max_ns = 5 * MS},
	};
	for (size_t i = 0; i < sizeof o / sizeof o[0]; i++)
		CHECK_RC(shmlock_lockmgr_acquire(m, "r", "o", SHMLOCK_EXCLUSIVE, &o[i], NULL), SHMLOCK_EINVALID_OPTIONS);
	/* The longest wait there is ("for ever") with a retry limit: the
	 * deadline arithmetic must not overflow (UBSan caught start + wait). */
	shmlock_acquire_options forever = {.wait_ns = INT64_MAX, .retries = 1, .backoff_initial_ns = 1 * MS};
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "other", SHMLOCK_EXCLUSIVE, &forever, NULL), SHMLOCK_EACQUISITION_FAILED);
	/* As Go's Backoff: a delay of 0 or less is the default, not an error. */
	shmlock_acquire_options defaults = {.backoff_initial_ns = -1, .backoff_max_ns = -5 * MS};
	CHECK_RC(shmlock_lockmgr_acquire(m, "backoff", "o", SHMLOCK_EXCLUSIVE, &defaults, NULL), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "backoff", "o"), 0);
	CHECK_RC(shmlock_lockmgr_acquire(NULL, "r", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_release(NULL, "r", "o"), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_refresh(NULL, "r", "o", 0, NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_mark_consistent(NULL, "r", "o"), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_check_version(NULL, "r", 0), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_lockmgr_close(NULL), SHMLOCK_EINVAL);
	done_segment(seg, m, path);

	/* A segment without a lock-manager table. */
	seg = new_segment(path, sizeof path, -1);
	m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), SHMLOCK_ENOTABLE);
	done_segment(seg, NULL, path);
}

/* fork_holder forks a child that acquires res as owner in mode and then
 * waits to be killed; it returns the child's pid once it holds. */
static pid_t fork_holder(shmlock_lockmgr *m, const char *res, const char *owner, int mode)
{
	int p[2];
	CHECK(pipe(p) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		int rc = shmlock_lockmgr_acquire(m, res, owner, mode, NULL, NULL);
		char c = rc == 0 ? 'y' : 'n';
		if (write(p[1], &c, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	char c = 0;
	CHECK(read(p[0], &c, 1) == 1 && c == 'y');
	close(p[0]);
	return pid;
}

static void kill_child(pid_t pid)
{
	kill(pid, SIGKILL);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
}

/* A forked child takes the lock and is killed holding it: the next
 * acquisition reclaims it, is told so once, and the resource stays
 * inconsistent until a holder marks it consistent. */
static void test_dead_holder_reclaimed(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 16);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	pid_t pid = fork_holder(m, "job", "child", SHMLOCK_EXCLUSIVE);
	CHECK_RC(shmlock_lockmgr_acquire(m, "job", "parent", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_ERESOURCE_LOCKED);
	kill_child(pid);
	shmlock_acquire_options o = {.retries = SHMLOCK_RETRY_FOREVER, .backoff_initial_ns = 5 * MS};
	shmlock_lock_info info;
	CHECK_RC(shmlock_lockmgr_acquire(m, "job", "parent", SHMLOCK_EXCLUSIVE, &o, &info), 0);
	CHECK(info.reclaimed && info.inconsistent && info.version == 3);
	struct shm_lockmgr_entry *e = entry_named(seg, "job");
	CHECK(e && atomic_load(&e->reclaimed) == 1);
	CHECK_RC(shmlock_lockmgr_release(m, "job", "parent"), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "job", "parent", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	CHECK(!info.reclaimed && info.inconsistent);
	CHECK_RC(shmlock_lockmgr_mark_consistent(m, "job", "parent"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "job", "parent"), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "job", "parent", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	CHECK(!info.reclaimed && !info.inconsistent);
	CHECK_RC(shmlock_lockmgr_release(m, "job", "parent"), 0);
	done_segment(seg, m, path);
}

/* Forked children take locks under the parent's owner name: one lives on,
 * one is killed holding its lock. The parent, as that owner, is refused
 * the live one's lock (SHMLOCK_EALREADY_HELD) and granted the dead one's
 * (the dead hold reclaimed, and told), not refused it for good. */
static void test_same_owner_after_death(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 16);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	pid_t live = fork_holder(m, "live", "agent", SHMLOCK_EXCLUSIVE);
	pid_t dead = fork_holder(m, "job", "agent", SHMLOCK_EXCLUSIVE);
	CHECK_RC(shmlock_lockmgr_acquire(m, "live", "agent", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EALREADY_HELD);
	kill_child(dead);
	shmlock_lock_info info;
	CHECK_RC(shmlock_lockmgr_acquire(m, "job", "agent", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	CHECK(info.reclaimed && info.inconsistent && info.version == 3);
	CHECK_RC(shmlock_lockmgr_acquire(m, "job", "agent", SHMLOCK_EXCLUSIVE, NULL, NULL), SHMLOCK_EALREADY_HELD);
	CHECK_RC(shmlock_lockmgr_release(m, "job", "agent"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "job", "agent"), 0); /* told by the grant, not by a later release */
	kill_child(live);
	done_segment(seg, m, path);
}

/* A forked child fills every holder record of a resource with
 * collaborative holds and is killed: a collaborative acquisition conflicts
 * with none of them, but their records are the only room there is. The dead
 * holds make room (reclaimed, and told) instead of keeping the resource
 * full for good, for an acquisition that does not wait (not
 * SHMLOCK_ETOO_MANY_HOLDERS) and for one that waits. */
static void test_dead_holders_make_room(void)
{
	for (int waits = 0; waits < 2; waits++) {
		char path[128];
		shmlock_segment *seg = new_segment(path, sizeof path, 16);
		shmlock_lockmgr *m = NULL;
		CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
		int p[2];
		CHECK(pipe(p) == 0);
		pid_t pid = fork();
		if (pid == 0) {
			close(p[0]);
			char c = 'y';
			for (int i = 0; i < 16; i++) {
				char owner[24];
				snprintf(owner, sizeof owner, "dead-%d", i);
				if (shmlock_lockmgr_acquire(m, "r", owner, SHMLOCK_COLLABORATIVE, NULL, NULL) != 0)
					c = 'n';
			}
			if (write(p[1], &c, 1) != 1)
				_exit(1);
			pause();
			_exit(0);
		}
		close(p[1]);
		char c = 0;
		CHECK(read(p[0], &c, 1) == 1 && c == 'y');
		close(p[0]);
		kill(pid, SIGKILL);
		int status;
		CHECK(waitpid(pid, &status, 0) == pid);
		/* The waiting one is bounded only so that the old failure ends. */
		shmlock_acquire_options o = {.wait_ns = 30000 * MS, .backoff_initial_ns = 3600000 * MS,
		                             .backoff_max_ns = 3600000 * MS};
		shmlock_lock_info info;
		CHECK_RC(shmlock_lockmgr_acquire(m, "r", "new", SHMLOCK_COLLABORATIVE, waits ? &o : NULL, &info), 0);
		CHECK(info.reclaimed && info.inconsistent);
		struct shm_lockmgr_entry *e = entry_named(seg, "r");
		CHECK(e && atomic_load(&e->reclaimed) == 16);
		CHECK_RC(shmlock_lockmgr_release(m, "r", "new"), 0);
		CHECK(e && holder_count_of(seg, e) == 0);
		done_segment(seg, m, path);
	}
}

/* A process that died in a grow or a retire, holding the insert lock, left
 * an overflow entry that no chain reaches (here made by hand): whoever
 * takes the insert lock over frees it, else it were lost to the table for
 * good (here the table is full without it). */
static void test_orphan_freed(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 4); /* three entries */
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "a", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	uint64_t count;
	struct shm_lockmgr_entry *t = shm_table_of(seg, SHM_LOCKMGR, &count);
	CHECK(count == 4);
	int orphans = 0;
	for (uint64_t i = 1; i < count && orphans < 1; i++)
		if ((atomic_load(&t[i].ctl) & 3) == 0) {
			atomic_store(&t[i].ctl, 3); /* an overflow entry no chain links */
			orphans++;
		}
	CHECK(orphans == 1);
	pid_t pid = fork();
	if (pid == 0) { /* the insert lock, left by a dead process */
		atomic_store(&t[0].lock, shm_self());
		_exit(0);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK_RC(shmlock_lockmgr_acquire(m, "b", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "c", "o", SHMLOCK_EXCLUSIVE, NULL, NULL), 0); /* the orphan's entry */
	for (uint64_t i = 1; i < count; i++)
		CHECK((atomic_load(&t[i].ctl) & 3) == 1);
	CHECK_RC(shmlock_lockmgr_release(m, "a", "o"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "b", "o"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "c", "o"), 0);
	done_segment(seg, m, path);
}

/* Threads of one process as different owners: an exact counter, and
 * waiters woken by releases (the gate). */
struct worker {
	shmlock_lockmgr *m;
	int id, rounds;
	uint64_t *counter;
	int failures;
};

static void *hammer(void *arg)
{
	struct worker *w = arg;
	char owner[16];
	snprintf(owner, sizeof owner, "thread-%d", w->id);
	shmlock_acquire_options o = {.retries = SHMLOCK_RETRY_FOREVER};
	int mode = SHMLOCK_EXCLUSIVE | (w->id % 2 ? SHMLOCK_ACQUIRE_EAGER : 0); /* eager waiters beside the others */
	uint64_t last = 0;
	for (int i = 0; i < w->rounds; i++) {
		shmlock_lock_info info;
		if (shmlock_lockmgr_acquire(w->m, "counter", owner, mode, &o, &info) != 0 ||
		    info.version <= last) {
			w->failures++;
			continue;
		}
		last = info.version;
		uint64_t v = __atomic_load_n(w->counter, __ATOMIC_RELAXED);
		if (i % 16 == 0)
			sched_yield();
		__atomic_store_n(w->counter, v + 1, __ATOMIC_RELAXED);
		if (shmlock_lockmgr_release(w->m, "counter", owner) != 0)
			w->failures++;
	}
	return NULL;
}

/* An owner whose hold an operator ended (Go's ForceRelease leaves its hash
 * with the top bit flipped in last_expired) and that is granted the
 * resource again has had its news: a second release of the new hold is
 * the release of a lock nobody holds (0), not an operator's end again. */
static void test_forced_owner_granted_again(void)
{
	const uint64_t forced_a = UINT64_C(0xf7e8e6f7ad8fab5f) ^ (UINT64_C(1) << 63); /* owner "a" */
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 16);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "a", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "a"), 0);
	struct shm_lockmgr_entry *e = entry_named(seg, "r");
	CHECK(e != NULL);
	if (e) {
		atomic_store(&e->last_expired, forced_a);
		CHECK_RC(shmlock_lockmgr_release(m, "r", "a"), SHMLOCK_ELOCK_NOT_HELD); /* the mark is a's */
		atomic_store(&e->last_expired, forced_a);
		CHECK_RC(shmlock_lockmgr_acquire(m, "r", "a", SHMLOCK_EXCLUSIVE, NULL, NULL), 0);
		CHECK_RC(shmlock_lockmgr_release(m, "r", "a"), 0);
		CHECK_RC(shmlock_lockmgr_release(m, "r", "a"), 0);
	}
	done_segment(seg, m, path);
}

static void test_threads_counter(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 16);
	shmlock_lockmgr *m = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	uint64_t counter = 0;
	struct worker w[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){.m = m, .id = i, .rounds = 2000, .counter = &counter};
		CHECK(pthread_create(&th[i], NULL, hammer, &w[i]) == 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(w[i].failures == 0);
	}
	CHECK(counter == 8000);
	struct shm_lockmgr_entry *e = entry_named(seg, "counter");
	CHECK(e && atomic_load(&e->grants) == 8000 && atomic_load(&e->releases) == 8000);
	CHECK(e && (atomic_load(&e->sleepers) & SHM_SLEEPERS_COUNT) == 0);
	done_segment(seg, m, path);
}

/* A holder told of damage that repairs the data as it unwinds, after its
 * segment's close, says so and releases: the mark goes, as with the
 * spinlock's and the upgrade mutex's mark_consistent, and the next holder
 * (another open of the file) is not told. Only the holder may. */
static void test_mark_consistent_after_close(void)
{
	char path[128];
	shmlock_segment *seg = new_segment(path, sizeof path, 4);
	shmlock_lockmgr *m = NULL, *om = NULL;
	shmlock_segment *other = NULL;
	CHECK_RC(shmlock_lockmgr_open(seg, &m), 0);
	CHECK_RC(shmlock_open(path, NULL, &other), 0);
	CHECK_RC(shmlock_lockmgr_open(other, &om), 0);
	shmlock_lock_info info;
	CHECK_RC(shmlock_lockmgr_acquire(m, "r", "repairer", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	struct shm_lockmgr_entry *e = entry_named(seg, "r");
	CHECK(e != NULL);
	if (e == NULL)
		return;
	const uint32_t inconsistent = 1u << 5; /* LM_CTL_INCONSISTENT (lockmgr.c) */
	atomic_fetch_or(&e->ctl, inconsistent); /* as an expired or dead holder's end leaves it */
	CHECK_RC(shmlock_close(seg), 0);
	CHECK_RC(shmlock_lockmgr_mark_consistent(m, "r", "stranger"), SHMLOCK_ELOCK_NOT_HELD);
	CHECK((atomic_load(&e->ctl) & inconsistent) != 0);
	CHECK_RC(shmlock_lockmgr_mark_consistent(m, "r", "repairer"), 0);
	CHECK_RC(shmlock_lockmgr_release(m, "r", "repairer"), 0);
	CHECK_RC(shmlock_lockmgr_close(m), 0); /* the last handle on seg: it goes */
	CHECK_RC(shmlock_lockmgr_acquire(om, "r", "next", SHMLOCK_EXCLUSIVE, NULL, &info), 0);
	CHECK(!info.inconsistent);
	CHECK_RC(shmlock_lockmgr_release(om, "r", "next"), 0);
	done_segment(other, om, path);
}

int main(void)
{
	RUN(test_hash_matches_go);
	RUN(test_grant_release);
	RUN(test_attempts_past_int_max);
	RUN(test_collaborative_overflow);
	RUN(test_overflow_recycles_idle);
	RUN(test_ttl_expiry_refresh);
	RUN(test_expired_owner_told_while_chain_grows);
	RUN(test_versions_recycled);
	RUN(test_bad_input);
	RUN(test_recycled_entry_changes_version);
	RUN(test_recycled_entry_stats_reset);
	RUN(test_name_cache);
	RUN(test_dead_holder_reclaimed);
	RUN(test_same_owner_after_death);
	RUN(test_dead_holders_make_room);
	RUN(test_orphan_freed);
	RUN(test_forced_owner_granted_again);
	RUN(test_threads_counter);
	RUN(test_mark_consistent_after_close);
	return CHECK_DONE();
}
