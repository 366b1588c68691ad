/* segment.c: the C side of segment_test.go.
 *
 *   segment claim PATH        claims slots alpha (use 1) and beta, upgrade
 *                             gamma, regions gocounter (16) and cdata (100);
 *                             prints "slot NAME IDX", "upgrade NAME IDX",
 *                             "data NAME OFF", then "ready", and sleeps until
 *                             killed
 *   segment create PATH       creates PATH with the defaults, claims slot x
 *                             (use 1) and region d (64 bytes, 42 in its first
 *                             word), prints "created" and exits holding them
 *   segment churn PATH N      N rounds of: claim slots shared and own-PID,
 *                             region r-(round%8) (64 bytes), release both
 *                             slots; prints "done N"
 *   segment claims PATH       prints "ready", waits for a line on stdin, then
 *                             for the slot and upgrade tables claims queue,
 *                             jobs (use 1), fuzz and an unnamed entry,
 *                             printing "claim KIND NAME RC INDEX" (KIND 1
 *                             slots, 2 upgrades; NAME - for unnamed), then
 *                             "claimed", waits for another line and releases
 *                             every claim; a release that fails exits 1
 *   segment release PATH KIND INDEX
 *                             releases one reference to entry INDEX of KIND
 *                             (1 slots, 3 upgrades) without having claimed
 *                             it: prints "release RC"
 *   segment remove-dies PATH
 *                             prints "ready", waits for a line on stdin,
 *                             then removes PATH and kills itself (SIGKILL)
 *                             once the name is moved aside, before the file
 *                             is unlinked
 *   segment create-dies PATH
 *                             creates PATH as on a file system without
 *                             O_TMPFILE and kills itself (SIGKILL) once the
 *                             segment is complete under its hidden name,
 *                             before it is linked under PATH
 *   segment regions PATH NAME...
 *                             looks each data region NAME up (size 0),
 *                             printing "region NAME RC OFFSET", then claims
 *                             region c-new (64 bytes): "claim RC OFFSET"
 */
#include <signal.h>

#include "helper.h"
#include "internal.h"

static shmlock_segment *open_seg(const char *path)
{
	shmlock_segment *s;
	int rc = shmlock_open(path, NULL, &s);
	if (rc)
		die("open", rc);
	return s;
}

static size_t claim(shmlock_segment *s, int kind, const char *name, uint32_t use)
{
	size_t i;
	int rc = shm_claim(s, kind, name, use, &i);
	if (rc)
		die(name, rc);
	return i;
}

static uint64_t data(shmlock_segment *s, const char *name, size_t size)
{
	void *p;
	int rc = shmlock_data(s, name, size, &p);
	if (rc)
		die(name, rc);
	return (uint64_t)((uint8_t *)p - (uint8_t *)s->tables[SHM_DATA].base);
}

/* claims is clib's replay of shm's FuzzDirectory: the directories' words
 * are whatever the test wrote there. */
static int claims(const char *path)
{
	shmlock_segment *s = open_seg(path);
	say("ready"); /* the test writes the directories now */
	char line[16];
	if (fgets(line, sizeof line, stdin) == NULL)
		return 1;
	static const struct {
		const char *name;
		uint32_t use;
	} tries[] = {{"queue", 0}, {"jobs", 1}, {"fuzz", 0}, {"", 0}};
	const int kinds[] = {SHM_OWNER_SLOTS, SHM_UPGRADES};
	struct {
		int kind;
		size_t index;
	} got[8];
	int n = 0;
	for (int k = 0; k < 2; k++) {
		for (size_t j = 0; j < sizeof tries / sizeof tries[0]; j++) {
			size_t i = 0;
			int rc = shm_claim(s, kinds[k], tries[j].name, tries[j].use, &i);
			say("claim %d %s %d %zu", k + 1, *tries[j].name ? tries[j].name : "-", rc, i);
			if (rc == 0) {
				got[n].kind = kinds[k];
				got[n++].index = i;
			}
		}
	}
	say("claimed");
	if (fgets(line, sizeof line, stdin) == NULL)
		return 1;
	for (int j = 0; j < n; j++) {
		int rc = shm_release_claim(s, got[j].kind, got[j].index);
		if (rc)
			die("release", rc);
	}
	shmlock_close(s);
	return 0;
}

/* regions is clib's replay of layout's FuzzDecodeRegions: the region
 * directory's words are whatever the test wrote there. */
static int regions(const char *path, int n, char **names)
{
	shmlock_segment *s = open_seg(path);
	uint8_t *base = s->tables[SHM_DATA].base;
	for (int j = 0; j < n; j++) {
		void *p = NULL;
		int rc = shmlock_data(s, names[j], 0, &p);
		say("region %s %d %td", names[j], rc, rc == 0 ? (uint8_t *)p - base : (ptrdiff_t)-1);
	}
	void *p = NULL;
	int rc = shmlock_data(s, "c-new", 64, &p);
	say("claim %d %td", rc, rc == 0 ? (uint8_t *)p - base : (ptrdiff_t)-1);
	shmlock_close(s);
	return 0;
}

static void die_aside(const char *aside)
{
	(void)aside;
	raise(SIGKILL);
}

static void die_now(void) { raise(SIGKILL); }

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	const char *cmd = argv[1], *path = argv[2];
	if (!strcmp(cmd, "claim")) {
		shmlock_segment *s = open_seg(path);
		say("slot alpha %zu", claim(s, SHM_OWNER_SLOTS, "alpha", 1));
		say("slot beta %zu", claim(s, SHM_OWNER_SLOTS, "beta", 0));
		say("upgrade gamma %zu", claim(s, SHM_UPGRADES, "gamma", 0));
		say("data gocounter %" PRIu64, data(s, "gocounter", 16));
		say("data cdata %" PRIu64, data(s, "cdata", 100));
		say("ready");
		for (;;)
			pause();
	}
	if (!strcmp(cmd, "remove-dies")) {
		say("ready");
		char line[16];
		if (fgets(line, sizeof line, stdin) == NULL)
			return 1;
		shm_test_hook_aside = die_aside;
		die("remove", shmlock_remove(path)); /* not reached */
	}
	if (!strcmp(cmd, "create-dies")) {
		shm_test_no_tmpfile = true;
		shm_test_hook_before_link = die_now;
		shmlock_segment *s;
		die("create", shmlock_create(path, NULL, &s)); /* not reached */
	}
	if (!strcmp(cmd, "create")) {
		shmlock_segment *s;
		int rc = shmlock_create(path, NULL, &s);
		if (rc)
			die("create", rc);
		claim(s, SHM_OWNER_SLOTS, "x", 1);
		void *p;
		if ((rc = shmlock_data(s, "d", 64, &p)) != 0)
			die("data", rc);
		atomic_store((a64 *)p, 42);
		say("created");
		shmlock_close(s);
		return 0;
	}
	if (!strcmp(cmd, "churn") && argc == 4) {
		shmlock_segment *s = open_seg(path);
		long n = helper_atol(argv[3]);
		char own[32], region[32];
		snprintf(own, sizeof own, "c-%d", (int)getpid());
		for (long r = 0; r < n; r++) {
			size_t a = claim(s, SHM_OWNER_SLOTS, "shared", 1);
			size_t b = claim(s, SHM_OWNER_SLOTS, own, 1);
			if (a == b) {
				fprintf(stderr, "shared and %s at one index %zu\n", own, a);
				return 1;
			}
			snprintf(region, sizeof region, "r-%ld", r % 8);
			data(s, region, 64);
			int rc = shm_release_claim(s, SHM_OWNER_SLOTS, b);
			if (rc == 0)
				rc = shm_release_claim(s, SHM_OWNER_SLOTS, a);
			if (rc)
				die("release", rc);
		}
		say("done %ld", n);
		shmlock_close(s);
		return 0;
	}
	if (!strcmp(cmd, "claims"))
		return claims(path);
	if (!strcmp(cmd, "release") && argc == 5) {
		shmlock_segment *s = open_seg(path);
		say("release %d", shm_release_claim(s, (int)helper_atol(argv[3]), (size_t)helper_atol(argv[4])));
		shmlock_close(s);
		return 0;
	}
	if (!strcmp(cmd, "regions"))
		return regions(path, argc - 3, argv + 3);
	return 2;
}
