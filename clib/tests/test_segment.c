/* test_segment.c: opening the golden images, refusals of bad files (which
 * change nothing), create/open round trips, claims, releases, regions. */
#define _GNU_SOURCE /* unshare, O_PATH */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include "check.h"
#include "internal.h"

#define LIVE UINT64_C(0x7530001092)
#define DEAD UINT64_C(0x8000007ef40010f7)
#define LIVE_TID UINT64_C(0x1111222233334444)
#define DEAD_TID UINT64_C(0x5555666677778888)

static const shmlock_options golden_ro = {
	.flags = SHMLOCK_READ_ONLY | SHMLOCK_ALLOW_OTHERS_ACCESS | SHMLOCK_ALLOW_FOREIGN_OWNER | SHMLOCK_ALLOW_FOREIGN_PIDNS,
};

static shmlock_segment *open_golden(const char *name)
{
	char path[512];
	check_testdata(path, sizeof path, name);
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_open(path, &golden_ro, &s), 0);
	return s;
}

/* Header words every image shares (testdata/segments/README.md). */
static void check_common(shmlock_segment *s)
{
	static const uint8_t boot[16] = {0xb0, 0x07, 0x1d, 0x00, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 1};
	struct shm_header *h = s->hdr;
	CHECK(h->version == SHM_VERSION && h->header_size == 1024 && h->table_count == 12);
	CHECK(h->created == UINT64_C(1704067200000000000));
	CHECK(memcmp(h->boot_id, boot, 16) == 0);
	CHECK(memcmp(h->owners_boot, boot, 16) == 0);
	CHECK(h->pidns == UINT64_C(4026531836));
	CHECK(h->creator == UINT64_C(0x4e20003e8));
	CHECK(atomic_load(&h->ready) == SHM_READY);
	CHECK(atomic_load(&h->registry_gen) == 9);
	CHECK(h->total_size == s->size);
	for (int k = 1; k <= SHM_TABLE_COUNT; k++)
		CHECK(h->tables[k - 1].kind == (uint32_t)k && s->tables[k].count == h->tables[k - 1].count);
}

static void test_golden_owner_slots(void)
{
	shmlock_segment *s = open_golden("segments/owner-slots.seg");
	if (!s)
		return;
	check_common(s);
	CHECK(atomic_load(&s->hdr->registry) == 0);
	CHECK(s->tables[SHM_OWNER_SLOTS].count == 4 && s->hdr->tables[0].offset == 1024);
	CHECK(s->tables[SHM_SLOT_DIRECTORY].count == 4 && s->hdr->tables[1].offset == 1152);
	CHECK(s->tables[SHM_CLAIM_REFS].count == 4 && s->hdr->tables[8].offset == 1408);
	CHECK(s->tables[SHM_UPGRADES].base == NULL);
	struct shm_owner_slot *sl = s->tables[SHM_OWNER_SLOTS].base;
	CHECK(atomic_load(&sl[0].pid) == LIVE && atomic_load(&sl[0].tid) == LIVE_TID && atomic_load(&sl[0].token) == 3);
	CHECK(atomic_load(&sl[1].pid) == DEAD && atomic_load(&sl[1].tid) == DEAD_TID && atomic_load(&sl[1].token) == 7);
	CHECK(atomic_load(&sl[1].recursion) == 1);
	CHECK(atomic_load(&sl[2].token) == UINT64_C(0x0123456789abcdef) && atomic_load(&sl[2].pid) == 0);
	CHECK(atomic_load(&sl[3].pid) == 0 && atomic_load(&sl[3].token) == 0);
	struct shm_dir_entry *d = s->tables[SHM_SLOT_DIRECTORY].base;
	CHECK(atomic_load(&d[0].state) == 1 && atomic_load(&d[0].refs) == 1 && atomic_load(&d[0].use) == 1);
	CHECK(atomic_load(&d[0].name_len) == 5 && atomic_load(&d[0].claimer) == LIVE);
	CHECK(atomic_load(&d[1].claimer) == DEAD && atomic_load(&d[2].refs) == 2 && atomic_load(&d[2].use) == 2);
	CHECK(atomic_load(&d[3].state) == 0);
	struct shm_claim_ref *r = s->tables[SHM_CLAIM_REFS].base;
	for (int i = 0; i < 4; i++)
		CHECK((atomic_load(&r[i].target) >> 24) == 1 && atomic_load(&r[i].count) == 1);
	/* The recorded identities are of another boot: dead here. */
	CHECK(!shm_owner_alive(s, LIVE));
	size_t idx;
	CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "queue", 1, &idx), SHMLOCK_EREADONLY);
	CHECK_RC(shmlock_close(s), 0);
}

static void test_golden_upgrades(void)
{
	shmlock_segment *s = open_golden("segments/upgrades.seg");
	if (!s)
		return;
	check_common(s);
	CHECK(s->tables[SHM_UPGRADES].count == 2 && s->tables[SHM_UPGRADE_READERS].count == 4);
	struct shm_upgrade_entry *u = s->tables[SHM_UPGRADES].base;
	CHECK(atomic_load(&u[0].state) == 0x80000000u && atomic_load(&u[0].writer) == LIVE);
	CHECK(atomic_load(&u[0].writer_tid) == LIVE_TID && atomic_load(&u[0].generation) == 2);
	CHECK(atomic_load(&u[1].state) == 0x40000000u && atomic_load(&u[1].upgrader) == DEAD);
	CHECK(atomic_load(&u[1].generation) == 5);
	struct shm_reader_record *rr = s->tables[SHM_UPGRADE_READERS].base;
	CHECK(atomic_load(&rr[2].owner) == LIVE && atomic_load(&rr[2].count) == 2 && atomic_load(&rr[2].pad) == 3);
	CHECK(atomic_load(&rr[3].owner) == DEAD && atomic_load(&rr[3].count) == 1);
	CHECK_RC(shmlock_close(s), 0);
}

static void test_golden_lockmgr_txn(void)
{
	shmlock_segment *s = open_golden("segments/lockmgr.seg");
	if (s) {
		check_common(s);
		CHECK(s->tables[SHM_LOCKMGR].count == 4 && s->size == 4096);
		shmlock_close(s);
	}
	s = open_golden("segments/txn.seg");
	if (s) {
		check_common(s);
		CHECK(s->tables[SHM_TXN_RECORDS].count == 2 && s->tables[SHM_TXN_ARENA].count == 64 && s->size == 8192);
		shmlock_close(s);
	}
}

static void test_golden_regions(void)
{
	shmlock_segment *s = open_golden("segments/data-regions.seg");
	if (!s)
		return;
	check_common(s);
	CHECK(atomic_load(&s->hdr->registry) == DEAD);
	uint8_t *data = s->tables[SHM_DATA].base;
	void *p = NULL;
	CHECK_RC(shmlock_data(s, "queue", 0, &p), 0);
	CHECK(p == data);
	CHECK_RC(shmlock_data(s, "queue", 100, &p), 0);
	CHECK_RC(shmlock_data(s, "queue", 99, &p), SHMLOCK_EREGIONSIZE);
	if (p == data) {
		uint64_t w;
		memcpy(&w, p, 8);
		CHECK(w == 42 && memcmp((char *)p + 8, "hello", 5) == 0);
	}
	CHECK_RC(shmlock_data(s, "stats", 0, &p), 0);
	CHECK(p == data + 128);
	CHECK_RC(shmlock_data(s, "größe", 1, &p), 0);
	CHECK(p == data + 192);
	CHECK_RC(shmlock_data(s, "half", 0, &p), SHMLOCK_ENOTFOUND);
	CHECK_RC(shmlock_data(s, "half", 8, &p), SHMLOCK_EREADONLY);
	CHECK_RC(shmlock_data(s, "bad\nname", 8, &p), SHMLOCK_EBADNAME);
	/* A handle's reference keeps the segment: closed, not freed. */
	shm_seg_get(s);
	CHECK_RC(shmlock_close(s), 0);
	CHECK_RC(shmlock_close(s), SHMLOCK_ECLOSED);
	CHECK_RC(shmlock_data(s, "queue", 0, &p), SHMLOCK_ECLOSED);
	shm_seg_put(s);
}

/* Copies a golden image to a private 0600 file. */
static void copy_golden(const char *name, const char *to)
{
	char path[512];
	check_testdata(path, sizeof path, name);
	FILE *in = fopen(path, "rb");
	CHECK(in != NULL);
	if (!in)
		return;
	char buf[8192];
	size_t n = fread(buf, 1, sizeof buf, in);
	fclose(in);
	int fd = open(to, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CHECK(fd >= 0 && write(fd, buf, n) == (ssize_t)n);
	close(fd);
}

/* A writable open of an image of another boot: every identity is stale, the
 * dead claimant's registry lock is freed, and a claim takes entry 3. */
static void test_reboot_and_claims(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "reboot");
	copy_golden("segments/data-regions.seg", path);
	shmlock_options o = {.flags = SHMLOCK_ALLOW_FOREIGN_PIDNS};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_open(path, &o, &s), 0);
	if (s) {
		uint8_t boot[16];
		shm_boot_id(boot);
		CHECK(memcmp(s->hdr->owners_boot, boot, 16) == 0);
		CHECK(atomic_load(&s->hdr->registry) == 0);
		CHECK(atomic_load(&s->hdr->registry_gen) == 10);
		void *p = NULL;
		CHECK_RC(shmlock_data(s, "half", 10, &p), 0);
		CHECK(p == (uint8_t *)s->tables[SHM_DATA].base + 256);
		struct shm_region_entry *e = s->tables[SHM_REGION_DIRECTORY].base;
		CHECK(atomic_load(&e[3].state) == 1 && atomic_load(&e[3].offset) == 256 && atomic_load(&e[3].size) == 10);
		CHECK_RC(shmlock_data(s, "more", 1000, &p), SHMLOCK_EDATAFULL);
		shmlock_close(s);
	}
	CHECK_RC(shmlock_remove(path), 0);

	check_temp_path(path, sizeof path, "reboot2");
	copy_golden("segments/owner-slots.seg", path);
	CHECK_RC(shmlock_open(path, &o, &s), 0);
	if (s) {
		struct shm_owner_slot *sl = s->tables[SHM_OWNER_SLOTS].base;
		CHECK(atomic_load(&sl[0].pid) == (LIVE | SHM_STALE_BIT));
		CHECK(atomic_load(&sl[1].pid) == DEAD);
		struct shm_claim_ref *r = s->tables[SHM_CLAIM_REFS].base;
		CHECK(atomic_load(&r[0].owner) == (LIVE | SHM_STALE_BIT));
		/* Every record is a dead process's: the claim drops them all. */
		size_t idx = 99;
		CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "queue", 1, &idx), 0);
		CHECK(idx == 0);
		struct shm_dir_entry *d = s->tables[SHM_SLOT_DIRECTORY].base;
		CHECK(atomic_load(&d[0].refs) == 1);
		/* Held by the dead and referenced by the dead alone: nobody is
		 * left to wait for or to tell, so it is freed, words and all. */
		CHECK(atomic_load(&d[1].state) == 0 && atomic_load(&d[1].refs) == 0);
		CHECK(atomic_load(&sl[1].pid) == 0 && atomic_load(&sl[1].token) == 0 && atomic_load(&sl[1].recursion) == 0);
		CHECK(atomic_load(&d[2].refs) == 0 && atomic_load(&d[2].state) == 1); /* token held: kept */
		CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "queue", 2, &idx), SHMLOCK_EUSEMISMATCH);
		CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "new", 1, &idx), 0);
		CHECK(idx == 1);
		CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "more", 1, &idx), 0);
		CHECK(idx == 3);
		/* A token holder may be alive: its claim is never recycled. */
		CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "full", 1, &idx), SHMLOCK_ETABLEFULL);
		/* Free slot 2's lock: the next claim recycles its claim. */
		atomic_store(&sl[2].token, 0);
		CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "full", 1, &idx), 0);
		CHECK(idx == 2 && atomic_load(&d[2].refs) == 1 && atomic_load(&d[2].use) == 1);
		CHECK_RC(shm_release_claim(s, SHM_OWNER_SLOTS, 3), 0);
		CHECK(atomic_load(&d[3].state) == 0);
		CHECK_RC(shm_release_claim(s, SHM_OWNER_SLOTS, 3), SHMLOCK_ENOTFOUND);
		CHECK_RC(shm_release_claim(s, SHM_OWNER_SLOTS, 4), SHMLOCK_EINDEX);
		shmlock_close(s);
	}
	CHECK_RC(shmlock_remove(path), 0);
}

/* A writable open of txn.seg, an image of another boot: the identities of
 * the txn tables are stale too (record owners, pin rows; the arena's lock
 * and barrier words), as every other table's (shm's markTxnStale). */
static void test_reboot_marks_txn(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "reboot-txn");
	copy_golden("segments/txn.seg", path);
	shmlock_options o = {.flags = SHMLOCK_ALLOW_FOREIGN_PIDNS};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_open(path, &o, &s), 0);
	if (s) {
		uint8_t *recs = s->tables[SHM_TXN_RECORDS].base, *arena = s->tables[SHM_TXN_ARENA].base;
		a64 *owner0 = (a64 *)(void *)(recs + 8), *owner1 = (a64 *)(void *)(recs + 128 + 8);
		a64 *row0 = (a64 *)(void *)(arena + 128), *row1 = (a64 *)(void *)(arena + 128 + 64);
		CHECK(atomic_load(owner0) == (LIVE | SHM_STALE_BIT));
		CHECK(atomic_load(owner1) == DEAD);
		CHECK(atomic_load(row0) == (LIVE | SHM_STALE_BIT));
		CHECK(atomic_load(row1) == DEAD);
		shmlock_close(s);
	}
	CHECK_RC(shmlock_remove(path), 0);
}

/* A txn arena of its control area alone (128 bytes) has no room for a pin
 * row after it, though half the arena would hold one: the first open after
 * a reboot marks no "row 0" stale there, the next table's first word (here
 * the first data region's State and NameLen: the region would be lost). */
static void test_reboot_leaves_word_after_tiny_arena(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "reboot-arena");
	shmlock_options o = {.txn_records = 1, .txn_arena_bytes = 128, .lockmgr_entries = -1, .upgrades = -1,
	                     .claim_refs = -1};
	shmlock_segment *s = NULL;
	void *p = NULL;
	CHECK_RC(shmlock_create(path, &o, &s), 0);
	if (!s)
		return;
	CHECK_RC(shmlock_data(s, "kept", 8, &p), 0);
	CHECK_RC(shmlock_close(s), 0);
	int fd = open(path, O_RDWR);
	uint8_t other[16];
	memset(other, 0xab, sizeof other);
	CHECK(pwrite(fd, other, sizeof other, offsetof(struct shm_header, owners_boot)) == (ssize_t)sizeof other);
	close(fd);
	CHECK_RC(shmlock_open(path, NULL, &s), 0);
	if (s) {
		CHECK_RC(shmlock_data(s, "kept", 8, &p), 0);
		shmlock_close(s);
	}
	CHECK_RC(shmlock_remove(path), 0);
}

static size_t read_file(const char *path, uint8_t *buf, size_t n)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t r = read(fd, buf, n);
	close(fd);
	return r < 0 ? 0 : (size_t)r;
}

static void write_file(const char *path, const uint8_t *buf, size_t n, mode_t mode)
{
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, mode);
	CHECK(fd >= 0 && write(fd, buf, n) == (ssize_t)n);
	fchmod(fd, mode);
	close(fd);
}

/* Opens a variant of a valid segment; the code is want and the file is unchanged. */
static void check_bad(const char *what, const uint8_t *img, size_t n, mode_t mode, int want)
{
	char path[256];
	check_temp_path(path, sizeof path, what);
	write_file(path, img, n, mode);
	shmlock_segment *s = NULL;
	shmlock_options o = {.ready_timeout_ns = 1};
	int rc = shmlock_open(path, &o, &s);
	if (rc != want)
		fprintf(stderr, "bad input %s:\n", what);
	CHECK_RC(rc, want);
	static uint8_t after[1 << 20];
	CHECK(read_file(path, after, sizeof after) == n && memcmp(after, img, n) == 0);
	if (rc == 0)
		shmlock_close(s);
	unlink(path);
}

static void test_bad_inputs(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "good");
	shmlock_options small = {.slots = 4, .upgrades = -1, .txn_records = -1, .txn_arena_bytes = -1,
	                         .lockmgr_entries = -1, .data_bytes = -1};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(path, &small, &s), 0);
	if (!s)
		return;
	size_t n = s->size;
	CHECK(n == 4096);
	shmlock_close(s);
	static uint8_t img[4096], bad[4096];
	CHECK(read_file(path, img, sizeof img) == n);
	check_bad("copy", img, n, 0600, 0);
	check_bad("trunc", img, 100, 0600, SHMLOCK_ETRUNCATED);
	check_bad("empty", img, 0, 0600, SHMLOCK_ETRUNCATED);
	memcpy(bad, img, n);
	bad[0] = 'X';
	check_bad("magic", bad, n, 0600, SHMLOCK_EBADMAGIC);
	memcpy(bad, img, n);
	bad[8] = 3; /* made by an older shmlock */
	check_bad("version", bad, n, 0600, SHMLOCK_EVERSION);
	memcpy(bad, img, n);
	bad[SHM_TABLES_OFF + 11 * 32 + 8] ^= 1; /* lock_stats count: not one per lock */
	bad[SHM_OFF_MUTABLE + 4] = 0; /* checksum fixed below */
	{
		uint32_t c = shm_crc32c(bad, SHM_OFF_MUTABLE);
		memcpy(bad + SHM_OFF_MUTABLE + 4, &c, 4);
	}
	check_bad("stats count", bad, n, 0600, SHMLOCK_EMALFORMED);
	/* A claim directory with fewer entries than its table: a claim would
	 * read and write past it (no directory: through NULL). */
	for (uint64_t count = 0; count < 4; count += 3) {
		memcpy(bad, img, n);
		memcpy(bad + SHM_TABLES_OFF + (SHM_SLOT_DIRECTORY - 1) * 32 + 8, &count, 8);
		uint32_t c = shm_crc32c(bad, SHM_OFF_MUTABLE);
		memcpy(bad + SHM_OFF_MUTABLE + 4, &c, 4);
		check_bad("slot directory count", bad, n, 0600, SHMLOCK_EMALFORMED);
	}
	memcpy(bad, img, n);
	bad[SHM_OFF_MUTABLE + 4] ^= 1;
	check_bad("checksum", bad, n, 0600, SHMLOCK_ECHECKSUM);
	memcpy(bad, img, n);
	bad[100] = 0; /* kind of the first descriptor */
	check_bad("kind", bad, n, 0600, SHMLOCK_EMALFORMED);
	memcpy(bad, img, n);
	bad[96 + 16] = 8; /* owner slots at 1032: misaligned */
	check_bad("align", bad, n, 0600, SHMLOCK_ETABLERANGE);
	memcpy(bad, img, n);
	bad[96 + 32 + 16] = 0; /* slot directory at 1024: overlaps */
	bad[96 + 32 + 17] = 4;
	check_bad("overlap", bad, n, 0600, SHMLOCK_ETABLEOVERLAP);
	memcpy(bad, img, n);
	atomic_store((a32 *)(void *)(bad + SHM_OFF_MUTABLE), 0);
	check_bad("notready", bad, n, 0600, SHMLOCK_ENOTREADY);
	check_bad("mode", img, n, 0644, SHMLOCK_EPERMISSIVE);
	check_bad("group", img, n, 0640, SHMLOCK_EPERMISSIVE);
	static uint8_t big[8192];
	memcpy(big, img, n);
	check_bad("size", big, sizeof big, 0600, SHMLOCK_ESIZE);

	/* A symlink to a valid segment, a directory, a missing file, bad paths. */
	char link[300];
	snprintf(link, sizeof link, "%s-link", path);
	CHECK(symlink(path, link) == 0);
	CHECK_RC(shmlock_open(link, NULL, &s), SHMLOCK_ESYMLINK);
	CHECK_RC(shmlock_remove(link), SHMLOCK_ESYMLINK);
	unlink(link);
	char dir[300];
	snprintf(dir, sizeof dir, "%s-dir", path);
	CHECK(mkdir(dir, 0700) == 0);
	CHECK_RC(shmlock_open(dir, NULL, &s), SHMLOCK_ENOTREGULAR);
	shmlock_options ro = {.flags = SHMLOCK_READ_ONLY};
	CHECK_RC(shmlock_open(dir, &ro, &s), SHMLOCK_ENOTREGULAR);
	CHECK_RC(shmlock_remove(dir), SHMLOCK_ENOTREGULAR);
	rmdir(dir);
	CHECK_RC(shmlock_open("/dev/shm/shmlock-ctest-none-such", NULL, &s), SHMLOCK_ESYS);
	CHECK(shmlock_errno() == ENOENT);
	CHECK_RC(shmlock_open("", NULL, &s), SHMLOCK_EBADPATH);
	CHECK_RC(shmlock_open("..", NULL, &s), SHMLOCK_EBADPATH);
	CHECK_RC(shmlock_open("/dev/shm/", NULL, &s), SHMLOCK_EBADPATH);
	CHECK_RC(shmlock_open(path, NULL, NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_create(path, NULL, &s), SHMLOCK_EEXIST);
	shmlock_options huge = {.slots = 1 << 21};
	char p2[256];
	check_temp_path(p2, sizeof p2, "huge");
	CHECK_RC(shmlock_create(p2, &huge, &s), SHMLOCK_ELIMIT);
	CHECK(access(p2, F_OK) != 0);
	/* Remove refuses what is not a segment. */
	write_file(p2, (const uint8_t *)"not a segment", 13, 0600);
	CHECK_RC(shmlock_remove(p2), SHMLOCK_EBADMAGIC);
	unlink(p2);
	CHECK_RC(shmlock_remove(path), 0);
	CHECK_RC(shmlock_remove(path), SHMLOCK_ESYS);
}

/* A name of the form the hidden files of segments being made or removed
 * have is refused (shm TestCreateRefusesHiddenNames): Go's leftover
 * recovery would take a segment made under one for a dead process's
 * leftover and remove it. */
static void test_create_refuses_hidden_names(void)
{
	static const char *names[] = {".shmlock-init-1-2-ns3-4", ".shmlock-rm-1-2-ns3-4-seg"};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		char path[256];
		snprintf(path, sizeof path, "/dev/shm/%s", names[i]);
		shmlock_segment *s = NULL;
		CHECK_RC(shmlock_create(path, NULL, &s), SHMLOCK_EBADPATH);
		CHECK_RC(shmlock_create(names[i], NULL, &s), SHMLOCK_EBADPATH);
		CHECK_RC(shmlock_open_or_create(names[i], NULL, &s), SHMLOCK_EBADPATH);
		CHECK(access(path, F_OK) != 0);
		if (s) {
			shmlock_close(s);
			unlink(path);
		}
	}
}

/* SHMLOCK_READ_ONLY is for opens, for inspection: a create asked for it,
 * also the create of shmlock_open_or_create on a missing path, is
 * SHMLOCK_EREADONLY and makes no file (shm.Create's ErrReadOnly). */
static void test_create_read_only_refused(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "ro-create");
	shmlock_options o = {.flags = SHMLOCK_READ_ONLY};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(path, &o, &s), SHMLOCK_EREADONLY);
	CHECK(access(path, F_OK) != 0);
	CHECK_RC(shmlock_open_or_create(path, &o, &s), SHMLOCK_EREADONLY);
	CHECK(access(path, F_OK) != 0);
	if (s) {
		shmlock_close(s);
		unlink(path);
	}
}

static void test_round_trip(void)
{
	char path[256], name[128];
	check_temp_path(path, sizeof path, "rt");
	shmlock_segment *s = NULL, *t = NULL;
	shmlock_options g = {.flags = SHMLOCK_GROUP_ACCESS};
	CHECK_RC(shmlock_create(path, &g, &s), 0);
	if (!s)
		return;
	struct stat st;
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0660);
	CHECK(s->hdr->flags == 1 && s->creator);
	CHECK(s->tables[SHM_OWNER_SLOTS].count == 64 && s->tables[SHM_CLAIM_REFS].count == 160);
	CHECK(s->tables[SHM_UPGRADE_READERS].count == 16 * 32 && s->tables[SHM_DATA].count == 1024);
	CHECK(s->hdr->creator == shm_self());
	CHECK_RC(shmlock_open(path, NULL, &t), SHMLOCK_EPERMISSIVE);
	CHECK_RC(shmlock_open(path, &g, &t), 0);
	if (t) {
		CHECK(!t->creator && t->size == s->size);
		size_t a, b;
		CHECK_RC(shm_claim(s, SHM_UPGRADES, "m", 0, &a), 0);
		CHECK_RC(shm_claim(t, SHM_UPGRADES, "m", 0, &b), 0);
		CHECK(a == b);
		struct shm_dir_entry *d = t->tables[SHM_UPGRADE_DIRECTORY].base;
		CHECK(atomic_load(&d[a].refs) == 2);
		struct shm_claim_ref *r = t->tables[SHM_CLAIM_REFS].base;
		CHECK(atomic_load(&r[0].owner) == shm_self() && atomic_load(&r[0].count) == 2);
		CHECK(atomic_load(&r[0].target) == (3u << 24 | (uint32_t)a));
		CHECK_RC(shm_release_claim(s, SHM_UPGRADES, a), 0);
		CHECK_RC(shm_release_claim(t, SHM_UPGRADES, a), 0);
		CHECK(atomic_load(&d[a].state) == 0 && atomic_load(&r[0].owner) == 0);
		/* Unnamed claims never share. */
		CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, NULL, 0, &a), 0);
		CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "", 0, &b), 0);
		CHECK(a != b);
		void *p, *q;
		CHECK_RC(shmlock_data(s, "counter", 8, &p), 0);
		CHECK_RC(shmlock_data(t, "counter", 8, &q), 0);
		CHECK((uint8_t *)p - s->base == (uint8_t *)q - t->base);
		CHECK_RC(shmlock_data(t, "second", 65, &q), 0);
		CHECK((uint8_t *)q - (uint8_t *)t->tables[SHM_DATA].base == 64);
		CHECK_RC(shmlock_data(t, "third", 1, &q), 0);
		CHECK((uint8_t *)q - (uint8_t *)t->tables[SHM_DATA].base == 192);
		/* 41 bytes is too long a name. */
		memset(name, 'a', 41);
		name[41] = 0;
		CHECK_RC(shmlock_data(t, name, 1, &q), SHMLOCK_EBADNAME);
		CHECK_RC(shm_claim(t, SHM_OWNER_SLOTS, name, 0, &a), SHMLOCK_EBADNAME);
		CHECK_RC(shm_claim(t, SHM_OWNER_SLOTS, "\xc3\x28", 0, &a), SHMLOCK_EBADNAME);
		CHECK_RC(shm_claim(t, SHM_OWNER_SLOTS, "\xc2\x85", 0, &a), SHMLOCK_EBADNAME); /* U+0085 */
		shm_seg_get(t);
		shmlock_close(t);
		CHECK_RC(shm_claim(t, SHM_OWNER_SLOTS, "x", 0, &a), SHMLOCK_ECLOSED);
		CHECK_RC(shm_release_claim(t, SHM_OWNER_SLOTS, b), 0); /* releases work after close */
		shm_seg_put(t);
	}
	shmlock_close(s);
	/* open_or_create opens it now. */
	CHECK_RC(shmlock_open_or_create(path, &g, &s), 0);
	if (s) {
		CHECK(!s->creator);
		shmlock_close(s);
	}
	CHECK_RC(shmlock_remove(path), 0);
	CHECK_RC(shmlock_open_or_create(path, NULL, &s), 0);
	if (s) {
		CHECK(s->creator);
		shmlock_close(s);
	}
	CHECK_RC(shmlock_remove(path), 0);
}

/* A child dies holding a claim: the next claim that finds no room drops its reference. */
static void test_dead_claimant(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "dead");
	shmlock_options o = {.slots = 2, .claim_refs = 2};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(path, &o, &s), 0);
	if (!s)
		return;
	size_t a;
	pid_t pid = fork();
	if (pid == 0) {
		size_t i, j;
		int rc = shm_claim(s, SHM_OWNER_SLOTS, "one", 1, &i) | shm_claim(s, SHM_OWNER_SLOTS, "two", 1, &j);
		_exit(rc == 0 ? 0 : 1);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct shm_dir_entry *d = s->tables[SHM_SLOT_DIRECTORY].base;
	CHECK(atomic_load(&d[0].refs) == 1 && atomic_load(&d[1].refs) == 1);
	CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "three", 1, &a), 0);
	CHECK(a == 0 && atomic_load(&d[1].state) == 0);
	shmlock_close(s);
	CHECK_RC(shmlock_remove(path), 0);
}

/* A child claims two slots without saying a mode (use 0) and dies; one is
 * held by a dead pid/tid holder, the other by a token, which names no
 * process. The next claim that finds no room drops the child's references
 * and recycles the first (its pid word proves the mode and the holder's
 * death), never the second (as shm's TestDeadClaimantsSlotIsRecycled). */
static void test_dead_holder_use0_recycled(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "dead-holder-use0");
	shmlock_options o = {.slots = 2, .claim_refs = 2};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(path, &o, &s), 0);
	if (!s)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		size_t i, j;
		int rc = shm_claim(s, SHM_OWNER_SLOTS, "pid", 0, &i) | shm_claim(s, SHM_OWNER_SLOTS, "token", 0, &j);
		_exit(rc == 0 && i == 0 && j == 1 ? 0 : 1);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct shm_owner_slot *sl = s->tables[SHM_OWNER_SLOTS].base;
	atomic_store(&sl[0].pid, DEAD);
	atomic_store(&sl[0].tid, DEAD_TID);
	atomic_store(&sl[0].token, 5); /* its generation */
	atomic_store(&sl[1].token, UINT64_C(0x0123456789abcdef));
	size_t a = 99;
	CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "next", 1, &a), 0);
	struct shm_dir_entry *d = s->tables[SHM_SLOT_DIRECTORY].base;
	CHECK(a == 0 && atomic_load(&sl[0].pid) == 0 && atomic_load(&sl[0].token) == 0);
	CHECK(atomic_load(&d[1].state) == 1 && atomic_load(&d[1].refs) == 0);
	CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "full", 1, &a), SHMLOCK_ETABLEFULL);
	CHECK(atomic_load(&sl[1].token) == UINT64_C(0x0123456789abcdef));
	shmlock_close(s);
	CHECK_RC(shmlock_remove(path), 0);
}

/* A slot claimed without a mode takes the mode of its first open, so that
 * its claim goes with its last release once the lock is released (with
 * use 0 a released pid/tid slot's generation reads as a token held: it was
 * kept for ever), and an open for the other mode is refused (as Go's
 * TestOpenGivesAClaimItsMode). */
static void test_open_gives_claim_its_mode(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "adopt-use");
	shmlock_options o = {.slots = 2};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(path, &o, &s), 0);
	if (!s)
		return;
	struct shm_dir_entry *d = s->tables[SHM_SLOT_DIRECTORY].base;
	size_t i = 99;
	CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "unsaid", 0, &i), 0);
	shmlock_spin *l = NULL, *other = NULL;
	CHECK_RC(shmlock_spin_open(s, i, SHMLOCK_PIDTID, &l), 0);
	CHECK(atomic_load(&d[i].use) == SHMLOCK_PIDTID + 1);
	CHECK_RC(shmlock_spin_open(s, i, SHMLOCK_TOKEN, &other), SHMLOCK_EUSEMISMATCH);
	if (l) {
		uint64_t h = shmlock_holder_new();
		CHECK_RC(shmlock_spin_lock(l, h), 0);
		CHECK_RC(shmlock_spin_unlock(l, h), 0);
		shmlock_spin_close(l);
	}
	CHECK_RC(shm_release_claim(s, SHM_OWNER_SLOTS, i), 0);
	CHECK(atomic_load(&d[i].state) == 0);
	/* An unclaimed slot has no claim to record a mode in. */
	CHECK_RC(shmlock_spin_open(s, 1, SHMLOCK_TOKEN, &l), 0);
	if (l)
		shmlock_spin_close(l);
	CHECK(atomic_load(&d[1].state) == 0 && atomic_load(&d[1].use) == 0);
	shmlock_close(s);
	CHECK_RC(shmlock_remove(path), 0);
}

/* What becomes of a claim whose last reference goes, by its lock's words
 * (shm's TestUpgradeClaimFateByHolders and TestSlotClaimFateMarked):
 * FREED at the release (a free lock, or one only dead processes hold),
 * RECYCLED by a claim of another name that finds no other room (free but
 * marked inconsistent: its news is given up for room only), or KEPT (a
 * live process may hold it, or a lock bit is no holder's). */
enum fate { FREED, RECYCLED, KEPT };

struct fate_case {
	const char *name;
	uint32_t state;
	uint64_t writer, upgrader;
	uint64_t owner[2];
	uint32_t count[2];
	enum fate want;
};

/* check_fate releases the one claim ("old", entry 0 of a one-entry table)
 * of kind and checks that its entry meets want. */
static void check_fate(shmlock_segment *s, int kind, int dk, const char *name, enum fate want)
{
	struct shm_dir_entry *d = s->tables[dk].base;
	size_t j = 99;
	CHECK_RC(shm_release_claim(s, kind, 0), 0);
	bool freed = atomic_load(&d[0].state) == SHM_DIR_FREE;
	int rc = shm_claim(s, kind, "new", 0, &j);
	bool ok = want == FREED    ? freed && rc == 0 && j == 0
	          : want == KEPT   ? !freed && rc == SHMLOCK_ETABLEFULL
	                           : !freed && rc == 0 && j == 0;
	if (!ok)
		fprintf(stderr, "  %s: want fate %d, freed at release %d, claim rc %d\n", name, want, freed, rc);
	CHECK(ok);
	if (rc == 0)
		CHECK_RC(shm_release_claim(s, kind, j), 0);
}

static void test_claim_fate_by_holders(void)
{
	const uint64_t live = shm_self(), unique = SHM_UPG_WRITER_UNIQUE, hungry = UINT64_C(1) << 62;
	const uint32_t w = SHM_UPG_WRITE, u = SHM_UPG_UPGRADE, p = SHM_UPG_PENDING, inc = SHM_UPG_INCONSISTENT;
	const struct fate_case cases[] = {
		{"free", 0, 0, 0, {live, 0}, {0, 0}, FREED},
		{"marked", inc, 0, 0, {0, 0}, {0, 0}, RECYCLED},
		{"marked, handoff", inc, hungry | UINT64_C(7) << SHM_PID_BITS, 0, {0, 0}, {0, 0}, RECYCLED},
		{"dead unique, fast form", 0, DEAD | unique, 0, {0, 0}, {0, 0}, FREED},
		{"dead unique, marked", w | inc, DEAD, 0, {0, 0}, {0, 0}, FREED},
		{"dead waiter for the writers' mutex", 0, DEAD | hungry, 0, {0, 0}, {0, 0}, FREED},
		{"dead upgraded", w | u, 0, DEAD, {0, 0}, {0, 0}, FREED},
		{"dead pending", u | p, 0, DEAD, {DEAD, 0}, {1, 0}, FREED},
		{"dead readers", 0, 0, 0, {DEAD, live}, {2, 0}, FREED},
		{"live unique", 0, live | unique, 0, {0, 0}, {0, 0}, KEPT},
		{"live waiter for the writers' mutex", u, live, DEAD, {0, 0}, {0, 0}, KEPT},
		{"live upgrade", u, 0, live, {0, 0}, {0, 0}, KEPT},
		{"live reader beside a dead one", 0, 0, 0, {DEAD, live}, {1, 1}, KEPT},
		{"live reader beside a dead writer", 0, DEAD, 0, {live, 0}, {1, 0}, KEPT},
		{"a count with no owner", 0, 0, 0, {0, 0}, {1, 0}, KEPT},
		{"unique bit of no writer", w, 0, DEAD, {0, 0}, {0, 0}, KEPT},
		{"pending bit of no upgrader", p, 0, 0, {DEAD, 0}, {1, 0}, KEPT},
	};
	char path[256];
	check_temp_path(path, sizeof path, "claim-fate");
	shmlock_options o = {.slots = 1, .upgrades = 1, .upgrade_readers = 2, .claim_refs = 2};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(path, &o, &s), 0);
	if (!s)
		return;
	struct shm_upgrade_entry *e = s->tables[SHM_UPGRADES].base;
	struct shm_reader_record *r = s->tables[SHM_UPGRADE_READERS].base;
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		const struct fate_case *tc = &cases[c];
		size_t i = 99;
		CHECK_RC(shm_claim(s, SHM_UPGRADES, "old", 0, &i), 0);
		CHECK(i == 0);
		atomic_store(&e->state, tc->state);
		atomic_store(&e->writer, tc->writer);
		atomic_store(&e->upgrader, tc->upgrader);
		for (int j = 0; j < 2; j++) {
			atomic_store(&r[j].owner, tc->owner[j]);
			atomic_store(&r[j].count, tc->count[j]);
		}
		check_fate(s, SHM_UPGRADES, SHM_UPGRADE_DIRECTORY, tc->name, tc->want);
		if (tc->want != KEPT)
			CHECK(atomic_load(&e->state) == 0 && atomic_load(&e->writer) == 0 && atomic_load(&r[0].owner) == 0);
		if (tc->want == KEPT) {
			/* Its lock freed by hand, the next claim recycles it. */
			atomic_store(&e->state, 0);
			atomic_store(&e->writer, 0);
			atomic_store(&e->upgrader, 0);
			atomic_store(&r[0].count, 0);
			atomic_store(&r[1].count, 0);
			CHECK_RC(shm_claim(s, SHM_UPGRADES, "new", 0, &i), 0);
			CHECK(i == 0 && atomic_load(&r[0].owner) == 0 && atomic_load(&r[1].owner) == 0);
			CHECK_RC(shm_release_claim(s, SHM_UPGRADES, i), 0);
		}
	}
	/* Owner slots: free but marked (a reclaim's or a force's mark). */
	const struct {
		const char *name;
		uint32_t use;
		uint64_t pid, token;
		uint32_t recursion;
		enum fate want;
	} slots[] = {
		{"pid/tid released", 1, 0, 5, 0, FREED},
		{"pid/tid reclaimed and released", 1, 0, 6, SHM_SLOT_INCONSISTENT, RECYCLED},
		{"pid/tid reclaimed, its taker dead", 1, DEAD, 6, SHM_SLOT_INCONSISTENT, FREED},
		{"pid/tid marked, re-entries and no holder", 1, 0, 6, SHM_SLOT_INCONSISTENT | 1, KEPT},
		{"token forced", 2, 0, 0, SHM_SLOT_INCONSISTENT, RECYCLED},
		{"token forced, held again", 2, 0, 9, SHM_SLOT_INCONSISTENT, KEPT},
		{"unsaid, marked, generation kept", 0, 0, 6, SHM_SLOT_INCONSISTENT, KEPT},
		{"unsaid, marked, no token", 0, 0, 0, SHM_SLOT_INCONSISTENT, RECYCLED},
	};
	struct shm_owner_slot *sl = s->tables[SHM_OWNER_SLOTS].base;
	for (size_t c = 0; c < sizeof slots / sizeof slots[0]; c++) {
		size_t i = 99;
		CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "old", slots[c].use, &i), 0);
		CHECK(i == 0);
		atomic_store(&sl->pid, slots[c].pid);
		atomic_store(&sl->token, slots[c].token);
		atomic_store(&sl->recursion, slots[c].recursion);
		check_fate(s, SHM_OWNER_SLOTS, SHM_SLOT_DIRECTORY, slots[c].name, slots[c].want);
		if (slots[c].want == KEPT) {
			/* Its lock freed by hand, the next claim recycles it. */
			atomic_store(&sl->token, 0);
			atomic_store(&sl->recursion, 0);
			CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "new", 0, &i), 0);
			CHECK(i == 0);
			CHECK_RC(shm_release_claim(s, SHM_OWNER_SLOTS, i), 0);
		}
		CHECK(atomic_load(&sl->pid) == 0 && atomic_load(&sl->token) == 0 && atomic_load(&sl->recursion) == 0);
	}
	shmlock_close(s);
	CHECK_RC(shmlock_remove(path), 0);
}

/* A machine that went down while a process was between a claim's two
 * counts (Refs counted, its record not yet) leaves the registry lock held
 * and a reference that no record names: the first open after the reboot
 * recounts, as a takeover of the lock does, so the claim goes (as in Go). */
static void test_reboot_mid_claim_recounts(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "reboot-mid-claim");
	shmlock_options o = {.slots = 1, .claim_refs = 2};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(path, &o, &s), 0);
	if (!s)
		return;
	size_t i = 99;
	CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "gone", 1, &i), 0);
	struct shm_claim_ref *r = s->tables[SHM_CLAIM_REFS].base;
	atomic_store(&r[0].owner, 0); /* the record not yet made */
	atomic_store(&r[0].target, 0);
	atomic_store(&r[0].count, 0);
	atomic_store(&s->hdr->registry, DEAD & ~SHM_STALE_BIT);
	uint64_t other = UINT64_C(0xabababababababab);
	atomic_store((a64 *)(void *)&s->hdr->owners_boot[0], other);
	atomic_store((a64 *)(void *)&s->hdr->owners_boot[8], other);
	shmlock_close(s);
	s = NULL;
	CHECK_RC(shmlock_open(path, NULL, &s), 0);
	if (s) {
		struct shm_dir_entry *d = s->tables[SHM_SLOT_DIRECTORY].base;
		CHECK(atomic_load(&s->hdr->registry) == 0);
		CHECK(atomic_load(&d[0].state) == 0 && atomic_load(&d[0].refs) == 0);
		CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "next", 1, &i), 0);
		CHECK(i == 0);
		CHECK_RC(shm_release_claim(s, SHM_OWNER_SLOTS, i), 0);
		shmlock_close(s);
	}
	CHECK_RC(shmlock_remove(path), 0);
}

/* A claim that finds the table full drops the dead's references, a change
 * of the directory, and may still find no room: the registry generation
 * moves all the same, for the readers of the claims without the lock (as
 * in Go: TestFailedClaimThatDroppedRefsMovesTheGeneration). */
static void test_failed_claim_moves_generation(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "failed-claim-gen");
	shmlock_options o = {.slots = 1, .claim_refs = 4};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(path, &o, &s), 0);
	if (!s)
		return;
	size_t i = 99, j = 99;
	CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "jobs", 1, &i), 0);
	struct shm_claim_ref *r = s->tables[SHM_CLAIM_REFS].base;
	struct shm_dir_entry *d = s->tables[SHM_SLOT_DIRECTORY].base;
	atomic_store(&r[3].target, (uint32_t)SHM_OWNER_SLOTS << 24 | (uint32_t)i);
	atomic_store(&r[3].count, 1);
	atomic_store(&r[3].owner, DEAD);
	atomic_fetch_add(&d[i].refs, 1); /* the dead process's reference */
	uint64_t before = atomic_load(&s->hdr->registry_gen);
	CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "other", 1, &j), SHMLOCK_ETABLEFULL);
	CHECK(atomic_load(&d[i].refs) == 1);
	CHECK(atomic_load(&s->hdr->registry_gen) != before);
	CHECK_RC(shm_release_claim(s, SHM_OWNER_SLOTS, i), 0);
	shmlock_close(s);
	CHECK_RC(shmlock_remove(path), 0);
}

/* A claim whose reference count is at its greatest (damage): another claim
 * of its name fails and changes nothing, rather than wrap the count to 0,
 * which would let a claim live handles use be recycled for another name. */
static void test_claim_refuses_wrapped_refs(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "wrapped-refs");
	shmlock_options o = {.slots = 1};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(path, &o, &s), 0);
	if (!s)
		return;
	size_t i = 99, j = 99;
	CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "jobs", 1, &i), 0);
	struct shm_dir_entry *d = s->tables[SHM_SLOT_DIRECTORY].base;
	atomic_store(&d[0].refs, UINT32_MAX);
	CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "jobs", 1, &j), SHMLOCK_EMALFORMED);
	CHECK(atomic_load(&d[0].refs) == UINT32_MAX);
	CHECK_RC(shm_claim(s, SHM_OWNER_SLOTS, "other", 1, &j), SHMLOCK_ETABLEFULL);
	atomic_store(&d[0].refs, 1);
	CHECK_RC(shm_release_claim(s, SHM_OWNER_SLOTS, i), 0);
	CHECK(atomic_load(&d[0].state) == 0);
	shmlock_close(s);
	CHECK_RC(shmlock_remove(path), 0);
}

/* A fresh claim under a new name starts the entry's contention counters
 * at zero; another claim of the same name keeps them (as shm in Go). */
static void test_stats_reset_by_fresh_claim(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "stats-reset");
	shmlock_options o = {0};
	o.slots = 1;
	o.upgrades = 1;
	shmlock_segment *s;
	CHECK_RC(shmlock_create(path, &o, &s), 0);
	static const int kinds[] = {SHM_OWNER_SLOTS, SHM_UPGRADES};
	for (int k = 0; k < 2; k++) {
		size_t a, again, b;
		CHECK_RC(shm_claim(s, kinds[k], "a", 0, &a), 0);
		struct shm_lock_stats *st = shm_lock_stats(s, kinds[k], a);
		CHECK(st != NULL);
		if (!st)
			break;
		shm_stats_wait(st, shm_now_ns(), true);
		CHECK_RC(shm_claim(s, kinds[k], "a", 0, &again), 0);
		CHECK(again == a && atomic_load(&st->contended) == 1);
		CHECK_RC(shm_release_claim(s, kinds[k], a), 0);
		CHECK_RC(shm_release_claim(s, kinds[k], a), 0);
		CHECK_RC(shm_claim(s, kinds[k], "b", 0, &b), 0);
		CHECK(b == a);
		CHECK(atomic_load(&st->contended) == 0 && atomic_load(&st->timeouts) == 0);
		CHECK_RC(shm_release_claim(s, kinds[k], b), 0);
	}
	CHECK_RC(shmlock_close(s), 0);
	CHECK_RC(shmlock_remove(path), 0);
}

/* Table sizes far past their limits are refused (SHMLOCK_ELIMIT) with
 * the default claim references, whose count is derived from the slots and
 * upgrades: that sum must not overflow on the way (undefined in C). */
static void test_huge_counts(void)
{
	static const int64_t huge[] = {INT64_MAX, INT64_MAX / 2 + 1, INT64_MAX / 4 + 1, (int64_t)1 << 21};
	for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
		for (int which = 0; which < 3; which++) {
			char path[256];
			check_temp_path(path, sizeof path, "huge-count");
			shmlock_options o = {0};
			if (which != 1)
				o.slots = huge[i];
			if (which != 0)
				o.upgrades = huge[i];
			shmlock_segment *s = NULL;
			CHECK_RC(shmlock_create(path, &o, &s), SHMLOCK_ELIMIT);
			CHECK(access(path, F_OK) != 0);
		}
	}
}

static void *set_ready_later(void *arg)
{
	struct timespec ts = {0, 30 * 1000000};
	nanosleep(&ts, NULL);
	int fd = open((const char *)arg, O_WRONLY);
	uint32_t ready = SHM_READY;
	CHECK(fd >= 0 && pwrite(fd, &ready, 4, SHM_OFF_MUTABLE) == 4);
	close(fd);
	return NULL;
}

/* shmlock_remove removes only the file it checked: a file put at the path
 * between its check and the removal of the name (another process's new
 * segment, say) stays, and the call says so (it unlinked the path, whatever
 * it named by then). */
static char replace_path[128];

static void replace_at_path(void)
{
	char other[160];
	snprintf(other, sizeof other, "%s.other", replace_path);
	int fd = open(other, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	CHECK(fd >= 0 && write(fd, "x", 1) == 1);
	close(fd);
	CHECK(rename(other, replace_path) == 0);
}

static void test_remove_leaves_replacement(void)
{
	check_temp_path(replace_path, sizeof replace_path, "replace");
	shmlock_options o = {0};
	shmlock_segment *seg = NULL;
	CHECK_RC(shmlock_create(replace_path, &o, &seg), 0);
	if (seg)
		shmlock_close(seg);
	shm_test_hook_before_unlink = replace_at_path;
	CHECK_RC(shmlock_remove(replace_path), SHMLOCK_EFILECHANGED);
	shm_test_hook_before_unlink = NULL;
	struct stat st;
	CHECK(lstat(replace_path, &st) == 0 && st.st_size == 1); /* the replacement */
	CHECK(unlink(replace_path) == 0);
	/* And the plain case leaves no file aside. */
	CHECK_RC(shmlock_create(replace_path, &o, &seg), 0);
	if (seg)
		shmlock_close(seg);
	CHECK_RC(shmlock_remove(replace_path), 0);
	CHECK(lstat(replace_path, &st) != 0 && errno == ENOENT);
}

/* Opening a FIFO or a device runs its driver's open, which may do things of
 * its own: what is not a regular file is refused before it is opened. A
 * FIFO's reader never sees a writer come and go (POLLHUP once it has gone),
 * and the kernel reports no other open of it than an O_PATH open (of which
 * kernels since 6.5 report nothing). Before, shmlock_open opened the path
 * O_RDWR|O_NONBLOCK and refused the file after: the reader saw POLLHUP, and
 * inotify an IN_OPEN and an IN_CLOSE_WRITE (an IN_CLOSE_NOWRITE for
 * shmlock_remove and read-only opens). */
static int open_events(const char *path, int which)
{
	int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	CHECK(in >= 0 && inotify_add_watch(in, path, IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE) >= 0);
	shmlock_segment *s = NULL;
	shmlock_options ro = {.flags = SHMLOCK_READ_ONLY};
	switch (which) {
	case 0: {
		int fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		CHECK(fd >= 0);
		close(fd);
		break;
	}
	case 1:
		CHECK_RC(shmlock_open(path, NULL, &s), SHMLOCK_ENOTREGULAR);
		break;
	case 2:
		CHECK_RC(shmlock_open(path, &ro, &s), SHMLOCK_ENOTREGULAR);
		break;
	case 3:
		CHECK_RC(shmlock_open_or_create(path, NULL, &s), SHMLOCK_ENOTREGULAR);
		break;
	case 4:
		CHECK_RC(shmlock_remove(path), SHMLOCK_ENOTREGULAR);
		break;
	}
	/* The masks of the events, one bit per kind. */
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	int kinds = 0;
	ssize_t n = read(in, buf, sizeof buf);
	for (ssize_t off = 0; n > 0 && off + (ssize_t)sizeof(struct inotify_event) <= n;) {
		const struct inotify_event *ev = (const struct inotify_event *)(const void *)(buf + off);
		kinds |= (int)ev->mask;
		off += (ssize_t)(sizeof *ev + ev->len);
	}
	close(in);
	return kinds;
}

static void test_fifo_and_device_not_opened(void)
{
	char fifo[256], dev[256];
	check_temp_path(fifo, sizeof fifo, "fifo");
	check_temp_path(dev, sizeof dev, "device");
	CHECK(mkfifo(fifo, 0600) == 0);
	const char *paths[2] = {fifo, dev};
	int npaths = 1;
	if (mknod(dev, S_IFCHR | 0600, makedev(1, 3)) == 0) /* /dev/null's numbers */
		npaths = 2;
	for (int i = 0; i < npaths; i++) {
		int type_only = open_events(paths[i], 0);
		for (int which = 1; which <= 4; which++) {
			int got = open_events(paths[i], which);
			if (got != type_only) {
				fprintf(stderr, "%s: call %d: inotify events %#x, want %#x (an O_PATH open's)\n", paths[i], which, got,
				        type_only);
				CHECK(got == type_only);
			}
		}
	}
	int reader = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	CHECK(reader >= 0);
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_open(fifo, NULL, &s), SHMLOCK_ENOTREGULAR);
	struct pollfd pfd = {.fd = reader, .events = POLLIN};
	CHECK(poll(&pfd, 1, 0) >= 0 && !(pfd.revents & POLLHUP)); /* no writer came and went */
	close(reader);
	unlink(fifo);
	unlink(dev);
}

/* A remover killed with the name aside leaves a hidden name that says who
 * it was and from where the file came (FORMAT.md), for shm.RecoverLeftovers:
 * .shmlock-rm-<pid>-<start>-ns<ns>-<nonce>-<name>, ns its PID namespace.
 * Before, it was .shmlock-rm-<pid>-<seconds><nanoseconds>, and then had no
 * ns<ns>-, which let a recovery of another PID namespace judge the
 * remover by a pid that there means another process or none. */
static void die_aside(const char *aside)
{
	(void)aside;
	raise(SIGKILL);
}

static void test_remover_killed_aside(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "killed-remover");
	shmlock_segment *seg = NULL;
	CHECK_RC(shmlock_create(path, NULL, &seg), 0);
	if (seg)
		shmlock_close(seg);
	pid_t child = fork();
	if (child == 0) {
		shm_test_hook_aside = die_aside;
		shmlock_remove(path);
		_exit(3); /* not reached */
	}
	int status;
	CHECK(child > 0 && waitpid(child, &status, 0) == child && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	CHECK(access(path, F_OK) != 0);
	char prefix[64];
	snprintf(prefix, sizeof prefix, ".shmlock-rm-%d-", (int)child);
	const char *base = strrchr(path, '/') + 1;
	DIR *d = opendir("/dev/shm");
	CHECK(d != NULL);
	int found = 0;
	for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		found++;
		/* <start>-ns<ns>-<nonce>-<name> */
		const char *p = e->d_name + strlen(prefix);
		size_t digits = strspn(p, "0123456789");
		CHECK(digits > 0 && p[digits] == '-');
		p += digits + 1;
		char ns[32];
		struct stat st;
		CHECK(stat("/proc/self/ns/pid", &st) == 0);
		snprintf(ns, sizeof ns, "ns%llu-", (unsigned long long)st.st_ino);
		CHECK(strncmp(p, ns, strlen(ns)) == 0);
		p += strlen(ns);
		size_t hex = strspn(p, "0123456789abcdef");
		CHECK(hex > 0 && p[hex] == '-' && strcmp(p + hex + 1, base) == 0);
		char aside[512];
		snprintf(aside, sizeof aside, "/dev/shm/%s", e->d_name);
		CHECK(unlink(aside) == 0);
	}
	if (d)
		closedir(d);
	CHECK(found == 1);
}

/* A ready timeout too long to add to the clock waits (Go's deadline
 * saturates): the open of a segment whose creator sets the ready word a
 * little later succeeds, where a wrapped deadline (undefined in C) had
 * long passed and the open failed at once with SHMLOCK_ENOTREADY. */
static void test_ready_timeout_saturates(void)
{
	char path[256];
	check_temp_path(path, sizeof path, "ready-forever");
	shmlock_options small = {.slots = 1, .upgrades = -1, .txn_records = -1, .txn_arena_bytes = -1,
	                         .lockmgr_entries = -1, .data_bytes = -1};
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(path, &small, &s), 0);
	if (!s)
		return;
	atomic_store(&s->hdr->ready, 0); /* a creator still writing */
	CHECK_RC(shmlock_close(s), 0);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, set_ready_later, path) == 0);
	shmlock_options o = {.ready_timeout_ns = INT64_MAX};
	s = NULL;
	CHECK_RC(shmlock_open(path, &o, &s), 0);
	pthread_join(t, NULL);
	if (s)
		CHECK_RC(shmlock_close(s), 0);
	CHECK_RC(shmlock_remove(path), 0);
}

/* The full-file-system tests' segment: 1 MiB of data area alone, four
 * times the tmpfs they make it in, whose first pages still hold the few a
 * sparse segment's header and directories touch. */
#define BIG_DATA (1 << 20)
#define FULL_TMPFS (256 << 10)
#define SKIP_STATUS 77 /* a child that may not have namespaces of its own */
#define TEST_PAGE 4096   /* a page, or a part of one where pages are larger */

static const shmlock_options big_options = {.data_bytes = BIG_DATA};

static bool write_proc(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	bool ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
	if (fd >= 0)
		close(fd);
	return ok;
}

/* own_mounts makes this forked (single-threaded) process root of a user and
 * mount namespace of its own, every mount private, so that the tmpfs it
 * mounts (mount_tmpfs) no other process sees and goes with it. A user
 * namespace needs no privilege; SKIP_STATUS only where the kernel refuses
 * one or its capabilities (EPERM, EACCES; ENOSPC at a limit of 0; EINVAL
 * without them). */
static int own_mounts(void)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
		fprintf(stderr, "unshare: %s\n", strerror(errno));
		return errno == EPERM || errno == ENOSPC || errno == EINVAL ? SKIP_STATUS : 1;
	}
	char map[64];
	snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
	bool ok = write_proc("/proc/self/uid_map", map);
	snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
	ok = ok && write_proc("/proc/self/setgroups", "deny") && write_proc("/proc/self/gid_map", map);
	if (!ok || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		fprintf(stderr, "entering the namespaces: %s\n", strerror(errno));
		return errno == EPERM || errno == EACCES ? SKIP_STATUS : 1;
	}
	return 0;
}

static int mount_tmpfs(const char *dir, long size)
{
	char opts[64];
	snprintf(opts, sizeof opts, "size=%ld,mode=0700", size);
	if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
		fprintf(stderr, "mounting a tmpfs on %s: %s\n", dir, strerror(errno));
		return errno == EPERM || errno == EACCES ? SKIP_STATUS : 1;
	}
	return 0;
}

/* fill_data claims the whole data area as one region and writes each of
 * its pages, more than the file system has room for: on a sparse file
 * that raises SIGBUS once the file system is full. */
static void fill_data(shmlock_segment *s)
{
	void *p = NULL;
	int rc = shmlock_data(s, "end", BIG_DATA, &p);
	if (rc) {
		fprintf(stderr, "shmlock_data: %s\n", shmlock_strerror(rc));
		return;
	}
	for (size_t i = 0; i < BIG_DATA; i += TEST_PAGE)
		((volatile char *)p)[i] = 1;
}

/* check_no_space reports, in a child, a create or open that should have
 * failed for want of room: 0 if it did (SHMLOCK_ENOSPACE, errno ENOSPC). */
static int check_no_space(const char *what, int rc, shmlock_segment *s)
{
	if (rc == 0) {
		fill_data(s);
		fprintf(stderr, "%s made a segment larger than its file system, and wrote all its data area\n", what);
		return 1;
	}
	if (rc != SHMLOCK_ENOSPACE || shmlock_errno() != ENOSPC) {
		fprintf(stderr, "%s = %d (%s), errno %d; want SHMLOCK_ENOSPACE, ENOSPC\n", what, rc, shmlock_strerror(rc),
		        shmlock_errno());
		return 1;
	}
	return 0;
}

/* The names in dir, hidden ones too: how many there are. */
static int count_names(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

/* no_proc_child: a segment made while /proc was there, opened once /proc
 * is covered (an empty tmpfs over it): the open of the checked file
 * through /proc/self/fd cannot be made, and shmlock_open says so with
 * SHMLOCK_ENOPROCFS, never SHMLOCK_ENOENT (which shmlock_open_or_create
 * would take for "create it"). */
static int no_proc_child(const char *dir)
{
	int rc = own_mounts();
	if (rc || (rc = mount_tmpfs(dir, 4L << 20)) != 0)
		return rc;
	char path[512];
	snprintf(path, sizeof path, "%s/seg", dir);
	shmlock_options small = {.slots = 1};
	shmlock_segment *s = NULL;
	if ((rc = shmlock_create(path, &small, &s)) != 0) {
		fprintf(stderr, "shmlock_create: %s\n", shmlock_strerror(rc));
		return 1;
	}
	shmlock_close(s);
	if (mount("tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV, "size=4k") != 0) {
		fprintf(stderr, "covering /proc: %s\n", strerror(errno));
		return errno == EPERM || errno == EACCES ? SKIP_STATUS : 1;
	}
	s = NULL;
	rc = shmlock_open(path, NULL, &s);
	if (rc != SHMLOCK_ENOPROCFS) {
		fprintf(stderr, "shmlock_open without /proc: %d (%s), want SHMLOCK_ENOPROCFS\n", rc, shmlock_strerror(rc));
		return 1;
	}
	rc = shmlock_open_or_create(path, NULL, &s);
	if (rc != SHMLOCK_ENOPROCFS) {
		fprintf(stderr, "shmlock_open_or_create without /proc: %d (%s), want SHMLOCK_ENOPROCFS\n", rc, shmlock_strerror(rc));
		return 1;
	}
	return 0;
}

static int create_full_child(const char *dir)
{
	int rc = own_mounts();
	if (rc || (rc = mount_tmpfs(dir, FULL_TMPFS)) != 0)
		return rc;
	char path[512];
	snprintf(path, sizeof path, "%s/seg", dir);
	shmlock_segment *s = NULL;
	rc = shmlock_create(path, &big_options, &s);
	if ((rc = check_no_space("shmlock_create", rc, s)) != 0)
		return rc;
	int n = count_names(dir);
	if (n != 0) {
		fprintf(stderr, "%d files left in %s after a create that failed\n", n, dir);
		return 1;
	}
	return 0;
}

/* copy_sparse writes the pages of src that are not all zero into a new
 * file dst of src's size, the others left holes: the file a build that
 * only sized its segments made. */
static bool copy_sparse(const char *src, const char *dst)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	int out = open(dst, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	struct stat st;
	bool ok = in >= 0 && out >= 0 && fstat(in, &st) == 0 && ftruncate(out, st.st_size) == 0;
	static const char zero[TEST_PAGE];
	char page[TEST_PAGE];
	for (off_t off = 0; ok && off < st.st_size; off += TEST_PAGE) {
		ssize_t n = pread(in, page, sizeof page, off);
		ok = n > 0 && (memcmp(page, zero, (size_t)n) == 0 || pwrite(out, page, (size_t)n, off) == n);
	}
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return ok;
}

static int open_sparse_child(const char *dir)
{
	char full[512], small[512], sparse[512];
	snprintf(full, sizeof full, "%s/full", dir);
	snprintf(small, sizeof small, "%s/small", dir);
	snprintf(sparse, sizeof sparse, "%s/small/seg", dir);
	int rc = own_mounts();
	if (rc || (rc = mount_tmpfs(dir, 4 << 20)) != 0)
		return rc;
	if (mkdir(small, 0700) != 0 || (rc = mount_tmpfs(small, FULL_TMPFS)) != 0)
		return rc ? rc : 1;
	shmlock_segment *s = NULL;
	if ((rc = shmlock_create(full, &big_options, &s)) != 0) {
		fprintf(stderr, "shmlock_create: %s\n", shmlock_strerror(rc));
		return 1;
	}
	shmlock_close(s);
	if (!copy_sparse(full, sparse)) {
		fprintf(stderr, "copying %s sparse: %s\n", full, strerror(errno));
		return 1;
	}
	s = NULL;
	rc = shmlock_open(sparse, NULL, &s);
	return check_no_space("shmlock_open", rc, s);
}

/* run_with_own_mounts runs child in a forked process with namespaces of
 * its own (own_mounts), given an empty directory to mount on. */
static void run_with_own_mounts(int (*child)(const char *dir), const char *what)
{
	char dir[] = "/tmp/shmlock-ctest-mounts-XXXXXX";
	if (!mkdtemp(dir)) {
		CHECK(!"mkdtemp");
		return;
	}
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0)
		_exit(child(dir));
	int st = 0;
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
	if (WIFSIGNALED(st)) {
		fprintf(stderr, "%s: the child died of signal %d (%s)\n", what, WTERMSIG(st), strsignal(WTERMSIG(st)));
		check_failures++;
	} else if (WEXITSTATUS(st) == SKIP_STATUS) {
		fprintf(stderr, "%s: ", what);
		CHECK_SKIP("no user and mount namespace of its own here");
	} else {
		CHECK(WEXITSTATUS(st) == 0);
	}
	CHECK(rmdir(dir) == 0);
}

/* A create on a full file system fails with SHMLOCK_ENOSPACE (errno ENOSPC)
 * and leaves no file: the segment's memory is reserved before it has a
 * name. A segment that was only sized got it, and a SIGBUS later. */
static void test_create_on_full_fs(void) { run_with_own_mounts(create_full_child, "create on a full tmpfs"); }

/* A writable open of a sparse segment (made by a build that only sized
 * the file) reserves its memory, and on a full file system fails with
 * SHMLOCK_ENOSPACE rather than let a first write to a page raise SIGBUS. */
static void test_open_sparse_on_full_fs(void) { run_with_own_mounts(open_sparse_child, "open of a sparse segment on a full tmpfs"); }

static int64_t allocated(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (int64_t)st.st_blocks * 512 : -1;
}

/* A new segment has all its memory; a sparse one gets it from a writable
 * open, not from a read-only one, which may not write. */
static void test_no_proc(void) { run_with_own_mounts(no_proc_child, "open without /proc"); }

static void test_memory_reserved(void)
{
	char full[256], sparse[256];
	check_temp_path(full, sizeof full, "reserved");
	check_temp_path(sparse, sizeof sparse, "sparse");
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(full, &big_options, &s), 0);
	if (!s)
		return;
	int64_t size = (int64_t)s->size;
	shmlock_close(s);
	CHECK(allocated(full) >= size);
	CHECK(copy_sparse(full, sparse));
	int64_t before = allocated(sparse);
	CHECK(before > 0 && before < size);
	shmlock_options ro = {.flags = SHMLOCK_READ_ONLY};
	s = NULL;
	CHECK_RC(shmlock_open(sparse, &ro, &s), 0);
	if (s)
		shmlock_close(s);
	CHECK(allocated(sparse) == before);
	s = NULL;
	CHECK_RC(shmlock_open(sparse, NULL, &s), 0);
	if (s)
		shmlock_close(s);
	CHECK(allocated(sparse) >= size);
	CHECK_RC(shmlock_remove(sparse), 0);
	CHECK_RC(shmlock_remove(full), 0);
}

/* vm_size is this process's address space in bytes (VmSize of
 * /proc/self/status), 0 if unknown. */
static unsigned long long vm_size(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return 0;
	char line[256];
	unsigned long long kb = 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmSize: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return kb << 10;
}

/* In a child whose address space may grow no more (RLIMIT_AS at what it
 * uses): open and create fail with SHMLOCK_ENOMEM, errno ENOMEM (Go's
 * shm.ErrNoMemory), and the create leaves no file; 0 if so. */
static int no_address_space_child(const char *path, const char *fresh)
{
	struct rlimit lim;
	unsigned long long vm = vm_size();
	if (vm == 0 || getrlimit(RLIMIT_AS, &lim) != 0)
		return 2;
	lim.rlim_cur = vm;
	if (setrlimit(RLIMIT_AS, &lim) != 0)
		return 2;
	int bad = 0;
	shmlock_segment *s = NULL;
	shm_sys_error(0); /* an errno left over must not pass for the mapping's */
	int rc = shmlock_open(path, NULL, &s);
	if (rc != SHMLOCK_ENOMEM || shmlock_errno() != ENOMEM) {
		fprintf(stderr, "shmlock_open = %d (%s), errno %d; want SHMLOCK_ENOMEM, ENOMEM\n", rc, shmlock_strerror(rc), shmlock_errno());
		bad = 1;
	}
	shm_sys_error(0);
	rc = shmlock_create(fresh, &big_options, &s);
	if (rc != SHMLOCK_ENOMEM || shmlock_errno() != ENOMEM) {
		fprintf(stderr, "shmlock_create = %d (%s), errno %d; want SHMLOCK_ENOMEM, ENOMEM\n", rc, shmlock_strerror(rc), shmlock_errno());
		bad = 1;
	}
	if (access(fresh, F_OK) == 0) {
		fprintf(stderr, "shmlock_create left %s\n", fresh);
		bad = 1;
	}
	return bad;
}

/* A mapping that fails for want of address space is SHMLOCK_ENOMEM with
 * errno ENOMEM, as Go's shm.ErrNoMemory wraps ENOMEM; it was SHMLOCK_ESYS. */
static void test_map_without_address_space(void)
{
	char path[256], fresh[256];
	check_temp_path(path, sizeof path, "nomem");
	check_temp_path(fresh, sizeof fresh, "nomem-new");
	shmlock_segment *s = NULL;
	CHECK_RC(shmlock_create(path, &big_options, &s), 0);
	if (!s)
		return;
	shmlock_close(s);
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0)
		_exit(no_address_space_child(path, fresh));
	int st = 0;
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (access(fresh, F_OK) == 0)
		unlink(fresh);
	CHECK_RC(shmlock_remove(path), 0);
}

int main(void)
{
	RUN(test_golden_owner_slots);
	RUN(test_failed_claim_moves_generation);
	RUN(test_golden_upgrades);
	RUN(test_golden_lockmgr_txn);
	RUN(test_golden_regions);
	RUN(test_reboot_and_claims);
	RUN(test_reboot_marks_txn);
	RUN(test_reboot_leaves_word_after_tiny_arena);
	RUN(test_bad_inputs);
	RUN(test_create_refuses_hidden_names);
	RUN(test_create_read_only_refused);
	RUN(test_round_trip);
	RUN(test_dead_claimant);
	RUN(test_dead_holder_use0_recycled);
	RUN(test_claim_fate_by_holders);
	RUN(test_open_gives_claim_its_mode);
	RUN(test_reboot_mid_claim_recounts);
	RUN(test_claim_refuses_wrapped_refs);
	RUN(test_stats_reset_by_fresh_claim);
	RUN(test_huge_counts);
	RUN(test_ready_timeout_saturates);
	RUN(test_remove_leaves_replacement);
	RUN(test_create_on_full_fs);
	RUN(test_open_sparse_on_full_fs);
	RUN(test_memory_reserved);
	RUN(test_map_without_address_space);
	RUN(test_no_proc);
	RUN(test_fifo_and_device_not_opened);
	RUN(test_remover_killed_aside);
	return CHECK_DONE();
}
