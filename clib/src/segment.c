/* segment.c: opening, creating, closing and removing segments, as package
 * shm does (shm.Open, Create, OpenOrCreate, Close, Remove), the header's
 * validation (layout.Validate), CRC-32C, and the rewrite of recorded
 * identities after a reboot (shm/reboot.go).
 *
 * A segment is published complete: Create writes an unnamed file
 * (O_TMPFILE), sizes it with its memory reserved (reserve), writes the
 * header with the ready word last and only then links it under its name,
 * so an opener finds no file or a whole one.
 * An opener validates a private copy of the header, read with pread before
 * mapping, and takes the tables from that copy: the mapped header's
 * immutable part is never trusted after the check.
 *
 * Lifetime: the segment holds references (refs): one of its own, dropped by
 * shmlock_close, and one per lock handle (shm_seg_get/shm_seg_put). The
 * mapping lives until the last is dropped, so a handle's release after the
 * segment's close still releases in the file, as in Go.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define DEFAULT_DIR "/dev/shm"
#define CACHE_LINE 64
#define PAGE 4096
#define OFF_MUTABLE SHM_OFF_MUTABLE
#define OFF_CHECKSUM (SHM_OFF_MUTABLE + 4)
#define OFF_OWNERS_BOOT (SHM_OFF_MUTABLE + 16)
#define RESERVED_START 72
#define TABLES_OFF SHM_TABLES_OFF
#define FLAG_GROUP_ACCESS 1u
#define DEFAULT_READY_TIMEOUT_NS (2 * INT64_C(1000000000))

/* Limits (layout/tables.go). */
#define MAX_UPGRADE_READERS (1 << 12)
#define MAX_TOTAL_SIZE (UINT64_C(1) << 40)

/* Entry sizes and count limits by kind (layout/tables.go). */
static const uint32_t entry_sizes[SHM_TABLE_COUNT + 1] = {
	0, 32, 64, 64, 64, 128, 64, 256, 16, 16, 64, 64, 64,
};
static const uint64_t max_counts[SHM_TABLE_COUNT + 1] = {
	0,
	1 << 20,                       /* owner slots */
	1 << 20,                       /* slot directory */
	1 << 20,                       /* upgrades */
	1 << 20,                       /* upgrade directory */
	1 << 20,                       /* txn records */
	(UINT64_C(1) << 36) / 64,      /* txn arena units */
	1 << 20,                       /* lock manager */
	1 << 24,                       /* upgrade readers */
	1 << 22,                       /* claim refs */
	1 << 16,                       /* region directory */
	(UINT64_C(1) << 36) / 64,      /* data units */
	4 << 20,                       /* lock stats: one per slot, upgrade, lockmgr entry, txn record */
};

/* The tables with a lock_stats entry per entry, in the stats table's order. */
static const int stats_kinds[] = {SHM_OWNER_SLOTS, SHM_UPGRADES, SHM_LOCKMGR, SHM_TXN_RECORDS};

/* Defaults of layout.Options.WithDefaults. */
#define DEFAULT_SLOTS 64
#define DEFAULT_UPGRADES 16
#define DEFAULT_TXN_RECORDS 16
#define DEFAULT_TXN_ARENA_BYTES (256 << 10)
#define DEFAULT_LOCKMGR_ENTRIES 64
#define DEFAULT_UPGRADE_READERS 32
#define DEFAULT_DATA_BYTES (64 << 10)
#define DEFAULT_DATA_REGIONS 32
#define MIN_DEFAULT_CLAIM_REFS 16

/* ------------------------------------------------------------- CRC-32C */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1; /* Castagnoli, reflected */
		crc_table[i] = c;
	}
}

uint32_t shm_crc32c(const void *buf, size_t n)
{
	pthread_once(&crc_once, crc_init);
	const uint8_t *p = buf;
	uint32_t c = 0xffffffffu;
	while (n--)
		c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffffu;
}

/* ------------------------------------------------------------- header */

static uint32_t le32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) & ~(a - 1); }

/* Validates the first n bytes of a segment file of file_size bytes as
 * layout.Validate does, in its order, and fills out[1..12] with the table
 * descriptors. The ready word is not checked. */
int shm_validate(const uint8_t *h, size_t n, uint64_t file_size, struct shm_table_desc out[SHM_TABLE_COUNT + 1])
{
	if (n < 8)
		return SHMLOCK_ETRUNCATED;
	if (memcmp(h, SHM_MAGIC, 8) != 0)
		return SHMLOCK_EBADMAGIC;
	if (n < SHM_HEADER_SIZE || file_size < SHM_HEADER_SIZE)
		return SHMLOCK_ETRUNCATED;
	if (le32(h + 8) != SHM_VERSION)
		return SHMLOCK_EVERSION;
	if (le32(h + 12) != SHM_HEADER_SIZE)
		return SHMLOCK_EMALFORMED;
	uint64_t total = le64(h + 16);
	if (total > MAX_TOTAL_SIZE)
		return SHMLOCK_ELIMIT;
	if (total < SHM_HEADER_SIZE || total % PAGE != 0)
		return SHMLOCK_EMALFORMED;
	if (total != file_size)
		return SHMLOCK_ESIZE;
	if (le32(h + 64) != SHM_TABLE_COUNT)
		return SHMLOCK_EMALFORMED;
	if (le32(h + 68) & ~FLAG_GROUP_ACCESS)
		return SHMLOCK_EMALFORMED;
	if (!all_zero(h + RESERVED_START, TABLES_OFF - RESERVED_START))
		return SHMLOCK_EMALFORMED;
	uint64_t prev_end = SHM_HEADER_SIZE;
	for (int k = 1; k <= SHM_TABLE_COUNT; k++) {
		const uint8_t *d = h + TABLES_OFF + (k - 1) * 32;
		struct shm_table_desc t = {le32(d), le32(d + 4), le64(d + 8), le64(d + 16), le64(d + 24)};
		if (t.kind != (uint32_t)k)
			return SHMLOCK_EMALFORMED; /* layout.ErrUnknownTable */
		if (t.entry_size != entry_sizes[k])
			return SHMLOCK_EMALFORMED;
		if (t.count > max_counts[k])
			return SHMLOCK_ELIMIT;
		if (t.offset % CACHE_LINE != 0)
			return SHMLOCK_ETABLERANGE;
		uint64_t size = t.count * t.entry_size; /* both bounded: no overflow */
		if (t.offset > total || size > total - t.offset)
			return SHMLOCK_ETABLERANGE;
		if (t.offset < prev_end)
			return SHMLOCK_ETABLEOVERLAP;
		if (t.reserved != 0)
			return SHMLOCK_EMALFORMED;
		out[k] = t;
		prev_end = t.offset + size;
	}
	uint64_t up = out[SHM_UPGRADES].count, rd = out[SHM_UPGRADE_READERS].count;
	if ((up == 0 && rd != 0) || (up != 0 && (rd % up != 0 || rd / up > MAX_UPGRADE_READERS)))
		return SHMLOCK_EMALFORMED;
	uint64_t locks = 0;
	for (size_t i = 0; i < sizeof stats_kinds / sizeof stats_kinds[0]; i++)
		locks += out[stats_kinds[i]].count;
	if (out[SHM_LOCK_STATS].count != locks)
		return SHMLOCK_EMALFORMED;
	/* A directory's entry i is the claim of its table's entry i, and the
	 * claims index each by the other's count: a shorter directory would
	 * have them read and write past it (NULL, or the next table). */
	if (out[SHM_SLOT_DIRECTORY].count != out[SHM_OWNER_SLOTS].count ||
	    out[SHM_UPGRADE_DIRECTORY].count != out[SHM_UPGRADES].count)
		return SHMLOCK_EMALFORMED;
	if (!all_zero(h + TABLES_OFF + SHM_TABLE_COUNT * 32, (SHM_DESC_ROOM - SHM_TABLE_COUNT) * 32))
		return SHMLOCK_EMALFORMED; /* layout.ErrUnknownTable */
	if (le32(h + OFF_CHECKSUM) != shm_crc32c(h, OFF_MUTABLE))
		return SHMLOCK_ECHECKSUM;
	return 0;
}

/* --------------------------------------------------------------- paths */

/* Lexically cleans a path as Go's filepath.Clean (the path is not empty). */
static void clean_path(char *p)
{
	bool rooted = p[0] == '/';
	size_t n = strlen(p), w = rooted ? 1 : 0, r = w, dotdot = w;
	while (r < n) {
		if (p[r] == '/') {
			r++;
		} else if (p[r] == '.' && (r + 1 == n || p[r + 1] == '/')) {
			r++;
		} else if (p[r] == '.' && p[r + 1] == '.' && (r + 2 == n || p[r + 2] == '/')) {
			r += 2;
			if (w > dotdot) {
				w--;
				while (w > dotdot && p[w] != '/')
					w--;
			} else if (!rooted) {
				if (w > 0)
					p[w++] = '/';
				p[w++] = '.';
				p[w++] = '.';
				dotdot = w;
			}
		} else {
			if ((rooted && w != 1) || (!rooted && w != 0))
				p[w++] = '/';
			for (; r < n && p[r] != '/'; r++)
				p[w++] = p[r];
		}
	}
	if (w == 0)
		p[w++] = '.';
	p[w] = 0;
}

/* shm.ResolvePath: a name without a slash is a file in /dev/shm. */
static int resolve_path(const char *name, char **out)
{
	if (!name || !*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return SHMLOCK_EBADPATH;
	size_t n = strlen(name);
	char *p;
	if (!strchr(name, '/')) {
		p = malloc(sizeof DEFAULT_DIR + 1 + n);
		if (!p)
			return SHMLOCK_ENOMEM;
		sprintf(p, "%s/%s", DEFAULT_DIR, name);
	} else {
		if (name[n - 1] == '/')
			return SHMLOCK_EBADPATH;
		p = strdup(name);
		if (!p)
			return SHMLOCK_ENOMEM;
		clean_path(p);
	}
	*out = p;
	return 0;
}

/* ------------------------------------------------------- access checks */

static bool in_group(gid_t gid)
{
	if (getegid() == gid)
		return true;
	int n = getgroups(0, NULL);
	if (n <= 0)
		return false;
	gid_t *g = calloc((size_t)n, sizeof *g);
	if (!g)
		return false;
	n = getgroups(n, g);
	bool found = false;
	for (int i = 0; i < n && !found; i++)
		found = g[i] == gid;
	free(g);
	return found;
}

/* shm's checkAccess. */
static int check_access(const struct stat *st, unsigned flags)
{
	mode_t perm = st->st_mode & 0777;
	if (st->st_uid != geteuid() && !(flags & SHMLOCK_ALLOW_FOREIGN_OWNER)) {
		if (!(flags & SHMLOCK_GROUP_ACCESS) || !in_group(st->st_gid) || (perm & 060) != 060)
			return SHMLOCK_EFOREIGNOWNER;
	}
	if ((perm & 007) && !(flags & SHMLOCK_ALLOW_OTHERS_ACCESS))
		return SHMLOCK_EPERMISSIVE;
	if ((perm & 070) && !(flags & (SHMLOCK_GROUP_ACCESS | SHMLOCK_ALLOW_OTHERS_ACCESS)))
		return SHMLOCK_EPERMISSIVE;
	return 0;
}

static int pid_namespace(uint64_t *ino)
{
	struct stat st;
	if (stat("/proc/self/ns/pid", &st) != 0)
		return shm_sys_error(errno);
	*ino = (uint64_t)st.st_ino;
	return 0;
}

/* ------------------------------------------------------------ lifetime */

static shmlock_segment *seg_new(int fd, char *path)
{
	shmlock_segment *seg = calloc(1, sizeof *seg);
	if (!seg)
		return NULL;
	seg->fd = fd;
	seg->path = path;
	atomic_init(&seg->closed, false);
	atomic_init(&seg->refs, 1);
	pthread_mutex_init(&seg->registry_mu, NULL);
	return seg;
}

/* Maps the tables of the validated descriptors into seg->tables. */
static void seg_bind(shmlock_segment *seg, uint8_t *base, size_t size, const struct shm_table_desc *d)
{
	seg->base = base;
	seg->size = size;
	seg->hdr = (struct shm_header *)base;
	for (int k = 1; k <= SHM_TABLE_COUNT; k++) {
		seg->tables[k].count = d[k].count;
		seg->tables[k].entry_size = d[k].entry_size;
		seg->tables[k].base = d[k].count ? base + d[k].offset : NULL;
	}
}

void shm_seg_get(shmlock_segment *seg) { atomic_fetch_add(&seg->refs, 1); }

void shm_seg_put(shmlock_segment *seg)
{
	if (atomic_fetch_sub(&seg->refs, 1) != 1)
		return;
	if (seg->base)
		munmap(seg->base, seg->size);
	if (seg->fd >= 0)
		close(seg->fd);
	pthread_mutex_destroy(&seg->registry_mu);
	free(seg->path);
	free(seg);
}

/* ------------------------------------------------------------- reboots */

static a64 *owners_boot_word(shmlock_segment *seg, int i)
{
	return (a64 *)(void *)&seg->hdr->owners_boot[8 * i];
}

static bool owners_boot_is(shmlock_segment *seg, const uint8_t boot[16])
{
	uint64_t w[2] = {atomic_load(owners_boot_word(seg, 0)), atomic_load(owners_boot_word(seg, 1))};
	return memcmp(w, boot, 16) == 0;
}

bool shm_owner_alive(shmlock_segment *seg, uint64_t identity)
{
	uint8_t boot[16];
	if (shm_boot_id(boot) != 0 || !owners_boot_is(seg, boot))
		return false;
	return shm_alive(identity);
}

/* Sets the stale bit of w by CAS from the word read (a live owner's newer
 * word is kept); 0 stays 0. */
static void stale_word(a64 *w)
{
	uint64_t old = atomic_load(w);
	while (old != 0 && !(old & SHM_STALE_BIT) && !atomic_compare_exchange_weak(w, &old, old | SHM_STALE_BIT))
		;
}

/* Where package txn's tables record identities (layout/txn.go): each
 * record's owner; in the arena's control area the barrier's leader and the
 * owner slots of its two locks; then the pin rows, each opening with its
 * process's identity. */
#define TXN_RECORD_OWNER 8
#define TXN_CTL_AREA 128
#define TXN_LEADER 0
#define TXN_ALLOC_LOCK 64
#define TXN_BARRIER_LOCK 96
#define TXN_MAX_PIN_ROWS 64

static a64 *word_at(void *base, uint64_t off)
{
	return (a64 *)(void *)((uint8_t *)base + off);
}

/* shm's markTxnStale. */
static void mark_txn_stale(shmlock_segment *seg)
{
	struct shm_table *recs = &seg->tables[SHM_TXN_RECORDS], *arena = &seg->tables[SHM_TXN_ARENA];
	for (uint64_t i = 0; recs->base && i < recs->count; i++)
		stale_word(word_at(recs->base, i * recs->entry_size + TXN_RECORD_OWNER));
	uint64_t bytes = arena->count * arena->entry_size;
	if (!arena->base || bytes < TXN_CTL_AREA)
		return; /* no room for the control area: package txn never used it */
	stale_word(word_at(arena->base, TXN_LEADER));
	stale_word(word_at(arena->base, TXN_ALLOC_LOCK));
	stale_word(word_at(arena->base, TXN_BARRIER_LOCK));
	if (recs->count == 0)
		return;
	uint64_t row_size = (8 + 4 * (recs->count + 1) + 63) / 64 * 64; /* layout.TxnPinRows */
	uint64_t rows = bytes / 2 / row_size;
	if (rows > TXN_MAX_PIN_ROWS)
		rows = TXN_MAX_PIN_ROWS;
	/* Only rows after the control area: half an arena under twice its
	 * size holds a row that would end past the arena, in the next table. */
	if (rows > (bytes - TXN_CTL_AREA) / row_size)
		rows = (bytes - TXN_CTL_AREA) / row_size;
	for (uint64_t r = 0; r < rows; r++)
		stale_word(word_at(arena->base, TXN_CTL_AREA + r * row_size));
}

/* The identity words of every table (shm's markStale, table by table). */
static void mark_stale(shmlock_segment *seg)
{
	uint64_t n;
	struct shm_owner_slot *slots = shm_table_of(seg, SHM_OWNER_SLOTS, &n);
	struct shm_dir_entry *sdir = seg->tables[SHM_SLOT_DIRECTORY].base;
	for (uint64_t i = 0; i < n; i++) {
		stale_word(&slots[i].pid);
		stale_word(&sdir[i].claimer);
	}
	struct shm_upgrade_entry *ups = shm_table_of(seg, SHM_UPGRADES, &n);
	struct shm_dir_entry *udir = seg->tables[SHM_UPGRADE_DIRECTORY].base;
	for (uint64_t i = 0; i < n; i++) {
		stale_word(&ups[i].writer);
		stale_word(&ups[i].upgrader);
		stale_word(&udir[i].claimer);
	}
	struct shm_lockmgr_entry *lm = shm_table_of(seg, SHM_LOCKMGR, &n);
	for (uint64_t i = 0; i < n; i++) {
		stale_word(&lm[i].lock);
		for (int h = 0; h < 2; h++) {
			stale_word(&lm[i].holders[h].process);
			stale_word(&lm[i].holders[h].companion);
		}
	}
	struct shm_reader_record *rr = shm_table_of(seg, SHM_UPGRADE_READERS, &n);
	for (uint64_t i = 0; i < n; i++)
		stale_word(&rr[i].owner);
	struct shm_claim_ref *refs = shm_table_of(seg, SHM_CLAIM_REFS, &n);
	for (uint64_t i = 0; i < n; i++)
		stale_word(&refs[i].owner);
	mark_txn_stale(seg);
}

/* shm's recoverFromReboot: the first writable open of a boot marks every
 * recorded identity stale, frees the registry lock (recounting the claims
 * first if a process of the previous boot held it), and only then records
 * this boot; a flock serialises recoverers (the kernel drops it if one dies). */
static int recover_from_reboot(shmlock_segment *seg)
{
	uint8_t boot[16];
	int rc = shm_boot_id(boot);
	if (rc != 0)
		return rc;
	if (owners_boot_is(seg, boot))
		return 0;
	while (flock(seg->fd, LOCK_EX) != 0)
		if (errno != EINTR)
			return shm_sys_error(errno);
	if (!owners_boot_is(seg, boot)) {
		mark_stale(seg);
		/* A process of the previous boot held the directory's lock and may
		 * have stopped between a claim's or a release's two counts: recount,
		 * as a takeover from a dead holder does, or a reference no record
		 * names stays for ever. Nobody of this boot changes the directory
		 * before the boot is recorded. */
		if (atomic_load(&seg->hdr->registry) != 0)
			shm_recount_refs(seg);
		atomic_store(&seg->hdr->registry, 0);
		atomic_fetch_add(&seg->hdr->registry_gen, 1);
		uint64_t w[2];
		memcpy(w, boot, 16);
		atomic_store(owners_boot_word(seg, 0), w[0]);
		atomic_store(owners_boot_word(seg, 1), w[1]);
	}
	flock(seg->fd, LOCK_UN);
	return 0;
}

/* ---------------------------------------------------------------- open */

static int open_error(int err)
{
	switch (err) {
	case ELOOP:
		return SHMLOCK_ESYMLINK;
	case EISDIR:
		return SHMLOCK_ENOTREGULAR;
	}
	return shm_sys_error(err);
}

/* open_regular opens the regular file at p for reading (and writing unless
 * ro), as shm's fsys.OpenNoFollow: a symlink is SHMLOCK_ESYMLINK, anything
 * else that is not a regular file SHMLOCK_ENOTREGULAR, and neither is ever
 * opened for real. Opening a device or a FIFO runs its driver's open, which
 * may do things of its own (a tape rewinds, a FIFO's reader sees a writer
 * come and go): so p is first opened O_PATH, which runs no driver's open
 * and, with O_NOFOLLOW, gives the symlink itself; and a regular file is
 * opened again through /proc/self/fd/N, a magic link to the very inode the
 * O_PATH descriptor holds, so that no file put at p in between is opened
 * instead. The magic link must be followed (O_NOFOLLOW refuses it: ELOOP);
 * its open checks the caller's permissions on the inode as an open of p
 * does. Where /proc is not mounted, or is not procfs (its self/fd/N is not
 * the checked file), SHMLOCK_ENOPROCFS: never ENOENT, which
 * shmlock_open_or_create would take for a missing segment. *st is the
 * file's status. */
static int open_regular(const char *p, bool ro, int *out, struct stat *st)
{
	int pfd = open(p, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0)
		return open_error(errno);
	if (fstat(pfd, st) != 0) {
		int err = errno;
		close(pfd);
		return shm_sys_error(err);
	}
	if (!S_ISREG(st->st_mode)) {
		close(pfd);
		return S_ISLNK(st->st_mode) ? SHMLOCK_ESYMLINK : SHMLOCK_ENOTREGULAR;
	}
	char proc[40];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", pfd);
	/* O_NOCTTY cannot matter for a regular file; it stays in case the
	 * type check above is ever loosened. */
	int fd = open(proc, (ro ? O_RDONLY : O_RDWR) | O_NOCTTY | O_CLOEXEC);
	int err = errno;
	close(pfd);
	if (fd < 0)
		return err == ENOENT ? SHMLOCK_ENOPROCFS : shm_sys_error(err);
	struct stat now;
	if (fstat(fd, &now) != 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
		close(fd);
		return SHMLOCK_ENOPROCFS;
	}
	*out = fd;
	return 0;
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = {ns / 1000000000, ns % 1000000000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* shm's readCompleteHeader: checks the file and reads its header once the
 * ready word is set, waiting at most the ready timeout. */
static int read_complete_header(int fd, const shmlock_options *o, uint8_t h[SHM_HEADER_SIZE], uint64_t *size)
{
	int64_t timeout = o->ready_timeout_ns > 0 ? o->ready_timeout_ns : DEFAULT_READY_TIMEOUT_NS;
	int64_t now = shm_now_ns();
	int64_t deadline = timeout > INT64_MAX - now ? INT64_MAX : now + timeout; /* saturated, as Go's */
	struct shm_table_desc d[SHM_TABLE_COUNT + 1];
	for (int64_t backoff = 1000000;; backoff = backoff * 2 < 50000000 ? backoff * 2 : 50000000) {
		struct stat st;
		if (fstat(fd, &st) != 0)
			return shm_sys_error(errno);
		if (!S_ISREG(st.st_mode))
			return SHMLOCK_ENOTREGULAR;
		int rc = check_access(&st, o->flags);
		if (rc)
			return rc;
		size_t n = 0;
		while (n < SHM_HEADER_SIZE) {
			ssize_t r = pread(fd, h + n, SHM_HEADER_SIZE - n, (off_t)n);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				return shm_sys_error(errno);
			if (r == 0)
				break;
			n += (size_t)r;
		}
		if (n == SHM_HEADER_SIZE && le32(h + OFF_MUTABLE) == SHM_READY) {
			*size = (uint64_t)st.st_size;
			return 0;
		}
		/* Only a complete, valid header is worth waiting for. */
		rc = shm_validate(h, n, (uint64_t)st.st_size, d);
		if (rc)
			return rc;
		if (shm_now_ns() > deadline)
			return SHMLOCK_ENOTREADY;
		sleep_ns(backoff);
	}
}

/* Reserve's tries of an allocation a signal interrupted (tmpfs of older
 * kernels gives up, undoing it, rather than restart): one that signals
 * keep interrupting fails with EINTR rather than spin. */
#define MAX_RESERVE_ATTEMPTS 16

/* reserve allocates the memory of the file's first size bytes, extending
 * it to size if it is shorter (shm's fsys.Reserve): a file sized by
 * ftruncate alone is sparse, and on tmpfs a page gets its memory only when
 * first touched, so a full file system or memory cgroup raised SIGBUS at
 * that access instead of an error here (SHMLOCK_ENOSPACE, errno kept for
 * shmlock_errno). Blocks already allocated are kept, so reserving a file
 * others use changes none of its bytes; a file whose blocks already cover
 * size is left alone after one fstat. *unsupported is set, and 0 returned,
 * on a file system without fallocate.
 *
 * Not posix_fallocate: where fallocate is missing, glibc's reads a byte
 * of each block and writes a zero where it read one, which on a segment
 * in use could overwrite a word another process has just set. */
static int reserve(int fd, uint64_t size, bool *unsupported)
{
	*unsupported = false;
	struct stat st;
	if (fstat(fd, &st) != 0)
		return shm_sys_error(errno);
	if ((uint64_t)st.st_size >= size && (uint64_t)st.st_blocks * 512 >= size) /* st_blocks: 512-byte units */
		return 0;
	for (int attempt = 1;; attempt++) {
		if (fallocate(fd, 0, 0, (off_t)size) == 0)
			return 0;
		int err = errno;
		if (err == EINTR && attempt < MAX_RESERVE_ATTEMPTS)
			continue;
		if (err == EOPNOTSUPP || err == ENOSYS) {
			*unsupported = true;
			return 0;
		}
		shm_sys_error(err);
		return err == ENOSPC || err == EDQUOT || err == ENOMEM ? SHMLOCK_ENOSPACE : SHMLOCK_ESYS;
	}
}

/* The error of a mapping of a segment that failed (errno err, kept for
 * shmlock_errno): SHMLOCK_ENOMEM where this process has no room for it,
 * its address-space limit (RLIMIT_AS) or vm.max_map_count reached, as
 * shm.ErrNoMemory. */
static int map_error(int err)
{
	shm_sys_error(err);
	return err == ENOMEM ? SHMLOCK_ENOMEM : SHMLOCK_ESYS;
}

static int open_fd(shmlock_segment *seg, const shmlock_options *o)
{
	uint8_t h[SHM_HEADER_SIZE];
	uint64_t size = 0;
	struct shm_table_desc d[SHM_TABLE_COUNT + 1];
	int rc = read_complete_header(seg->fd, o, h, &size);
	if (rc)
		return rc;
	if ((rc = shm_validate(h, sizeof h, size, d)) != 0)
		return rc;
	if (!(o->flags & SHMLOCK_ALLOW_FOREIGN_PIDNS)) {
		uint64_t ns = 0;
		if ((rc = pid_namespace(&ns)) != 0)
			return rc;
		if (ns != le64(h + 48))
			return SHMLOCK_EFOREIGNPIDNS;
	}
	bool ro = o->flags & SHMLOCK_READ_ONLY;
	uint64_t total = le64(h + 16);
	bool unsupported;
	/* A segment of a build that only sized its file is sparse: reserved
	 * now, as shm.Open does, and only now that its header has passed, so
	 * a file that is no segment is never written. */
	if (!ro && (rc = reserve(seg->fd, total, &unsupported)) != 0)
		return rc;
	void *m = mmap(NULL, total, ro ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
	if (m == MAP_FAILED)
		return map_error(errno);
	seg_bind(seg, m, total, d);
	seg->read_only = ro;
	if (!ro && (rc = recover_from_reboot(seg)) != 0)
		return rc; /* seg_put unmaps */
	return 0;
}

static const shmlock_options zero_options;

/* The flags this version knows. A caller built against a later header may
 * set one it added (a check it asks for, say): dropped silently, the
 * segment would open without it, so an unknown bit is refused instead. */
#define KNOWN_FLAGS \
	(SHMLOCK_GROUP_ACCESS | SHMLOCK_ALLOW_FOREIGN_OWNER | SHMLOCK_ALLOW_OTHERS_ACCESS | \
	 SHMLOCK_ALLOW_FOREIGN_PIDNS | SHMLOCK_READ_ONLY)

/* options_of is the options an open or create works with (NULL: the
 * defaults), or NULL if opts sets a flag this version does not know. */
static const shmlock_options *options_of(const shmlock_options *opts)
{
	if (opts == NULL)
		return &zero_options;
	return (opts->flags & ~(unsigned)KNOWN_FLAGS) == 0 ? opts : NULL;
}

static int do_open(const char *path, const shmlock_options *o, shmlock_segment **out)
{
	char *p;
	int rc = resolve_path(path, &p);
	if (rc)
		return rc;
	int fd;
	struct stat st;
	if ((rc = open_regular(p, o->flags & SHMLOCK_READ_ONLY, &fd, &st)) != 0) {
		free(p);
		return rc;
	}
	shmlock_segment *seg = seg_new(fd, p);
	if (!seg) {
		close(fd);
		free(p);
		return SHMLOCK_ENOMEM;
	}
	if ((rc = open_fd(seg, o)) != 0) {
		int err = shmlock_errno();
		shm_seg_put(seg);
		if (rc == SHMLOCK_ESYS || rc == SHMLOCK_ENOSPACE || rc == SHMLOCK_ENOMEM)
			shm_sys_error(err);
		return rc;
	}
	*out = seg;
	return 0;
}

SHM_EXPORT int shmlock_open(const char *path, const shmlock_options *opts, shmlock_segment **out)
{
	const shmlock_options *o = options_of(opts);
	if (!out || !o)
		return SHMLOCK_EINVAL;
	return do_open(path, o, out);
}

/* -------------------------------------------------------------- create */

/* The table sizes of layout.Options.WithDefaults, as entry counts of each
 * kind (layout.Plan). */
static int plan(const shmlock_options *o, struct shm_table_desc d[SHM_TABLE_COUNT + 1], uint64_t *total)
{
#define DEF(v, def) ((v) == 0 ? (int64_t)(def) : (v))
#define POS(v) ((v) < 0 ? 0 : (v))
	int64_t slots = DEF(o->slots, DEFAULT_SLOTS), ups = DEF(o->upgrades, DEFAULT_UPGRADES);
	int64_t txn = DEF(o->txn_records, DEFAULT_TXN_RECORDS);
	int64_t arena = DEF(o->txn_arena_bytes, DEFAULT_TXN_ARENA_BYTES);
	int64_t lm = DEF(o->lockmgr_entries, DEFAULT_LOCKMGR_ENTRIES);
	int64_t readers = DEF(o->upgrade_readers, DEFAULT_UPGRADE_READERS);
	int64_t refs = o->claim_refs;
	if (refs == 0) {
		/* A count past its table's limit fails on that table, before the
		 * claim refs': capped there, the sum cannot overflow (Go's wraps). */
		int64_t cap = (int64_t)max_counts[SHM_OWNER_SLOTS] + 1;
		refs = 2 * ((POS(slots) < cap ? POS(slots) : cap) + (POS(ups) < cap ? POS(ups) : cap));
		if (refs < MIN_DEFAULT_CLAIM_REFS)
			refs = MIN_DEFAULT_CLAIM_REFS;
	}
	int64_t data = DEF(o->data_bytes, DEFAULT_DATA_BYTES);
	int64_t regions = o->data_regions;
	if (regions == 0 && data > 0)
		regions = DEFAULT_DATA_REGIONS;
	slots = POS(slots), ups = POS(ups), txn = POS(txn), arena = POS(arena), lm = POS(lm);
	readers = POS(readers), refs = POS(refs), data = POS(data), regions = POS(regions);
#undef DEF
#undef POS
	if (readers > MAX_UPGRADE_READERS)
		return SHMLOCK_ELIMIT;
	int64_t nreaders = ups > 0 && ups <= (int64_t)max_counts[SHM_UPGRADES] ? readers * ups : 0;
	int64_t counts[SHM_TABLE_COUNT + 1] = {
		0, slots, slots, ups, ups, txn, arena / 64 + (arena % 64 != 0), lm, nreaders, refs, regions,
		data / 64 + (data % 64 != 0), 0,
	};
	for (size_t i = 0; i < sizeof stats_kinds / sizeof stats_kinds[0]; i++)
		if ((uint64_t)counts[stats_kinds[i]] <= max_counts[stats_kinds[i]])
			counts[SHM_LOCK_STATS] += counts[stats_kinds[i]];
	uint64_t off = SHM_HEADER_SIZE;
	for (int k = 1; k <= SHM_TABLE_COUNT; k++) {
		if ((uint64_t)counts[k] > max_counts[k])
			return SHMLOCK_ELIMIT;
		d[k] = (struct shm_table_desc){(uint32_t)k, entry_sizes[k], (uint64_t)counts[k], off, 0};
		off = align_up(off + d[k].count * d[k].entry_size, CACHE_LINE);
	}
	*total = align_up(off, PAGE);
	return *total > MAX_TOTAL_SIZE ? SHMLOCK_ELIMIT : 0;
}

/* layout.Encode: the immutable part and its checksum, and the owners' boot
 * (the creator's). The ready word is stored by the caller, last. */
static void encode(uint8_t *b, uint64_t total, const struct shm_table_desc *d, const uint8_t boot[16],
                   uint64_t pidns, uint32_t flags)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	memset(b, 0, OFF_MUTABLE);
	memcpy(b, SHM_MAGIC, 8);
	put32(b + 8, SHM_VERSION);
	put32(b + 12, SHM_HEADER_SIZE);
	put64(b + 16, total);
	put64(b + 24, (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec);
	memcpy(b + 32, boot, 16);
	put64(b + 48, pidns);
	put64(b + 56, shm_self());
	put32(b + 64, SHM_TABLE_COUNT);
	put32(b + 68, flags);
	for (int k = 1; k <= SHM_TABLE_COUNT; k++) {
		uint8_t *p = b + TABLES_OFF + (k - 1) * 32;
		put32(p, d[k].kind);
		put32(p + 4, d[k].entry_size);
		put64(p + 8, d[k].count);
		put64(p + 16, d[k].offset);
	}
	put32(b + OFF_CHECKSUM, shm_crc32c(b, OFF_MUTABLE));
	memcpy(b + OFF_OWNERS_BOOT, boot, 16); /* the file is private yet: plain stores */
}

/* The hidden names' beginnings: a pending file's (fsys.PendingPrefix), a
 * removal's (shm's asidePrefix). */
#define PENDING_PREFIX ".shmlock-init-"
#define ASIDE_PREFIX ".shmlock-rm-"

bool shm_test_no_tmpfile;
void (*shm_test_hook_before_link)(void);

/* fsys.CreatePending: an unnamed file in dir with exactly mode; where the
 * file system has no O_TMPFILE, a hidden name removed again after linking,
 * .shmlock-init-<pid>-<start>-ns<ns>-<nonce> (fsys.PendingName: pid and
 * start in decimal are this process's identity, ns in decimal its PID
 * namespace, nonce in hex tells its names apart), so that once its creator
 * is dead (killed before linking it) another process of its namespace can
 * prove it so and remove the file (shm.RecoverLeftovers); a process of
 * another namespace, where the pid means another process or none, leaves
 * it alone. */
static int create_pending(const char *dir, mode_t mode, char **tmp)
{
	*tmp = NULL;
	int fd = -1;
	errno = EOPNOTSUPP; /* as a file system without O_TMPFILE says */
	if (!shm_test_no_tmpfile)
		fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, mode);
	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		uint64_t self = shm_self(), ns = 0; /* for gcc: pid_namespace sets it or fails */
		int rc = pid_namespace(&ns);
		if (rc != 0)
			return rc;
		for (int attempt = 0; fd < 0 && attempt <= 10; attempt++) {
			char *name = malloc(strlen(dir) + 96);
			if (!name)
				return SHMLOCK_ENOMEM;
			sprintf(name, "%s/" PENDING_PREFIX "%u-%llu-ns%llu-%llx", dir, (unsigned)(self & SHM_PID_MASK),
			        (unsigned long long)(self >> SHM_PID_BITS & SHM_START_MASK), (unsigned long long)ns,
			        (unsigned long long)shm_random64());
			fd = open(name, O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC, mode);
			if (fd >= 0)
				*tmp = name;
			else
				free(name);
			if (fd < 0 && errno != EEXIST)
				break;
		}
	}
	if (fd < 0)
		return shm_sys_error(errno);
	if (fchmod(fd, mode) != 0) {
		int err = errno;
		close(fd);
		if (*tmp) {
			unlink(*tmp);
			free(*tmp);
		}
		return shm_sys_error(err);
	}
	return fd;
}

static int publish(int fd, char *tmp, const char *path)
{
	int r;
	if (!tmp) {
		char proc[64];
		snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
		r = linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
	} else {
		r = link(tmp, path);
	}
	int err = errno;
	if (tmp) {
		unlink(tmp);
		free(tmp);
	}
	if (r == 0)
		return 0;
	return err == EEXIST ? SHMLOCK_EEXIST : shm_sys_error(err);
}

static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return strdup(".");
	if (slash == path)
		return strdup("/");
	return strndup(path, (size_t)(slash - path));
}

/* shm's hiddenName: the base name of p begins as the hidden names of
 * pending files and of removals do. Leftover recovery takes a file under
 * such a name for a leftover, so no segment may be made under one. */
static bool hidden_name(const char *p)
{
	const char *slash = strrchr(p, '/'), *base = slash ? slash + 1 : p;
	return !strncmp(base, PENDING_PREFIX, strlen(PENDING_PREFIX)) || !strncmp(base, ASIDE_PREFIX, strlen(ASIDE_PREFIX));
}

static int do_create(const char *path, const shmlock_options *o, shmlock_segment **out)
{
	char *p;
	int rc = resolve_path(path, &p);
	if (rc)
		return rc;
	if (hidden_name(p)) {
		free(p);
		return SHMLOCK_EBADPATH;
	}
	/* As shm.Create: read-only is for inspection, which must not make a
	 * segment (open_or_create's create), and a creator writes the file. */
	if (o->flags & SHMLOCK_READ_ONLY) {
		free(p);
		return SHMLOCK_EREADONLY;
	}
	struct shm_table_desc d[SHM_TABLE_COUNT + 1];
	uint64_t total = 0, pidns = 0;
	uint8_t boot[16];
	if ((rc = plan(o, d, &total)) != 0 || (rc = shm_boot_id(boot)) != 0 || (rc = pid_namespace(&pidns)) != 0) {
		free(p);
		return rc;
	}
	bool group = o->flags & SHMLOCK_GROUP_ACCESS;
	char *dir = dir_of(p), *tmp;
	if (!dir) {
		free(p);
		return SHMLOCK_ENOMEM;
	}
	int fd = create_pending(dir, group ? 0660 : 0600, &tmp);
	free(dir);
	if (fd < 0) {
		free(p);
		return fd;
	}
	shmlock_segment *seg = seg_new(fd, p);
	if (!seg) {
		close(fd);
		if (tmp) {
			unlink(tmp);
			free(tmp);
		}
		free(p);
		return SHMLOCK_ENOMEM;
	}
	bool unsupported;
	void *m = MAP_FAILED;
	if ((rc = reserve(fd, total, &unsupported)) != 0)
		goto fail;
	/* Without fallocate the file is sparse, as before: the best this file
	 * system offers. */
	if (unsupported && ftruncate(fd, (off_t)total) != 0) {
		rc = shm_sys_error(errno);
		goto fail;
	}
	if ((m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		rc = map_error(errno);
		goto fail;
	}
	seg_bind(seg, m, total, d);
	encode(m, total, d, boot, pidns, group ? FLAG_GROUP_ACCESS : 0);
	atomic_store(&seg->hdr->ready, SHM_READY); /* last: the header is complete */
	if (shm_test_hook_before_link)
		shm_test_hook_before_link();
	rc = publish(fd, tmp, p);
	tmp = NULL;
	if (rc)
		goto fail;
	seg->creator = true;
	*out = seg;
	return 0;
fail:;
	int err = shmlock_errno();
	if (tmp) {
		unlink(tmp);
		free(tmp);
	}
	shm_seg_put(seg);
	if (rc == SHMLOCK_ESYS || rc == SHMLOCK_ENOSPACE || rc == SHMLOCK_ENOMEM)
		shm_sys_error(err);
	return rc;
}

SHM_EXPORT int shmlock_create(const char *path, const shmlock_options *opts, shmlock_segment **out)
{
	const shmlock_options *o = options_of(opts);
	if (!out || !o)
		return SHMLOCK_EINVAL;
	return do_create(path, o, out);
}

/* Exactly one of several processes racing creates; the others open. */
SHM_EXPORT int shmlock_open_or_create(const char *path, const shmlock_options *opts, shmlock_segment **out)
{
	const shmlock_options *o = options_of(opts);
	if (!out || !o)
		return SHMLOCK_EINVAL;
	for (;;) {
		int rc = do_open(path, o, out);
		if (rc != SHMLOCK_ESYS || shmlock_errno() != ENOENT)
			return rc;
		rc = do_create(path, o, out);
		if (rc != SHMLOCK_EEXIST)
			return rc;
		/* Another process published between our open and create. */
	}
}

SHM_EXPORT int shmlock_close(shmlock_segment *seg)
{
	if (!seg)
		return SHMLOCK_EINVAL;
	bool was = false;
	if (!atomic_compare_exchange_strong(&seg->closed, &was, true))
		return SHMLOCK_ECLOSED;
	/* A directory change of this process in progress ends first, and so
	 * does every upgrade wait that holds part of a lock (it gives it back). */
	pthread_mutex_lock(&seg->registry_mu);
	pthread_mutex_unlock(&seg->registry_mu);
	shm_wake_watchers(seg);
	shm_seg_put(seg);
	return 0;
}

void (*shm_test_hook_before_unlink)(void);
void (*shm_test_hook_aside)(const char *aside);

#define ASIDE_NAME_MAX 255 /* NAME_MAX: the longest file name of Linux file systems */

/* The 64-bit FNV-1a hash of a name, which a hidden name keeps of a name too
 * long to keep whole. */
static uint64_t name_digest(const char *name)
{
	uint64_t h = UINT64_C(14695981039346656037);
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		h = (h ^ *c) * UINT64_C(1099511628211);
	return h;
}

/* aside_name writes to buf the hidden name shm's moveAside gives the file
 * p: in p's directory, .shmlock-rm-<pid>-<start>-ns<ns>-<nonce>-<name>,
 * where pid and start (decimal) are this process's identity, ns (decimal)
 * its PID namespace, nonce (hex) tells apart the names one process makes,
 * and name is p's base name; or, where that is longer than NAME_MAX (or
 * digest), -<name> is replaced by #<digest>, 16 hex digits of name_digest.
 * A process of its namespace that finds it once this one is dead knows
 * from where it came and that its remover is gone (FORMAT.md;
 * shm.RecoverLeftovers); one of another namespace leaves it alone. */
static int aside_name(char *buf, size_t n, const char *p, bool digest)
{
	const char *slash = strrchr(p, '/');
	int dir = slash ? (int)(slash - p) + 1 : 0;
	const char *base = p + dir;
	uint64_t self = shm_self(), ns = 0; /* for gcc: pid_namespace sets it or fails */
	int rc = pid_namespace(&ns);
	if (rc != 0)
		return rc;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char head[96]; /* at most 73 bytes, and the NUL */
	int h = snprintf(head, sizeof head, ASIDE_PREFIX "%u-%llu-ns%llu-%llx", (unsigned)(self & SHM_PID_MASK),
	                 (unsigned long long)(self >> SHM_PID_BITS & SHM_START_MASK), (unsigned long long)ns,
	                 (unsigned long long)((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec));
	int w;
	if (!digest && (size_t)h + 1 + strlen(base) <= ASIDE_NAME_MAX)
		w = snprintf(buf, n, "%.*s%s-%s", dir, p, head, base);
	else
		w = snprintf(buf, n, "%.*s%s#%016llx", dir, p, head, (unsigned long long)name_digest(base));
	return w < 0 || (size_t)w >= n ? SHMLOCK_EBADPATH : 0;
}

/* unlink_same removes path if it still names the file st describes (shm's
 * unlinkSame): an unlink of the path would remove whatever it names by
 * then (a segment another process made after the checked one was removed,
 * or any file put there). So the name is moved aside first (a rename never
 * follows a symlink or replaces), the moved file compared with the checked
 * one, and only the name this process made removed; another file goes
 * back. */
static int unlink_same(const char *p, const struct stat *st)
{
	char aside[PATH_MAX];
	bool digest = false;
	for (int attempt = 0;; attempt++) {
		int rc = aside_name(aside, sizeof aside, p, digest);
		if (rc)
			return rc;
		if (renameat2(AT_FDCWD, p, AT_FDCWD, aside, RENAME_NOREPLACE) == 0)
			break;
		if (errno == EINVAL || errno == ENOSYS) {
			/* No rename without replacing here: a check right before the
			 * unlink is the narrowest window there is. */
			struct stat now;
			if (lstat(p, &now) != 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino)
				return SHMLOCK_EFILECHANGED;
			return unlink(p) == 0 ? 0 : shm_sys_error(errno);
		}
		if (errno == ENAMETOOLONG && !digest) {
			digest = true; /* a file system whose names are shorter than NAME_MAX */
			continue;
		}
		if (errno != EEXIST || attempt == 10)
			return shm_sys_error(errno);
	}
	if (shm_test_hook_aside)
		shm_test_hook_aside(aside);
	struct stat now;
	if (lstat(aside, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino)
		return unlink(aside) == 0 ? 0 : shm_sys_error(errno);
	if (renameat2(AT_FDCWD, aside, AT_FDCWD, p, RENAME_NOREPLACE) != 0)
		return shm_sys_error(errno); /* the new file stays at aside */
	return SHMLOCK_EFILECHANGED;
}

/* shm.Remove: only a regular file with the magic is removed, and only if
 * the path still names it when its name goes. */
SHM_EXPORT int shmlock_remove(const char *path)
{
	char *p;
	int rc = resolve_path(path, &p);
	if (rc)
		return rc;
	int fd;
	struct stat st;
	if ((rc = open_regular(p, true, &fd, &st)) != 0) {
		free(p);
		return rc;
	}
	uint8_t magic[8];
	ssize_t n = 0;
	if ((n = pread(fd, magic, sizeof magic, 0)) < (ssize_t)sizeof magic)
		rc = SHMLOCK_ETRUNCATED;
	else if (memcmp(magic, SHM_MAGIC, 8) != 0)
		rc = SHMLOCK_EBADMAGIC;
	else {
		if (shm_test_hook_before_unlink)
			shm_test_hook_before_unlink();
		rc = unlink_same(p, &st);
	}
	close(fd);
	free(p);
	return rc;
}
