/* directory.c: names, the registry lock, the claim directories of owner
 * slots and upgrade mutexes with their claim references (shm/directory.go),
 * and the data regions (shm/data.go, layout/regions.go).
 *
 * Every change of a directory happens under the registry lock: the header
 * word Registry holds the packed identity of the process changing it (0
 * free). Threads of one process first queue on seg->registry_mu, so the
 * word sees one claimant per process; a holder found dead is taken over by
 * one CAS from its identity. A claim or region becomes visible by its State
 * word, stored last, so a claimant that dies before that leaves a free entry.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define CLAIM_TARGET_SHIFT 24
#define REGION_ALIGN 64
#define DATA_UNIT 64

/* Registry lock waiting (shm's registrySpins, registryMaxSleep, registryLivenessStep). */
#define REGISTRY_SPINS 64
#define REGISTRY_MAX_SLEEP_NS 2000000
#define REGISTRY_LIVENESS_STEP 16

/* --------------------------------------------------------------- names */

/* Decodes one UTF-8 sequence as Go does (no overlongs, no surrogates, at
 * most U+10FFFF); returns its length, 0 if invalid. */
static int utf8_decode(const unsigned char *s, size_t n, uint32_t *r)
{
	unsigned char c = s[0];
	if (c < 0x80) {
		*r = c;
		return 1;
	}
	int len;
	uint32_t min;
	if ((c & 0xe0) == 0xc0)
		len = 2, min = 0x80, *r = c & 0x1f;
	else if ((c & 0xf0) == 0xe0)
		len = 3, min = 0x800, *r = c & 0x0f;
	else if ((c & 0xf8) == 0xf0)
		len = 4, min = 0x10000, *r = c & 0x07;
	else
		return 0;
	if ((size_t)len > n)
		return 0;
	for (int i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		*r = *r << 6 | (s[i] & 0x3f);
	}
	if (*r < min || *r > 0x10ffff || (*r >= 0xd800 && *r <= 0xdfff))
		return 0;
	return len;
}

bool shm_name_chars_valid(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint32_t r;
		int l = utf8_decode((const unsigned char *)s + i, n - i, &r);
		if (l == 0 || r < 0x20 || (r >= 0x7f && r <= 0x9f))
			return false;
		i += (size_t)l;
	}
	return true;
}

/* layout.CheckName: 1..40 bytes of valid UTF-8 without control characters. */
static int check_name(const char *name, size_t *len)
{
	if (!name)
		return SHMLOCK_EBADNAME;
	size_t n = strnlen(name, SHM_NAME_LEN + 1);
	if (n == 0 || n > SHM_NAME_LEN || !shm_name_chars_valid(name, n))
		return SHMLOCK_EBADNAME;
	*len = n;
	return 0;
}

int shm_pack_name(const char *name, uint64_t words[5], uint32_t *len)
{
	size_t n;
	int rc = check_name(name, &n);
	if (rc)
		return rc;
	uint8_t b[SHM_NAME_LEN] = {0};
	memcpy(b, name, n);
	memcpy(words, b, sizeof b); /* little-endian host: the words of the format */
	*len = (uint32_t)n;
	return 0;
}

/* The n name bytes of five atomically loaded words. */
static void load_name(a64 w[5], uint8_t out[SHM_NAME_LEN])
{
	for (int i = 0; i < 5; i++) {
		uint64_t v = atomic_load(&w[i]);
		memcpy(out + 8 * i, &v, 8);
	}
}

/* Whether entry e is named name (layout.NameOf(e) == name; a name length
 * over 40 reads as no name). */
static bool dir_named(struct shm_dir_entry *e, const char *name, uint32_t len)
{
	uint32_t n = atomic_load(&e->name_len);
	if (n == 0 || n > SHM_NAME_LEN || n != len)
		return false;
	uint8_t b[SHM_NAME_LEN];
	load_name(e->name, b);
	return memcmp(b, name, n) == 0;
}

/* -------------------------------------------------------- registry lock */

static int registry_lock_for(shmlock_segment *seg, bool release)
{
	pthread_mutex_lock(&seg->registry_mu);
	uint64_t self = shm_self();
	int64_t sleep = 10000;
	for (int attempt = 0;; attempt++) {
		if (!release && shm_closed(seg)) {
			pthread_mutex_unlock(&seg->registry_mu);
			return SHMLOCK_ECLOSED;
		}
		uint64_t holder = atomic_load(&seg->hdr->registry);
		if (holder == 0) {
			if (atomic_compare_exchange_strong(&seg->hdr->registry, &holder, self))
				return 0;
			continue;
		}
		if (attempt % REGISTRY_LIVENESS_STEP == REGISTRY_LIVENESS_STEP - 1 && !shm_owner_alive(seg, holder)) {
			if (atomic_compare_exchange_strong(&seg->hdr->registry, &holder, self)) {
				atomic_fetch_add(&seg->hdr->registry_gen, 1); /* the dead's change is abandoned */
				shm_recount_refs(seg);
				return 0;
			}
			continue;
		}
		if (attempt < REGISTRY_SPINS) {
			sched_yield();
		} else {
			struct timespec ts = {0, sleep};
			nanosleep(&ts, NULL);
			sleep = sleep * 2 < REGISTRY_MAX_SLEEP_NS ? sleep * 2 : REGISTRY_MAX_SLEEP_NS;
		}
	}
}

int shm_registry_lock(shmlock_segment *seg)
{
	if (seg->read_only)
		return SHMLOCK_EREADONLY;
	return registry_lock_for(seg, false);
}

void shm_registry_unlock(shmlock_segment *seg)
{
	atomic_store(&seg->hdr->registry, 0);
	pthread_mutex_unlock(&seg->registry_mu);
}

/* ------------------------------------------------------ claim directories */

static int directory_of(int kind)
{
	switch (kind) {
	case SHM_OWNER_SLOTS:
		return SHM_SLOT_DIRECTORY;
	case SHM_UPGRADES:
		return SHM_UPGRADE_DIRECTORY;
	}
	return 0;
}

static struct shm_dir_entry *dir_entry(shmlock_segment *seg, int dk, uint64_t i)
{
	return (struct shm_dir_entry *)seg->tables[dk].base + i;
}

/* Clears entry i of table kind word by word, so a reader never sees a torn word. */
static void zero_entry(shmlock_segment *seg, int kind, uint64_t i)
{
	struct shm_table *t = &seg->tables[kind];
	a64 *w = (a64 *)(void *)((uint8_t *)t->base + i * t->entry_size);
	for (uint32_t j = 0; j < t->entry_size / 8; j++)
		atomic_store(&w[j], 0);
}

static uint64_t readers_per_upgrade(shmlock_segment *seg)
{
	uint64_t n = seg->tables[SHM_UPGRADES].count;
	return n ? seg->tables[SHM_UPGRADE_READERS].count / n : 0;
}

/* layout.IsUpgradeHandoff: bit 62 with pid field 0. */
static bool upgrade_handoff(uint64_t w)
{
	return (w & (UINT64_C(1) << 62)) && (w & SHM_PID_MASK) == 0;
}

/* layout.UpgradeWriterID: the identity in a Writer word, 0 if it is free
 * or a handoff (the hungry and unique bits are the word's own). */
static uint64_t upgrade_writer_id(uint64_t w)
{
	if (upgrade_handoff(w))
		return 0;
	return w & ~(UINT64_C(1) << 62 | SHM_UPG_WRITER_UNIQUE);
}

static struct shm_reader_record *upgrade_readers(shmlock_segment *seg, uint64_t i, uint64_t *n)
{
	*n = readers_per_upgrade(seg);
	return (struct shm_reader_record *)seg->tables[SHM_UPGRADE_READERS].base + i * *n;
}

/* layout.SlotFree (mark 0) and SlotMarkedFree (mark SHM_SLOT_INCONSISTENT):
 * no holder, no re-entry, the recursion word mark, and for a slot not
 * claimed for pid/tid no token. */
static bool slot_unheld(struct shm_owner_slot *s, uint32_t mark, uint32_t use)
{
	if (atomic_load(&s->pid) != 0 || atomic_load(&s->recursion) != mark)
		return false;
	return use == SHMLOCK_PIDTID + 1 || atomic_load(&s->token) == 0;
}

/* layout.UpgradeFree and UpgradeMarkedFree whatever the inconsistent bit
 * says: no lock bit, upgrade holder, writer (a handoff is free) or shared
 * hold. */
static bool upgrade_unheld(shmlock_segment *seg, struct shm_upgrade_entry *e, uint64_t i)
{
	if (atomic_load(&e->state) & (SHM_UPG_WRITE | SHM_UPG_UPGRADE | SHM_UPG_PENDING))
		return false;
	if (atomic_load(&e->upgrader) != 0)
		return false;
	uint64_t w = atomic_load(&e->writer);
	if (w != 0 && !upgrade_handoff(w))
		return false;
	uint64_t n;
	struct shm_reader_record *r = upgrade_readers(seg, i, &n);
	for (uint64_t j = 0; j < n; j++)
		if (atomic_load(&r[j].count) != 0)
			return false;
	return true;
}

/* shm's upgradeHeldByDead: mutex i is held and every holder is dead: the
 * Writer word's, the Upgrader word's, the owners of the records counting
 * shared holds; each lock bit a dead word's (the upgrade and pending bits,
 * and the unique one beside them, the Upgrader's; the unique bit alone
 * the Writer's), else it is a word in flux or damage. A live word or
 * shared hold (a waiter holding the Writer word too) keeps the claim. The
 * identity words are loaded again after the verdicts (upgrade's
 * diedHolding): a process may let its word go and exit in between. */
static bool upgrade_held_by_dead(shmlock_segment *seg, struct shm_upgrade_entry *e, uint64_t i)
{
	uint32_t st = atomic_load(&e->state);
	uint64_t writer = upgrade_writer_id(atomic_load(&e->writer)), upgrader = atomic_load(&e->upgrader);
	if ((writer != 0 && shm_owner_alive(seg, writer)) || (upgrader != 0 && shm_owner_alive(seg, upgrader)))
		return false;
	if ((st & (SHM_UPG_UPGRADE | SHM_UPG_PENDING)) && upgrader == 0)
		return false;
	if ((st & (SHM_UPG_WRITE | SHM_UPG_UPGRADE)) == SHM_UPG_WRITE && writer == 0)
		return false;
	bool held = writer != 0 || upgrader != 0;
	uint64_t n;
	struct shm_reader_record *r = upgrade_readers(seg, i, &n);
	for (uint64_t j = 0; j < n; j++) {
		if (atomic_load(&r[j].count) == 0)
			continue;
		uint64_t o = atomic_load(&r[j].owner);
		if (o == 0 || shm_owner_alive(seg, o) || atomic_load(&r[j].owner) != o)
			return false; /* a live reader's, or a record in flux */
		held = true;
	}
	return held && upgrade_writer_id(atomic_load(&e->writer)) == writer && atomic_load(&e->upgrader) == upgrader;
}

/* shm's lockFree: the lock of entry i is free and carries nothing its next
 * holder must be told (layout.SlotFree, layout.UpgradeFree), or only dead
 * processes hold it: an owner slot held in pid/tid mode by a dead process
 * (shm's heldByDead: a token-mode lock never writes pid, so a nonzero pid
 * names a pid/tid holder whatever the claim's use says; a slot claimed for
 * token mode is never judged by it, for its token names no process), an
 * upgrade mutex whose holders are all dead (upgrade_held_by_dead). */
static bool lock_free(shmlock_segment *seg, int kind, uint64_t i, uint32_t use)
{
	if (kind == SHM_OWNER_SLOTS) {
		struct shm_owner_slot *s = (struct shm_owner_slot *)seg->tables[kind].base + i;
		uint64_t owner = atomic_load(&s->pid);
		if (owner != 0)
			return use != SHMLOCK_TOKEN + 1 && !shm_owner_alive(seg, owner);
		return slot_unheld(s, 0, use);
	}
	struct shm_upgrade_entry *e = (struct shm_upgrade_entry *)seg->tables[kind].base + i;
	if (!(atomic_load(&e->state) & SHM_UPG_INCONSISTENT) && upgrade_unheld(seg, e, i))
		return true;
	return upgrade_held_by_dead(seg, e, i);
}

/* shm's lockMarked: the lock of entry i is free but marked inconsistent (a
 * holder died with it; a reclaim or a force freed it). Its claim is kept
 * for the next claimant of its name, and taken by a claim only when it
 * finds no other room. */
static bool lock_marked(shmlock_segment *seg, int kind, uint64_t i, uint32_t use)
{
	if (kind == SHM_OWNER_SLOTS)
		return slot_unheld((struct shm_owner_slot *)seg->tables[kind].base + i, SHM_SLOT_INCONSISTENT, use);
	struct shm_upgrade_entry *e = (struct shm_upgrade_entry *)seg->tables[kind].base + i;
	return (atomic_load(&e->state) & SHM_UPG_INCONSISTENT) && upgrade_unheld(seg, e, i);
}

static struct shm_claim_ref *claim_refs(shmlock_segment *seg, uint64_t *n)
{
	return shm_table_of(seg, SHM_CLAIM_REFS, n);
}

static uint32_t claim_target(int kind, uint64_t i) { return (uint32_t)kind << CLAIM_TARGET_SHIFT | (uint32_t)i; }

static void free_ref(struct shm_claim_ref *r)
{
	atomic_store(&r->owner, 0);
	atomic_store(&r->target, 0);
	atomic_store(&r->count, 0);
}

/* forgetRefs: frees every record naming entry i, whose claim goes. */
static void forget_refs(shmlock_segment *seg, int kind, uint64_t i)
{
	uint64_t n;
	struct shm_claim_ref *r = claim_refs(seg, &n);
	uint32_t target = claim_target(kind, i);
	for (uint64_t j = 0; j < n; j++)
		if (atomic_load(&r[j].owner) != 0 && atomic_load(&r[j].target) == target)
			free_ref(&r[j]);
}

/* freeEntry: State 0 first (a half-cleared entry is then merely free), then
 * the records, the table entry (and a mutex's reader records), the entry. */
static void free_entry(shmlock_segment *seg, int kind, int dk, uint64_t i)
{
	atomic_store(&dir_entry(seg, dk, i)->state, SHM_DIR_FREE);
	forget_refs(seg, kind, i);
	zero_entry(seg, kind, i);
	zero_entry(seg, dk, i);
	if (kind == SHM_UPGRADES) {
		uint64_t n = readers_per_upgrade(seg);
		for (uint64_t j = 0; j < n; j++)
			zero_entry(seg, SHM_UPGRADE_READERS, i * n + j);
	}
}

/* recountRefs (shm/directory.go): after taking the registry lock over from
 * a dead holder, sets each claimed entry's Refs to the sum of the Counts of
 * the records naming it. Under the lock the two agree; a holder killed
 * between a claim's (or release's) two counts leaves Refs one too high, a
 * reference no record names. A claim left with none and a free lock is
 * freed, as a release would: also one whose releaser was killed between
 * taking the last reference off and freeing it. Without records there is
 * nothing to recount. */
void shm_recount_refs(shmlock_segment *seg)
{
	uint64_t nrefs;
	struct shm_claim_ref *refs = shm_table_of(seg, SHM_CLAIM_REFS, &nrefs);
	if (!refs || nrefs == 0 || seg->read_only)
		return;
	static const int kinds[] = {SHM_OWNER_SLOTS, SHM_UPGRADES};
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		int kind = kinds[k], dk = directory_of(kind);
		for (uint64_t i = 0; i < seg->tables[kind].count; i++) {
			struct shm_dir_entry *d = dir_entry(seg, dk, i);
			if (atomic_load(&d->state) != SHM_DIR_CLAIMED)
				continue;
			uint32_t target = claim_target(kind, i);
			uint64_t want = 0;
			for (uint64_t j = 0; j < nrefs; j++)
				if (atomic_load(&refs[j].owner) != 0 && atomic_load(&refs[j].target) == target)
					want += atomic_load(&refs[j].count);
			/* Damaged records may count more than Refs holds: the most it
			 * can, never a sum wrapped to (nearly) nothing. */
			if (want > UINT32_MAX)
				want = UINT32_MAX;
			atomic_store(&d->refs, (uint32_t)want);
			if (want == 0 && lock_free(seg, kind, i, atomic_load(&d->use)))
				free_entry(seg, kind, dk, i);
		}
	}
}

/* dropDeadRefs: drops the records of dead processes, subtracting their
 * counts from their targets' Refs (freeing a claim whose last reference
 * goes if its lock is free), never below what live records account for,
 * counting the claimant's reference to pending (not yet recorded; 0 for
 * none) as live. Returns how many it dropped. */
static int drop_dead_refs(shmlock_segment *seg, uint32_t pending)
{
	uint64_t n;
	struct shm_claim_ref *r = claim_refs(seg, &n);
	if (n == 0)
		return 0;
	/* First which records are live (1) and dead (2): a dead process's
	 * references never take those that live records account for
	 * (dropDeadRefs in shm/directory.go). */
	uint8_t *state = calloc(n, 1);
	if (state == NULL)
		return 0; /* nothing dropped: the claim fails as full */
	for (uint64_t j = 0; j < n; j++) {
		uint64_t o = atomic_load(&r[j].owner);
		if (o != 0)
			state[j] = shm_owner_alive(seg, o) ? 1 : 2;
	}
	int dropped = 0;
	for (uint64_t j = 0; j < n; j++) {
		if (state[j] != 2)
			continue;
		uint32_t t = atomic_load(&r[j].target), cnt = atomic_load(&r[j].count);
		int kind = (int)(t >> CLAIM_TARGET_SHIFT);
		uint64_t i = t & ((1u << CLAIM_TARGET_SHIFT) - 1);
		int dk = directory_of(kind);
		if (dk && i < seg->tables[kind].count) {
			struct shm_dir_entry *d = dir_entry(seg, dk, i);
			if (atomic_load(&d->state) == SHM_DIR_CLAIMED) {
				uint64_t live = t == pending; /* the claimant's reference, not yet recorded */
				for (uint64_t l = 0; l < n; l++)
					if (state[l] == 1 && atomic_load(&r[l].target) == t)
						live += atomic_load(&r[l].count);
				uint64_t refs = atomic_load(&d->refs);
				uint64_t droppable = refs - (live < refs ? live : refs);
				uint64_t left = refs - (cnt < droppable ? cnt : droppable);
				atomic_store(&d->refs, (uint32_t)left);
				if (left == 0 && lock_free(seg, kind, i, atomic_load(&d->use)))
					free_entry(seg, kind, dk, i);
			}
		}
		free_ref(&r[j]);
		dropped++;
	}
	free(state);
	return dropped;
}

/* addRef: one more reference of this process to entry i. */
static int add_ref(shmlock_segment *seg, int kind, uint64_t i)
{
	uint64_t n;
	struct shm_claim_ref *r = claim_refs(seg, &n);
	if (n == 0)
		return 0;
	uint32_t target = claim_target(kind, i);
	uint64_t self = shm_self();
	for (;;) {
		struct shm_claim_ref *free = NULL;
		for (uint64_t j = 0; j < n; j++) {
			uint64_t o = atomic_load(&r[j].owner);
			if (o == self && atomic_load(&r[j].target) == target) {
				if (atomic_load(&r[j].count) == UINT32_MAX)
					return SHMLOCK_EMALFORMED; /* damage: one more would wrap */
				atomic_fetch_add(&r[j].count, 1);
				return 0;
			}
			if (o == 0 && !free)
				free = &r[j];
		}
		if (!free && drop_dead_refs(seg, target) > 0)
			continue; /* a dead process's record is free now */
		if (!free)
			return SHMLOCK_ETABLEFULL;
		atomic_store(&free->target, target);
		atomic_store(&free->count, 1);
		atomic_store(&free->owner, self); /* last: the record is taken */
		return 0;
	}
}

/* dropRef: takes this process's reference to entry i off its record;
 * false if it has none. */
static bool drop_ref(shmlock_segment *seg, int kind, uint64_t i)
{
	uint64_t n;
	struct shm_claim_ref *r = claim_refs(seg, &n);
	uint32_t target = claim_target(kind, i);
	uint64_t self = shm_self();
	for (uint64_t j = 0; j < n; j++) {
		if (atomic_load(&r[j].owner) == self && atomic_load(&r[j].target) == target) {
			if (atomic_fetch_sub(&r[j].count, 1) == 1) {
				atomic_store(&r[j].owner, 0);
				atomic_store(&r[j].target, 0);
			}
			return true;
		}
	}
	return false;
}

/* claimEntry: the entry claimed under name with one more reference, or a
 * fresh one (free, or a recycled unreferenced claim whose lock is free, or
 * with take_marked, if there is no other, one whose lock is marked). */
static int claim_entry(shmlock_segment *seg, int kind, int dk, const char *name, uint32_t len,
                       const uint64_t words[5], uint32_t use, bool take_marked, uint64_t *index, bool *fresh)
{
	uint64_t count = seg->tables[kind].count;
	int64_t free = -1, parked = -1, marked = -1;
	for (uint64_t i = 0; i < count; i++) {
		struct shm_dir_entry *e = dir_entry(seg, dk, i);
		uint32_t state = atomic_load(&e->state);
		/* Only a claim is a name's: an entry in a state no claim leaves is
		 * damage, unknown to lookups and releases. */
		bool names = state == SHM_DIR_CLAIMED && len != 0 && dir_named(e, name, len);
		if (state == SHM_DIR_FREE) {
			if (free < 0)
				free = (int64_t)i;
		} else if (!names && atomic_load(&e->refs) == 0 && parked < 0 &&
		           lock_free(seg, kind, i, atomic_load(&e->use))) {
			parked = (int64_t)i; /* recyclable if nothing is free; a damaged entry too, whatever its name */
		} else if (!names && atomic_load(&e->refs) == 0 && take_marked && marked < 0 &&
		           lock_marked(seg, kind, i, atomic_load(&e->use))) {
			marked = (int64_t)i; /* the last resort */
		} else if (names) {
			/* Damage (no segment holds that many claims): one more would wrap
			 * to 0, and a claim live handles use would read as unreferenced,
			 * to be recycled for another name (as shm's claimEntry). */
			if (atomic_load(&e->refs) == UINT32_MAX)
				return SHMLOCK_EMALFORMED;
			uint32_t had = atomic_load(&e->use);
			if (had == 0 && use != 0)
				atomic_store(&e->use, use);
			else if (use != 0 && had != use)
				return SHMLOCK_EUSEMISMATCH;
			atomic_fetch_add(&e->refs, 1);
			*index = i;
			*fresh = false;
			return 0;
		}
	}
	if (parked < 0)
		parked = marked; /* the news of a holder's death is given up for room only */
	if (free < 0 && parked >= 0) {
		free_entry(seg, kind, dk, (uint64_t)parked);
		free = parked;
	}
	if (free < 0)
		return SHMLOCK_ETABLEFULL;
	uint64_t i = (uint64_t)free;
	struct shm_dir_entry *e = dir_entry(seg, dk, i);
	zero_entry(seg, kind, i);
	zero_entry(seg, dk, i);
	/* A free entry has no reference record, unless a releaser was killed
	 * between freeing it and forgetting its records (or damage): a dead
	 * one's would be dropped from the new claim's count. */
	forget_refs(seg, kind, i);
	/* The counters start again with the new claim: they are its name's. */
	shm_stats_reset(shm_lock_stats(seg, kind, i));
	for (int w = 0; w < 5; w++)
		atomic_store(&e->name[w], words[w]);
	atomic_store(&e->name_len, len);
	atomic_store(&e->use, use);
	atomic_store(&e->claimer, shm_self());
	atomic_store(&e->refs, 1);
	atomic_store(&e->state, SHM_DIR_CLAIMED); /* last: the claim is visible */
	*index = i;
	*fresh = true;
	return 0;
}

uint32_t shm_claim_use(shmlock_segment *seg, int kind, size_t index)
{
	int dk = directory_of(kind);
	if (!dk || index >= seg->tables[dk].count)
		return 0;
	struct shm_dir_entry *e = dir_entry(seg, dk, index);
	if (atomic_load(&e->state) != SHM_DIR_CLAIMED)
		return 0;
	return atomic_load(&e->use);
}

/* adopt_done is shm.Segment.AdoptUse's check: 1 (and *rc) if there is
 * nothing to change: the entry is not claimed, records use already, or
 * records another (SHMLOCK_EUSEMISMATCH); 0 if its claim says no use. */
static int adopt_done(struct shm_dir_entry *e, uint32_t use, int *rc)
{
	*rc = 0;
	if (atomic_load(&e->state) != SHM_DIR_CLAIMED)
		return 1;
	uint32_t had = atomic_load(&e->use);
	if (had == use || use == 0)
		return 1;
	if (had != 0) {
		*rc = SHMLOCK_EUSEMISMATCH;
		return 1;
	}
	return 0;
}

int shm_claim_adopt_use(shmlock_segment *seg, int kind, size_t index, uint32_t use)
{
	int dk = directory_of(kind);
	if (!seg || !dk)
		return SHMLOCK_EINVAL;
	if (index >= seg->tables[dk].count)
		return 0; /* no claim to record it in, as shm_claim_use finds none */
	struct shm_dir_entry *e = dir_entry(seg, dk, index);
	int rc;
	if (adopt_done(e, use, &rc))
		return rc; /* no change: no lock */
	if (shm_closed(seg))
		return SHMLOCK_ECLOSED;
	if (seg->read_only)
		return SHMLOCK_EREADONLY;
	if ((rc = registry_lock_for(seg, false)) != 0)
		return rc;
	if (!adopt_done(e, use, &rc)) {
		atomic_store(&e->use, use);
		atomic_fetch_add(&seg->hdr->registry_gen, 1);
	}
	shm_registry_unlock(seg);
	return rc;
}

int shm_claim(shmlock_segment *seg, int kind, const char *name, uint32_t use, size_t *index)
{
	int dk = directory_of(kind);
	if (!seg || !index || !dk)
		return SHMLOCK_EINVAL;
	uint64_t words[5] = {0};
	uint32_t len = 0;
	if (name && *name) {
		int rc = shm_pack_name(name, words, &len);
		if (rc)
			return rc;
	}
	if (shm_closed(seg))
		return SHMLOCK_ECLOSED;
	if (seg->read_only)
		return SHMLOCK_EREADONLY;
	int rc = registry_lock_for(seg, false);
	if (rc)
		return rc;
	uint64_t i = 0;
	bool fresh = false;
	rc = claim_entry(seg, kind, dk, name, len, words, use, false, &i, &fresh);
	if (rc == SHMLOCK_ETABLEFULL) {
		/* The dead's claims may have gone; and only once they are dropped
		 * and there is still no room, a claim kept for its news is taken.
		 * The drop is a change whether the claim then succeeds or not:
		 * a reader of the claims without the lock must see it. */
		if (drop_dead_refs(seg, 0) > 0)
			atomic_fetch_add(&seg->hdr->registry_gen, 1);
		rc = claim_entry(seg, kind, dk, name, len, words, use, true, &i, &fresh);
	}
	if (rc == 0 && (rc = add_ref(seg, kind, i)) != 0) {
		if (fresh)
			free_entry(seg, kind, dk, i);
		else
			atomic_fetch_sub(&dir_entry(seg, dk, i)->refs, 1);
		/* add_ref may have dropped the dead's records */
		atomic_fetch_add(&seg->hdr->registry_gen, 1);
	}
	if (rc == 0) {
		atomic_fetch_add(&seg->hdr->registry_gen, 1);
		*index = (size_t)i;
	}
	shm_registry_unlock(seg);
	return rc;
}

/* shm.Segment.Release: works after close too, as the lock packages' releases. */
int shm_release_claim(shmlock_segment *seg, int kind, size_t index)
{
	int dk = directory_of(kind);
	if (!seg || !dk)
		return SHMLOCK_EINVAL;
	if (seg->read_only)
		return SHMLOCK_EREADONLY;
	if (index >= seg->tables[kind].count)
		return SHMLOCK_EINDEX;
	struct shm_dir_entry *e = dir_entry(seg, dk, index);
	int rc = registry_lock_for(seg, true);
	if (rc)
		return rc;
	if (atomic_load(&e->state) != SHM_DIR_CLAIMED || atomic_load(&e->refs) == 0) {
		shm_registry_unlock(seg);
		return SHMLOCK_ENOTFOUND; /* shm.ErrNotClaimed */
	}
	uint64_t nrefs;
	claim_refs(seg, &nrefs);
	if (!drop_ref(seg, kind, index) && nrefs > 0) {
		/* Every live reference has its record: this process has none to
		 * give back (shm.Segment.Release). */
		shm_registry_unlock(seg);
		return SHMLOCK_ENOTFOUND;
	}
	if (atomic_fetch_sub(&e->refs, 1) == 1 && lock_free(seg, kind, index, atomic_load(&e->use)))
		free_entry(seg, kind, dk, index);
	/* A lock still held (or inconsistent) keeps its claim with no reference. */
	atomic_fetch_add(&seg->hdr->registry_gen, 1);
	shm_registry_unlock(seg);
	return 0;
}

/* ---------------------------------------------------------- data regions */

struct region {
	uint64_t index, offset, size;
	uint32_t len;
	uint8_t name[SHM_NAME_LEN];
	bool dropped;
};

/* A decoded region directory (layout.RegionTable). */
struct region_table {
	struct region *regions; /* the claimed entries that decoded, by index */
	size_t n;
	int64_t free; /* the first free entry, -1 none */
	uint64_t end; /* where the next region starts */
	bool sound;   /* no claimed (or unknown) entry is damaged */
};

static int by_offset(const void *a, const void *b)
{
	const struct region *x = *(struct region *const *)a, *y = *(struct region *const *)b;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

static int by_name(const void *a, const void *b)
{
	const struct region *x = *(struct region *const *)a, *y = *(struct region *const *)b;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	int c = memcmp(x->name, y->name, x->len);
	if (c)
		return c;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* decodeClaimed: a claimed entry's own checks; false if damaged. */
static bool decode_claimed(struct shm_region_entry *e, uint64_t i, uint64_t data_bytes, struct region *r)
{
	r->index = i;
	r->len = atomic_load(&e->name_len);
	r->offset = atomic_load(&e->offset);
	r->size = atomic_load(&e->size);
	r->dropped = false;
	load_name(e->name, r->name);
	if (r->len == 0 || r->len > SHM_NAME_LEN)
		return false;
	char name[SHM_NAME_LEN + 1];
	memcpy(name, r->name, r->len);
	name[r->len] = 0;
	size_t n;
	if (memchr(name, 0, r->len) || check_name(name, &n) != 0)
		return false;
	for (uint32_t j = r->len; j < SHM_NAME_LEN; j++)
		if (r->name[j])
			return false;
	if (r->size == 0 || r->offset % REGION_ALIGN != 0)
		return false;
	return r->offset <= data_bytes && r->size <= data_bytes - r->offset;
}

/* layout.DecodeRegions over the live directory, State loaded first. */
static int read_regions(shmlock_segment *seg, struct region_table *t)
{
	uint64_t count;
	struct shm_region_entry *dir = shm_table_of(seg, SHM_REGION_DIRECTORY, &count);
	uint64_t data_bytes = seg->tables[SHM_DATA].count * DATA_UNIT;
	*t = (struct region_table){NULL, 0, -1, 0, true};
	if (count == 0)
		return 0;
	struct region *rs = calloc(count, sizeof *rs);
	struct region **sorted = calloc(count, sizeof *sorted);
	if (!rs || !sorted) {
		free(rs);
		free(sorted);
		return SHMLOCK_ENOMEM;
	}
	size_t n = 0;
	for (uint64_t i = 0; i < count; i++) {
		uint32_t st = atomic_load(&dir[i].state);
		if (st == 0) {
			if (t->free < 0)
				t->free = (int64_t)i;
			continue;
		}
		if (st != 1 || !decode_claimed(&dir[i], i, data_bytes, &rs[n])) {
			t->sound = false;
			continue;
		}
		n++;
	}
	/* A name claimed twice: the later entries are damaged. */
	for (size_t j = 0; j < n; j++)
		sorted[j] = &rs[j];
	qsort(sorted, n, sizeof *sorted, by_name);
	for (size_t j = 1; j < n; j++) {
		if (sorted[j]->len == sorted[j - 1]->len && !memcmp(sorted[j]->name, sorted[j - 1]->name, sorted[j]->len)) {
			sorted[j]->dropped = true;
			t->sound = false;
		}
	}
	/* Overlaps, in offset order: the later region is the damaged one. */
	size_t m = 0;
	for (size_t j = 0; j < n; j++)
		if (!rs[j].dropped)
			sorted[m++] = &rs[j];
	qsort(sorted, m, sizeof *sorted, by_offset);
	uint64_t reach = 0;
	bool any = false;
	for (size_t j = 0; j < m; j++) {
		struct region *r = sorted[j];
		if (any && r->offset < reach) {
			r->dropped = true;
			t->sound = false;
			continue;
		}
		if (r->offset + r->size > reach)
			reach = r->offset + r->size;
		any = true;
	}
	free(sorted);
	for (size_t j = 0; j < n; j++) {
		uint64_t e = (rs[j].offset + rs[j].size + REGION_ALIGN - 1) & ~(uint64_t)(REGION_ALIGN - 1);
		if (!rs[j].dropped && e > t->end)
			t->end = e;
	}
	t->regions = rs;
	t->n = n;
	return 0;
}

static struct region *find_region(struct region_table *t, const char *name, uint32_t len)
{
	for (size_t j = 0; j < t->n; j++)
		if (!t->regions[j].dropped && t->regions[j].len == len && !memcmp(t->regions[j].name, name, len))
			return &t->regions[j];
	return NULL;
}

/* The region's memory, or SHMLOCK_ETABLERANGE (cannot happen for a decoded one). */
static int region_of(shmlock_segment *seg, struct region *r, uint64_t size, void **out)
{
	if (size != 0 && size != r->size)
		return SHMLOCK_EREGIONSIZE;
	uint64_t data_bytes = seg->tables[SHM_DATA].count * DATA_UNIT;
	if (r->offset > data_bytes || r->size > data_bytes - r->offset)
		return SHMLOCK_ETABLERANGE;
	*out = (uint8_t *)seg->tables[SHM_DATA].base + r->offset;
	return 0;
}

/* Looks name up without the lock: 1 found (rc in *rc), 0 not. */
static int lookup_region(shmlock_segment *seg, const char *name, uint32_t len, uint64_t size, void **out, int *rc)
{
	struct region_table t;
	if ((*rc = read_regions(seg, &t)) != 0)
		return 1;
	struct region *r = find_region(&t, name, len);
	if (r)
		*rc = region_of(seg, r, size, out);
	free(t.regions);
	return r != NULL;
}

/* claimRegion, under the registry lock: the first free entry, at the end. */
static int claim_region(shmlock_segment *seg, const char *name, uint32_t len, const uint64_t words[5],
                        uint64_t size, void **out)
{
	struct region_table t;
	int rc = read_regions(seg, &t);
	if (rc)
		return rc;
	struct region *r = find_region(&t, name, len);
	if (r) { /* claimed by another process while this one waited */
		rc = region_of(seg, r, size, out);
		free(t.regions);
		return rc;
	}
	uint64_t area = seg->tables[SHM_DATA].count * DATA_UNIT;
	uint64_t used = t.end < area ? t.end : area;
	if (!t.sound)
		rc = SHMLOCK_EMALFORMED; /* a damaged region is unknown: a new one could overlap it */
	else if (size > area - used)
		rc = SHMLOCK_EDATAFULL;
	else if (t.free < 0)
		rc = SHMLOCK_ETABLEFULL;
	if (rc) {
		free(t.regions);
		return rc;
	}
	struct shm_region_entry *e = (struct shm_region_entry *)seg->tables[SHM_REGION_DIRECTORY].base + t.free;
	/* State is 0; a dead claimant may have left the other words set. */
	atomic_store(&e->name_len, 0);
	atomic_store(&e->offset, 0);
	atomic_store(&e->size, 0);
	for (int w = 0; w < 5; w++)
		atomic_store(&e->name[w], words[w]);
	atomic_store(&e->name_len, len);
	atomic_store(&e->offset, t.end);
	atomic_store(&e->size, size);
	atomic_store(&e->state, 1); /* last: the region is claimed */
	atomic_fetch_add(&seg->hdr->registry_gen, 1);
	*out = (uint8_t *)seg->tables[SHM_DATA].base + t.end;
	free(t.regions);
	return 0;
}

int shm_region(shmlock_segment *seg, const char *name, uint64_t size, void **out)
{
	if (!seg || !out)
		return SHMLOCK_EINVAL;
	uint64_t words[5];
	uint32_t len;
	int rc = shm_pack_name(name, words, &len);
	if (rc)
		return rc;
	if (shm_closed(seg))
		return SHMLOCK_ECLOSED;
	/* Regions never change once claimed: one found without the lock is final. */
	if (lookup_region(seg, name, len, size, out, &rc))
		return rc;
	if (size == 0)
		return SHMLOCK_ENOTFOUND;
	if (seg->read_only)
		return SHMLOCK_EREADONLY;
	if ((rc = registry_lock_for(seg, false)) != 0)
		return rc;
	rc = claim_region(seg, name, len, words, size, out);
	shm_registry_unlock(seg);
	return rc;
}

SHM_EXPORT int shmlock_data(shmlock_segment *seg, const char *name, size_t size, void **out)
{
	return shm_region(seg, name, size, out);
}
