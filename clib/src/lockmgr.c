/* lockmgr.c: the lock manager (package lockmgr): named resources held
 * exclusively or collaboratively by named owners, with expiry, fencing
 * versions and the reclaim of dead processes' holds.
 *
 * This is a second implementation of lockmgr/{manager,entry,table}.go on
 * the same table: every word is written as Go writes it, in the same order
 * and under the same entry lock, so that Go and C processes grant, wait,
 * wake and reclaim each other's holds, and Go's Manager.Check and Inspect
 * read C's holds as their own.
 *
 * The table (docs/FORMAT.md, Lock manager). Entry 0 is the table's header;
 * entries 1..n hold resources. A resource lives at the first free or
 * never-used entry of its probe sequence 1 + ((hash mod n) + d) mod n,
 * d = 0, 1, ... Entry 0's Next is the longest d ever used (lookups stop
 * there), its Lock is the insert lock (taken before any entry lock, around
 * every change of an entry's kind), its Version is the highest version of
 * any recycled resource (new resources start there, so a version never goes
 * back), its statistics those of recycled entries, and its Ctl bit 2 the
 * declared-only mode.
 *
 * Each entry has its lock word, Lock: 0 free, else the packed identity of
 * the process changing the entry. Every field but Gate and Sleepers
 * changes only under it. A process that dies holding it is found dead by a
 * waiter that has waited 50 ms, which takes the lock over by CAS and bumps
 * the gate (the dead process may have ended a hold and not woken anyone).
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* Ctl of a resource entry:
 *
 *	bits 0-1  kind: never used, resource, free (recycled: probes continue
 *	          past it), overflow (more holder records of the resource whose
 *	          chain links it through Next)
 *	bit  2    declared (Declare); never recycled. In entry 0: declared-only
 *	          mode, where undeclared names are refused
 *	bits 3-4  the mode of the current holders; 0 when there are none
 *	bit  5    inconsistent: a hold ended without its owner's release and no
 *	          holder has marked the resource consistent since
 */
#define LM_KIND_MASK 3u
#define LM_KIND_EMPTY 0u
#define LM_KIND_RESOURCE 1u
#define LM_KIND_FREE 2u
#define LM_KIND_OVERFLOW 3u
#define LM_CTL_DECLARED (1u << 2)
#define LM_CTL_DECLARED_ONLY (1u << 2) /* entry 0 */
#define LM_CTL_MODE_SHIFT 3
#define LM_CTL_MODE_MASK (3u << LM_CTL_MODE_SHIFT)
#define LM_CTL_INCONSISTENT (1u << 5)

/* Limits: two holder records in a resource's entry and two in each of at
 * most LM_MAX_OVERFLOW overflow entries. */
#define LM_RECORDS 2
#define LM_MAX_OVERFLOW 7
#define LM_MAX_HOLDERS (LM_RECORDS * (1 + LM_MAX_OVERFLOW))
#define LM_OWNER_WORDS (SHM_OWNER_NAME_LEN / 8)
#define LM_NAME_WORDS (SHM_NAME_LEN / 8)

/* Tombstones: a hold that ends without its owner's release leaves its
 * record free (Process 0) with the owner's name and one of these in
 * Companion (no packed identity has a zero pid field), so that the owner's
 * late release or refresh is told SHMLOCK_ELOCK_TIMEOUT (or, after an
 * operator's ForceRelease, SHMLOCK_ELOCK_NOT_HELD). LastExpired holds the
 * owner hash of the last such end, bit 63 flipped when an operator ended it. */
#define LM_TOMB_EXPIRED (UINT64_C(1) << 62)
#define LM_TOMB_FORCED ((UINT64_C(1) << 62) | (UINT64_C(1) << 61))
#define LM_FORCED_MARK (UINT64_C(1) << 63)

/* Waiting for an entry lock: its holder is a few instructions from
 * unlocking, so spin (loads, then loads spaced by PAUSEs), then nap in
 * growing steps, asking every 50 ms whether the holder still lives. The
 * spaced loads were sched_yields: with more processes than CPUs each yield
 * gave the CPU to another waiter and sent this one to the back of the run
 * queue, while the holder, on the other CPU, unlocked within the yield
 * (bench/matrix -baseline, 6 rounds, 2 vCPUs: counter 1.84x and rw90 2.35x
 * at 8 processes, rw90 1.28x at 4, every round; 2 processes unchanged).
 * Go's waiters call runtime.Gosched there, which gives the thread back to
 * the same goroutine at once (though it wakes an idle runtime thread). */
#define LM_SPIN_LOADS 64
#define LM_SPIN_PAUSED 16 /* loads after LM_SPIN_PAUSE_RUN PAUSEs each */
#define LM_SPIN_PAUSE_RUN 8
#define LM_MAX_NAP_NS 1000000LL
#define LM_LIVENESS_NS 50000000LL

/* Waiting for a resource: watch the gate for a few loads, then sleep on it
 * in slices of at most 100 ms, registered in Sleepers for one slice at a
 * time, looking for dead holders between slices (a death wakes nobody). */
#define LM_WAIT_SPINS 200
#define LM_WAIT_YIELDS 20
#define LM_SLEEP_SLICE_NS 100000000LL

/* A waiter whose attempt failed first spins without touching the entry,
 * so that a holder acquiring and releasing in a loop runs a series of holds
 * without the waiter's attempts taking the entry's lines from it: for
 * LM_KEEP_OFF_ATTEMPTS times what the handle's failed attempts cost (an
 * average, each sample at most LM_MAX_KEEP_OFF_NS), between the two bounds
 * (the Go package's keepoff.go says why and what it measured). An
 * acquisition with SHMLOCK_ACQUIRE_EAGER does not keep off. */
#define LM_KEEP_OFF_ATTEMPTS 8
#define LM_MIN_KEEP_OFF_NS 1000LL
#define LM_MAX_KEEP_OFF_NS 8000LL
#define LM_KEEP_OFF_WEIGHT 8

/* The default backoff (lockmgr.DefaultInitialDelay and its kin): 100 ms
 * doubling to 1 s, each wait shortened by up to 20% at random. */
#define LM_BACKOFF_INITIAL_NS 100000000LL
#define LM_BACKOFF_MAX_NS 1000000000LL
#define LM_BACKOFF_FACTOR 2.0
#define LM_BACKOFF_JITTER 0.2

struct shmlock_lockmgr {
	shmlock_segment *seg;
	struct shm_lockmgr_entry *entries; /* entries[0] is the header */
	struct shm_lockmgr_entry *head;
	uint64_t n; /* resource entries: count - 1 */
	bool ro;
	struct shm_lock_stats *stats; /* entry 0's contention counters, the others follow; NULL if none or read-only */
	_Atomic int64_t attempt_cost; /* average ns of a failed attempt (keep-off), updated without a lock */
};

typedef struct shm_lockmgr_entry entry_t;
typedef struct shm_lockmgr_holder holder_t;

/* Loads and stores of shared words: always whole and sequentially
 * consistent, as Go's sync/atomic. */
#define LD(p) atomic_load(p)
#define ST(p, v) atomic_store((p), (v))
/* SO writes an entry's word under its lock (SHM_STORE_OWNED). Measured
 * (bench/matrix, shmlock_lockmgr_c, far placement): with ST for these, one
 * acquire+release took 448 ns against Go's 262 ns, about twenty locked
 * stores. The gate's bump stays ST: it is the futex protocol's word, which
 * a waiter reads after registering. */
#define SO(p, v) SHM_STORE_OWNED(p, v)

static inline uint32_t kind_of(uint32_t ctl) { return ctl & LM_KIND_MASK; }
static inline int mode_of(uint32_t ctl) { return (int)((ctl & LM_CTL_MODE_MASK) >> LM_CTL_MODE_SHIFT); }
static inline uint32_t with_mode(uint32_t ctl, int mode)
{
	return (ctl & ~LM_CTL_MODE_MASK) | ((uint32_t)mode << LM_CTL_MODE_SHIFT);
}

static bool closed(const shmlock_lockmgr *m) { return shm_closed(m->seg); }

/* ------------------------------------------------------------------ names */

/* A checked resource or owner name packed as the table stores it
 * (NUL-padded little-endian words), with its hash. */
struct key {
	uint64_t w[LM_NAME_WORDS];
	uint64_t hash;
	/* For a resource key of the thread's cache (check_names): hash mod n
	 * for a table of n entries; n 0 if not computed. */
	uint64_t n, home;
};

/* hash_words is lockmgr's hashWords: FNV-1a over the name's words (not its
 * bytes: a multiply per word), each step folded, then a 64-bit finaliser;
 * never 0. */
static uint64_t hash_words(const uint64_t *w, size_t n)
{
	uint64_t h = UINT64_C(14695981039346656037);
	for (size_t i = 0; i < n; i++) {
		h = (h ^ w[i]) * UINT64_C(1099511628211);
		h ^= h >> 29;
	}
	h *= UINT64_C(0xbf58476d1ce4e5b9);
	h ^= h >> 32;
	return h ? h : 1;
}

/* set_key checks s as lockmgr's checkName does (1..max bytes of UTF-8, no
 * control characters, so no NUL) and packs it into k. */
static bool set_key(struct key *k, const char *s, size_t max)
{
	memset(k, 0, sizeof *k);
	if (s == NULL)
		return false;
	size_t len = strnlen(s, max + 1);
	if (len == 0 || len > max)
		return false;
	bool ascii = true;
	for (size_t i = 0; i < len; i++) {
		unsigned char b = (unsigned char)s[i];
		if (b < 0x20 || b == 0x7f)
			return false;
		ascii = ascii && b < 0x80;
	}
	if (!ascii && !shm_name_chars_valid(s, len))
		return false;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(k->w, s, len); /* byte i is bits 8*(i%8) of word i/8 */
#else
	for (size_t i = 0; i < len; i++)
		k->w[i >> 3] |= (uint64_t)(unsigned char)s[i] << (8 * (i & 7));
#endif
	k->hash = hash_words(k->w, (len + 7) >> 3);
	return true;
}

/* The names of this thread's last good pair, packed: a thread that
 * acquires and releases one resource as one owner, over and over (the
 * common use), checks, packs and hashes them once, as Go's Manager keeps its
 * last pair (lockmgr/names.go). A key depends on its name alone, not on a
 * handle or a segment, so one cache serves every handle of the thread.
 * Measured (bench/bin/shmlock_lockmgr_c, uncontended): the four set_key
 * calls of an acquire+release were a quarter of its time. */
static _Thread_local struct {
	bool valid;
	char res[SHM_NAME_LEN + 1], own[SHM_OWNER_NAME_LEN + 1];
	struct key rk, ok;
} last_names;

static int check_names(const shmlock_lockmgr *m, struct key *res, struct key *own, const char *resource,
                       const char *owner)
{
	/* strcmp stops at the cached name's NUL at the latest: a longer input
	 * differs there, and is never read past its own NUL. */
	if (last_names.valid && resource != NULL && owner != NULL && strcmp(resource, last_names.res) == 0 &&
	    strcmp(owner, last_names.own) == 0) {
		if (last_names.rk.n != m->n && m->n != 0) { /* another handle's table, of another size */
			last_names.rk.n = m->n;
			last_names.rk.home = last_names.rk.hash % m->n;
		}
		*res = last_names.rk;
		*own = last_names.ok;
		return 0;
	}
	if (!set_key(res, resource, SHM_NAME_LEN))
		return SHMLOCK_EINVALID_RESOURCE;
	if (!set_key(own, owner, SHM_OWNER_NAME_LEN))
		return SHMLOCK_EINVALID_OWNER;
	/* Both checked: at most SHM_NAME_LEN and SHM_OWNER_NAME_LEN bytes. */
	strcpy(last_names.res, resource);
	strcpy(last_names.own, owner);
	last_names.rk = *res;
	last_names.ok = *own;
	last_names.valid = true;
	return 0;
}

static bool same_name(entry_t *e, const struct key *k)
{
	for (int i = 0; i < LM_NAME_WORDS; i++)
		if (LD(&e->name[i]) != k->w[i])
			return false;
	return true;
}

static bool same_owner(holder_t *h, const struct key *k)
{
	for (int i = 0; i < LM_OWNER_WORDS; i++)
		if (LD(&h->owner[i]) != k->w[i])
			return false;
	return true;
}

/* owner_hash is the hash of h's owner from its stored words (a name has no
 * NUL, so its words end at the first word of NULs). */
static uint64_t owner_hash(holder_t *h)
{
	uint64_t w[LM_OWNER_WORDS];
	size_t n = 0;
	while (n < LM_OWNER_WORDS && (w[n] = LD(&h->owner[n])) != 0)
		n++;
	return hash_words(w, n);
}

/* ------------------------------------------------------------ entry locks */

static void nap(int64_t ns)
{
	struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

/* stats_of: the contention counters of e (slow paths only; table.statsOf),
 * or NULL if there are none or the table is only read. */
static struct shm_lock_stats *stats_of(const shmlock_lockmgr *m, const entry_t *e)
{
	if (m->stats == NULL || e < m->entries || e > m->entries + m->n)
		return NULL;
	return m->stats + (e - m->entries);
}

/* The wakes of a hold's end (table.wakeOne, wakeAll): one that woke someone
 * counts a wake-up. */
static void wake_one(const shmlock_lockmgr *m, entry_t *e)
{
	if (shm_sleepers_wake_one(&e->sleepers, &e->gate))
		SHM_STATS_ADD(stats_of(m, e), wakeups);
}

static void wake_all(const shmlock_lockmgr *m, entry_t *e)
{
	if (shm_sleepers_wake_all(&e->sleepers, &e->gate))
		SHM_STATS_ADD(stats_of(m, e), wakeups);
}

static void free_orphans(shmlock_lockmgr *m);

/* take_over takes e's lock word from w, its value, if w is a dead
 * process's; it may have stopped between a hold's end and the wake that goes
 * with it, so every sleeper is woken. A dead holder of the insert lock may
 * have died in a grow or a retire, and left an overflow entry that no chain
 * reaches: those are freed (lockmgr's takeOver). */
static bool take_over(shmlock_lockmgr *m, entry_t *e, uint64_t w, uint64_t self)
{
	if (w == 0 || w == self || shm_owner_alive(m->seg, w) || !atomic_compare_exchange_strong(&e->lock, &w, self))
		return false;
	ST(&e->gate, LD(&e->gate) + 1);
	wake_all(m, e);
	if (e == m->head)
		free_orphans(m);
	return true;
}

/* lock_entry_slow waits for e's lock; false, without it, if the segment
 * closed meanwhile. A holder found dead is taken over; it may have stopped
 * between a hold's end and the wake that goes with it, so every sleeper is
 * woken. */
static bool lock_entry_slow(shmlock_lockmgr *m, entry_t *e, uint64_t self)
{
	int64_t step = 1000, checked = 0;
	for (int i = 0;; i++) {
		uint64_t w = LD(&e->lock);
		if (w == 0) {
			uint64_t zero = 0;
			if (atomic_compare_exchange_strong(&e->lock, &zero, self))
				return true;
			continue;
		}
		if (i < LM_SPIN_LOADS)
			continue;
		if (i < LM_SPIN_LOADS + LM_SPIN_PAUSED) {
			for (int j = 0; j < LM_SPIN_PAUSE_RUN; j++)
				shm_cpu_relax();
			continue;
		}
		int64_t now = shm_now_ns();
		if (checked == 0 || now - checked >= LM_LIVENESS_NS) {
			checked = now;
			if (take_over(m, e, w, self))
				return true;
		}
		if (closed(m))
			return false;
		nap(step);
		step = step * 2 < LM_MAX_NAP_NS ? step * 2 : LM_MAX_NAP_NS;
	}
}

/* lock_entry takes e's lock word: one CAS when nobody else is changing e. */
static inline bool lock_entry(shmlock_lockmgr *m, entry_t *e, uint64_t self)
{
	uint64_t zero = 0;
	return atomic_compare_exchange_strong(&e->lock, &zero, self) || lock_entry_slow(m, e, self);
}

static inline bool try_lock_entry(entry_t *e, uint64_t self)
{
	uint64_t zero = 0;
	return atomic_compare_exchange_strong(&e->lock, &zero, self);
}

static inline void unlock_entry(entry_t *e) { ST(&e->lock, 0); }

/* unlock_entry_no_wake is unlock_entry when no wake follows (a grant that
 * ended no hold, by a waiter that took no wake): a release store, without
 * the full fence that only orders the unlock before a waker's load of the
 * sleepers (lockmgr's unlockEntryNoWake). */
static inline void unlock_entry_no_wake(entry_t *e) { atomic_store_explicit(&e->lock, 0, memory_order_release); }

/* ------------------------------------------------------------ the table */

/* home_of is where hash's probe sequence starts, less one (hash mod the
 * table's size). A loop over the sequence divides once, here: a 64-bit
 * division is some 40 cycles, and two per probe (as the sequence was
 * computed) were a third of an uncontended search. */
static inline uint64_t home_of(const shmlock_lockmgr *m, uint64_t hash) { return hash % m->n; }

/* probe_index is the index of the entry d steps along the sequence that
 * starts at home (d < n), as Go's table.probeFrom. */
static inline uint32_t probe_index(const shmlock_lockmgr *m, uint64_t home, uint64_t d)
{
	uint64_t i = home + d;
	if (i >= m->n)
		i -= m->n;
	return (uint32_t)(1 + i);
}

static inline entry_t *probe(shmlock_lockmgr *m, uint64_t home, uint64_t d)
{
	return &m->entries[probe_index(m, home, d)];
}

/* overflow returns overflow entry i, or NULL if i names none (a corrupted
 * link ends the chain). */
static entry_t *overflow(shmlock_lockmgr *m, uint32_t i)
{
	if (i == 0 || i > m->n)
		return NULL;
	entry_t *o = &m->entries[i];
	return kind_of(LD(&o->ctl)) == LM_KIND_OVERFLOW ? o : NULL;
}

/* holders collects the holder records of e and of its overflow chain,
 * used or not, in the order Go visits them; returns how many. Under e's
 * lock the chain does not change. */
static int holders(shmlock_lockmgr *m, entry_t *e, holder_t *out[LM_MAX_HOLDERS])
{
	int n = 0;
	for (int j = 0; j < LM_RECORDS; j++)
		out[n++] = &e->holders[j];
	uint32_t i = LD(&e->next);
	for (int steps = 0; steps < LM_MAX_OVERFLOW; steps++) {
		entry_t *o = overflow(m, i);
		if (o == NULL)
			break;
		for (int j = 0; j < LM_RECORDS; j++)
			out[n++] = &o->holders[j];
		i = LD(&o->next);
	}
	return n;
}

static int holder_count(shmlock_lockmgr *m, entry_t *e)
{
	holder_t *hs[LM_MAX_HOLDERS];
	int n = holders(m, e, hs), used = 0;
	for (int i = 0; i < n; i++)
		used += LD(&hs[i]->process) != 0;
	return used;
}

enum { SEARCH_NONE = -1, SEARCH_GAVE_UP = -2 };

/* search returns the index of resource k's entry, or SEARCH_NONE: with
 * lock, the entry is returned locked and its name checked under the lock
 * (SEARCH_GAVE_UP if the segment closed while it waited for the lock). It
 * probes no farther than entry 0's longest distance and stops at an entry
 * never used. */
static int64_t search(shmlock_lockmgr *m, const struct key *k, bool lock, uint64_t self)
{
	if (m->n == 0)
		return SEARCH_NONE;
	uint64_t limit = LD(&m->head->next);
	if (limit > m->n - 1)
		limit = m->n - 1;
	uint64_t home = k->n == m->n ? k->home : home_of(m, k->hash);
	for (uint64_t d = 0; d <= limit; d++) {
		uint32_t i = probe_index(m, home, d);
		entry_t *e = &m->entries[i];
		if (LD(&e->hash) != k->hash) {
			if (kind_of(LD(&e->ctl)) == LM_KIND_EMPTY)
				return SEARCH_NONE;
			continue;
		}
		if (lock && !lock_entry(m, e, self))
			return SEARCH_GAVE_UP;
		if (kind_of(LD(&e->ctl)) == LM_KIND_RESOURCE && same_name(e, k))
			return i;
		if (lock)
			unlock_entry(e);
	}
	return SEARCH_NONE;
}

/* find returns resource k's entry, locked, or NULL. */
static entry_t *find(shmlock_lockmgr *m, const struct key *k, uint64_t self)
{
	int64_t i = search(m, k, true, self);
	return i >= 0 ? &m->entries[i] : NULL;
}

/* free_orphans frees the overflow entries that no resource's chain reaches
 * (lockmgr's freeOrphans): left only by a process that died in grow or
 * retire, holding the insert lock, under which the caller runs. Without
 * memory for its map it frees nothing (the next takeover tries again). */
static void free_orphans(shmlock_lockmgr *m)
{
	unsigned char *reached = calloc(m->n + 1, 1);
	if (reached == NULL)
		return;
	for (uint64_t j = 1; j <= m->n; j++) {
		entry_t *e = &m->entries[j];
		if (kind_of(LD(&e->ctl)) != LM_KIND_RESOURCE)
			continue;
		uint32_t i = LD(&e->next);
		for (int steps = 0; steps < LM_MAX_OVERFLOW; steps++) {
			entry_t *o = overflow(m, i);
			if (o == NULL || reached[i])
				break;
			reached[i] = 1;
			i = LD(&o->next);
		}
	}
	for (uint64_t j = 1; j <= m->n; j++) {
		entry_t *o = &m->entries[j];
		if (!reached[j] && kind_of(LD(&o->ctl)) == LM_KIND_OVERFLOW) {
			ST(&o->next, 0);
			ST(&o->ctl, LM_KIND_FREE);
		}
	}
	free(reached);
}

/* retire folds a resource entry's statistics and version into the header
 * and frees its overflow entries. Under the insert lock and e's lock. */
static void retire(shmlock_lockmgr *m, entry_t *e)
{
	entry_t *h = m->head;
	atomic_fetch_add(&h->grants, LD(&e->grants));
	atomic_fetch_add(&h->releases, LD(&e->releases));
	atomic_fetch_add(&h->hold_nanos, LD(&e->hold_nanos));
	atomic_fetch_add(&h->conflicts, LD(&e->conflicts));
	atomic_fetch_add(&h->expired, LD(&e->expired));
	atomic_fetch_add(&h->reclaimed, LD(&e->reclaimed));
	/* One more than the entry's last version, so that the resource
	 * inserted here next (which starts at the header's) does not start at
	 * the version the entry has now: readers take an unchanged version as
	 * proof that the entry held still (lockmgr's read). */
	uint64_t v = LD(&e->version) + 1;
	SO(&e->version, v);
	if (v > LD(&h->version))
		ST(&h->version, v);
	/* The chain is unlinked before its entries are freed: a process that
	 * dies in between leaves them unreachable, not a link from e to a free
	 * entry that another resource's grow may take, shared then by both
	 * chains (as in lockmgr's retire). */
	uint32_t i = LD(&e->next);
	ST(&e->next, 0);
	for (int steps = 0; i != 0 && steps < LM_MAX_OVERFLOW; steps++) {
		entry_t *o = overflow(m, i);
		if (o == NULL)
			break;
		i = LD(&o->next);
		ST(&o->next, 0);
		ST(&o->ctl, LM_KIND_FREE);
	}
	ST(&e->ctl, LM_KIND_FREE);
}

/* recycle frees, for a new resource or an overflow entry (grow), the first
 * resource along hash's probe sequence that nobody holds, nobody declared and that is not inconsistent
 * (its next holder must be told), and returns it locked with its distance.
 * Under the insert lock, when no entry is free. */
static entry_t *recycle(shmlock_lockmgr *m, uint64_t hash, uint64_t *at, uint64_t self)
{
	uint64_t home = home_of(m, hash);
	for (uint64_t d = 0; d < m->n; d++) {
		entry_t *e = probe(m, home, d);
		/* An entry whose lock a dead process left is taken over, as a
		 * lookup would: else, with nobody looking its name up, it would
		 * never be recycled. */
		if (kind_of(LD(&e->ctl)) != LM_KIND_RESOURCE ||
		    (!try_lock_entry(e, self) && !take_over(m, e, LD(&e->lock), self)))
			continue;
		uint32_t c = LD(&e->ctl);
		if (kind_of(c) != LM_KIND_RESOURCE || (c & (LM_CTL_DECLARED | LM_CTL_INCONSISTENT)) != 0 ||
		    holder_count(m, e) != 0) {
			unlock_entry(e);
			continue;
		}
		retire(m, e);
		*at = d;
		return e;
	}
	return NULL;
}

/* insert adds resource k (or finds it, added meanwhile) and returns its
 * entry locked. Under the insert lock no entry changes its kind, so the
 * scan is exact. The name is written before the kind says "resource". */
static int insert(shmlock_lockmgr *m, const struct key *k, uint64_t self, entry_t **out)
{
	if (m->n == 0)
		return SHMLOCK_ELOCK_TABLE_FULL;
	if (!lock_entry(m, m->head, self))
		return SHMLOCK_ECLOSED;
	int rc = 0;
	entry_t *free = NULL;
	uint64_t free_at = 0;
	uint64_t home = home_of(m, k->hash);
	for (uint64_t d = 0; d < m->n; d++) {
		entry_t *e = probe(m, home, d);
		uint32_t c = kind_of(LD(&e->ctl));
		if (c == LM_KIND_EMPTY) {
			if (free == NULL)
				free = e, free_at = d;
			break;
		}
		if (c == LM_KIND_FREE && free == NULL)
			free = e, free_at = d;
		if (c == LM_KIND_RESOURCE && LD(&e->hash) == k->hash) {
			if (!lock_entry(m, e, self)) {
				rc = SHMLOCK_ECLOSED;
				goto out;
			}
			if (kind_of(LD(&e->ctl)) == LM_KIND_RESOURCE && same_name(e, k)) {
				/* Beyond the reach that find trusts: a damaged table
				 * (inserts only ever raise it). Lookups would miss the
				 * resource, and grow would find it gone every time. */
				if (d > LD(&m->head->next))
					ST(&m->head->next, (uint32_t)d);
				*out = e;
				goto out;
			}
			unlock_entry(e);
		}
	}
	if (free != NULL) {
		if (!lock_entry(m, free, self)) {
			rc = SHMLOCK_ECLOSED;
			goto out;
		}
	} else if ((free = recycle(m, k->hash, &free_at, self)) == NULL) {
		rc = SHMLOCK_ELOCK_TABLE_FULL;
		goto out;
	}
	for (int i = 0; i < LM_NAME_WORDS; i++)
		ST(&free->name[i], k->w[i]);
	ST(&free->hash, k->hash);
	ST(&free->version, LD(&m->head->version));
	ST(&free->last_expired, 0);
	ST(&free->next, 0);
	ST(&free->grants, 0);
	ST(&free->releases, 0);
	ST(&free->hold_nanos, 0);
	ST(&free->conflicts, 0);
	ST(&free->expired, 0);
	ST(&free->reclaimed, 0);
	/* The contention counters are the resource's too (table.insert): not
	 * the recycled one's, exported under the new name. */
	shm_stats_reset(stats_of(m, free));
	for (int j = 0; j < LM_RECORDS; j++)
		ST(&free->holders[j].companion, 0); /* no tombstone of the entry's last use */
	if (free_at > LD(&m->head->next))
		ST(&m->head->next, (uint32_t)free_at);
	ST(&free->ctl, LM_KIND_RESOURCE);
	*out = free;
out:
	unlock_entry(m->head);
	return rc;
}

/* grow's answer for a resource that left the table (recycled meanwhile):
 * the caller starts again from the lookup, at most LM_MAX_GONE times in a
 * row (lockmgr/manager.go's maxGone). */
#define LM_GONE 1
#define LM_MAX_GONE 64

/* grow links one more overflow entry to resource k's chain, unless the
 * chain has a free record already or is as long as it may be. Insert lock
 * first, then the resource's entry, as insert. */
static int grow(shmlock_lockmgr *m, const struct key *k, uint64_t self)
{
	if (!lock_entry(m, m->head, self))
		return SHMLOCK_ECLOSED;
	int rc = 0;
	entry_t *e = find(m, k, self);
	if (e == NULL) {
		rc = LM_GONE;
		goto out_head;
	}
	holder_t *hs[LM_MAX_HOLDERS];
	int n = holders(m, e, hs);
	for (int i = 0; i < n; i++) {
		uint64_t c = LD(&hs[i]->companion);
		if (LD(&hs[i]->process) == 0 && c != LM_TOMB_EXPIRED && c != LM_TOMB_FORCED)
			goto out; /* a spare record */
	}
	entry_t *last = e;
	int links = 0;
	for (entry_t *o = overflow(m, LD(&e->next)); o != NULL && links < LM_MAX_OVERFLOW;
	     o = overflow(m, LD(&o->next)))
		last = o, links++;
	if (links >= LM_MAX_OVERFLOW) {
		rc = SHMLOCK_ETOO_MANY_HOLDERS;
		goto out;
	}
	uint64_t home = home_of(m, k->hash), d;
	entry_t *o = NULL, *recycled = NULL;
	for (d = 0; d < m->n; d++) {
		uint32_t c = kind_of(LD(&probe(m, home, d)->ctl));
		if (c == LM_KIND_EMPTY || c == LM_KIND_FREE) {
			o = probe(m, home, d);
			break;
		}
	}
	/* No empty or free entry: recycle a resource as an insert does (a
	 * resource stays in the table after its last release, so a table in
	 * use for a while has none free; Go: grow). Never e: it has holders
	 * and its lock is this process's. */
	if (o == NULL)
		o = recycled = recycle(m, k->hash, &d, self);
	if (o == NULL) {
		rc = SHMLOCK_ELOCK_TABLE_FULL;
		goto out;
	}
	for (int j = 0; j < LM_RECORDS; j++) {
		ST(&o->holders[j].process, 0);
		ST(&o->holders[j].companion, 0); /* no tombstone of the entry's last use */
	}
	ST(&o->hash, 0);
	ST(&o->next, 0);
	ST(&o->ctl, LM_KIND_OVERFLOW);
	ST(&last->next, probe_index(m, home, d));
	if (recycled != NULL)
		unlock_entry(recycled);
out:
	unlock_entry(e);
out_head:
	unlock_entry(m->head);
	return rc;
}

/* --------------------------------------------------------------- holds */

enum ending { END_RELEASED, END_EXPIRED, END_RECLAIMED };

/* end_hold ends hold h of e. A hold that ends without its release marks the
 * resource inconsistent and names its owner in last_expired first, then the
 * Process word goes: a process that dies half-way leaves the hold (ended
 * again by the next attempt) beside the mark, or the record free and the
 * mark set, never a freed record the next holder is not told of (as in
 * lockmgr's endHold). Under e's lock; the caller wakes the sleepers after
 * unlocking. */
static void end_hold(const shmlock_lockmgr *m, entry_t *e, holder_t *h, enum ending why, int64_t now)
{
	int64_t acquired = (int64_t)LD(&h->acquired);
	if (why != END_RELEASED) {
		SO(&e->last_expired, owner_hash(h));
		SO(&e->ctl, LD(&e->ctl) | LM_CTL_INCONSISTENT);
	}
	SO(&h->process, 0);
	SO(&h->companion, why == END_RELEASED ? 0 : LM_TOMB_EXPIRED);
	switch (why) {
	case END_RELEASED:
		SO(&e->releases, LD(&e->releases) + 1);
		if (now - acquired > 0)
			SO(&e->hold_nanos, LD(&e->hold_nanos) + (uint64_t)(now - acquired));
		break;
	case END_EXPIRED:
		SO(&e->expired, LD(&e->expired) + 1);
		break;
	case END_RECLAIMED:
		SO(&e->reclaimed, LD(&e->reclaimed) + 1);
		SHM_STATS_ADD(stats_of(m, e), reclaims);
		break;
	}
	SO(&e->version, LD(&e->version) + 1);
	ST(&e->gate, LD(&e->gate) + 1);
}

static inline bool expired_at(uint64_t expires, int64_t now) { return expires != 0 && now >= (int64_t)expires; }

/* alive says whether process word w (a holder's Process or Companion)
 * lives (shm.Segment.OwnerAlive); "alive" answers are remembered for 50 ms,
 * so a waiter that retries against a live holder does not read /proc every
 * attempt, and a late "dead" only delays a reclaim. */
static bool alive(shmlock_lockmgr *m, uint64_t w, uint64_t self)
{
	if (w == 0)
		return false;
	return w == self || shm_owner_alive(m->seg, w);
}

/* ended_without reports whether own's hold of e ended without its
 * release: timed_out if it expired or its process died, forced if an
 * operator ended it. It consumes what it found, so one late release is
 * told once. Under e's lock. */
static void ended_without(shmlock_lockmgr *m, entry_t *e, const struct key *own, bool *timed_out, bool *forced)
{
	*timed_out = *forced = false;
	holder_t *hs[LM_MAX_HOLDERS];
	int n = holders(m, e, hs);
	for (int i = 0; i < n; i++) {
		holder_t *h = hs[i];
		if (LD(&h->process) != 0)
			continue;
		uint64_t c = LD(&h->companion);
		if ((c != LM_TOMB_EXPIRED && c != LM_TOMB_FORCED) || !same_owner(h, own))
			continue;
		if (c == LM_TOMB_FORCED)
			*forced = true;
		else
			*timed_out = true;
		SO(&h->companion, 0);
		break;
	}
	uint64_t last = LD(&e->last_expired);
	if (last == own->hash)
		*timed_out = !*forced;
	else if (last == (own->hash ^ LM_FORCED_MARK))
		*forced = !*timed_out;
	else
		return;
	SO(&e->last_expired, 0);
}

/* The outcome of one attempt under the entry lock. */
struct outcome {
	bool granted;
	bool already;      /* the owner holds the resource already */
	bool need_room;    /* compatible, but no free holder record */
	bool woke;         /* a hold ended: wake the sleepers after unlocking */
	bool reclaimed;    /* a dead holder's hold was ended */
	bool inconsistent; /* the resource is marked inconsistent */
	bool tombs;        /* the only free records are tombstones */
	uint64_t version;  /* after the grant */
	uint32_t seq;      /* Gate at the conflict, for the futex wait */
	int64_t expiry;    /* earliest expiry of a blocking hold; 0 none */
};

/* reclaim_if_dead ends hold h of e as a reclaim if its process and its
 * companion are both gone, and says whether it did. Off try_grant's fast
 * path (an owner's second hold, a resource full of compatible holds):
 * kept out of line so that the grant's path stays as short as before. */
static __attribute__((noinline, cold)) bool reclaim_if_dead(shmlock_lockmgr *m, entry_t *e, holder_t *h, int64_t now,
                                                           uint64_t self)
{
	if (alive(m, LD(&h->process), self) || alive(m, LD(&h->companion), self))
		return false;
	end_hold(m, e, h, END_RECLAIMED, now);
	return true;
}

/* try_grant is one attempt to grant own a hold of e, under e's lock: it
 * ends the holds that expired; on a conflict it ends the holds of dead
 * processes too, and grants if that removed every conflict; so it does
 * when compatible holds leave no free record. The record a
 * grant takes: one never used or released first, else that of the last
 * dead holder's hold this attempt ended (so the one who ended it is the one
 * granted, and alone told reclaimed), a tombstone (of an earlier end, or of
 * a hold this attempt ended for its TTL) only when the chain cannot grow
 * (reuse_tombs), so that every such owner is told for as long as room
 * allows (last_expired names only the last); but before all of them the record of an
 * earlier hold of own's that ended without its release (mine): the grant
 * is own's news of it, and a tombstone left beside the new hold would tell
 * its second release that it had expired (Go: try). */
/* expiry is the expires word of a hold that runs for ttl from now (0: it
 * does not expire), saturated: a ttl so long that now + ttl overflows
 * (INT64_MAX, "for ever") is the latest time there is, where the wrapped
 * sum (undefined behaviour in C besides) would be long past and the hold
 * expired at once (Go: expiry). */
static uint64_t expiry(int64_t now, int64_t ttl)
{
	if (ttl <= 0)
		return 0;
	if (now > 0 && ttl > INT64_MAX - now)
		return INT64_MAX;
	return (uint64_t)(now + ttl);
}

static void try_grant(shmlock_lockmgr *m, entry_t *e, const struct key *own, int mode, int64_t ttl, int64_t now,
                      bool first, bool reuse_tombs, uint64_t self, struct outcome *o)
{
	holder_t *hs[LM_MAX_HOLDERS], *free = NULL, *ended = NULL, *expired = NULL, *tomb = NULL, *mine = NULL;
	int n = holders(m, e, hs), held = 0;
	memset(o, 0, sizeof *o);
	for (int i = 0; i < n; i++) {
		holder_t *h = hs[i];
		if (LD(&h->process) == 0) {
			uint64_t c = LD(&h->companion);
			if (c == LM_TOMB_EXPIRED || c == LM_TOMB_FORCED) {
				if (same_owner(h, own))
					mine = h;
				else if (tomb == NULL)
					tomb = h;
			} else if (free == NULL) {
				free = h;
			}
			continue;
		}
		if (expired_at(LD(&h->expires), now)) {
			end_hold(m, e, h, END_EXPIRED, now);
			o->woke = true;
			expired = h;
			if (same_owner(h, own))
				mine = h;
			continue;
		}
		if (same_owner(h, own)) {
			if (!reclaim_if_dead(m, e, h, now, self)) {
				o->already = true;
				return;
			}
			/* A hold under own's name by a process that died (an owner
			 * restarted under its name): ended as a conflict ends a dead
			 * hold, not taken for own's, which would keep own out for good.
			 * The grant goes into its record (Go: try). */
			o->woke = o->reclaimed = true;
			mine = h;
			continue;
		}
		held++;
	}
	uint32_t ctl = LD(&e->ctl);
	if (held > 0 && (mode == SHMLOCK_EXCLUSIVE || mode_of(ctl) != mode)) {
		for (int i = 0; i < n; i++) {
			holder_t *h = hs[i];
			uint64_t p = LD(&h->process);
			if (p == 0)
				continue;
			if (alive(m, p, self) || alive(m, LD(&h->companion), self)) {
				int64_t exp = (int64_t)LD(&h->expires);
				if (exp != 0 && (o->expiry == 0 || exp < o->expiry))
					o->expiry = exp;
				continue;
			}
			end_hold(m, e, h, END_RECLAIMED, now);
			o->woke = o->reclaimed = true;
			held--;
			ended = h;
		}
		ctl |= LD(&e->ctl) & LM_CTL_INCONSISTENT; /* a reclaim above marked it */
		if (held > 0) {
			if (first)
				SO(&e->conflicts, LD(&e->conflicts) + 1);
			o->seq = LD(&e->gate);
			return;
		}
	}
	if (held > 0 && free == NULL && mine == NULL && ended == NULL) {
		/* Compatible holds take every record. Those whose processes died
		 * make room, ended as a conflict ends them: nothing else would end
		 * them, and a resource full of dead holders would refuse every
		 * later one (Go: try, reclaimDead). */
		int dead = 0;
		for (int i = 0; i < n; i++) {
			if (LD(&hs[i]->process) != 0 && reclaim_if_dead(m, e, hs[i], now, self)) {
				ended = hs[i];
				dead++;
			}
		}
		if (dead > 0) {
			o->woke = o->reclaimed = true;
			held -= dead;
			ctl |= LD(&e->ctl) & LM_CTL_INCONSISTENT;
		}
	}
	if (held == 0)
		ctl = with_mode(ctl, 0);
	if (mine != NULL)
		free = mine;
	else if (free == NULL)
		free = ended != NULL ? ended : !reuse_tombs ? NULL : tomb != NULL ? tomb : expired;
	if (free == NULL) {
		o->need_room = true;
		o->tombs = tomb != NULL || expired != NULL;
		o->seq = LD(&e->gate);
		SO(&e->ctl, ctl);
		return;
	}
	o->version = LD(&e->version) + 1;
	SO(&e->version, o->version);
	SO(&free->companion, 0); /* a tombstone stops being one before it names the new owner (Go: try) */
	for (int i = 0; i < LM_OWNER_WORDS; i++)
		SO(&free->owner[i], own->w[i]);
	SO(&free->acquired, (uint64_t)now);
	SO(&free->expires, expiry(now, ttl));
	SO(&free->process, self);
	SO(&e->grants, LD(&e->grants) + 1);
	if (held == 0)
		ctl = with_mode(ctl, mode);
	SO(&e->ctl, ctl);
	/* The grant is own's news of its hold's end, by expiry or reclaim
	 * (own's hash) or by an operator (its hash with LM_FORCED_MARK
	 * flipped): a later release is not told again. */
	if (((LD(&e->last_expired) ^ own->hash) & ~LM_FORCED_MARK) == 0)
		SO(&e->last_expired, 0);
	o->granted = true;
	o->inconsistent = (ctl & LM_CTL_INCONSISTENT) != 0;
}

/* ------------------------------------------------------------- waiting */

/* holder_died reports whether a hold of e belongs to processes that are
 * all gone, so that the next attempt would end it. The words are copied
 * under e's lock, taken only if free at once (a process busy with e is
 * alive), and judged outside it. */
static bool holder_died(shmlock_lockmgr *m, entry_t *e, uint64_t self)
{
	if (!try_lock_entry(e, self))
		return false;
	uint64_t ids[LM_MAX_HOLDERS][2];
	holder_t *hs[LM_MAX_HOLDERS];
	int n = holders(m, e, hs), k = 0;
	for (int i = 0; i < n; i++) {
		uint64_t p = LD(&hs[i]->process);
		if (p != 0) {
			ids[k][0] = p;
			ids[k][1] = LD(&hs[i]->companion);
			k++;
		}
	}
	unlock_entry(e);
	for (int i = 0; i < k; i++)
		if (!alive(m, ids[i][0], self) && !alive(m, ids[i][1], self))
			return true;
	return false;
}

/* failed_attempt records a failed attempt that took ns nanoseconds: a
 * lost update between threads only drops one sample. */
static void failed_attempt(shmlock_lockmgr *m, int64_t ns)
{
	if (ns < 0)
		ns = 0;
	if (ns > LM_MAX_KEEP_OFF_NS)
		ns = LM_MAX_KEEP_OFF_NS;
	int64_t c = atomic_load_explicit(&m->attempt_cost, memory_order_relaxed);
	atomic_store_explicit(&m->attempt_cost, c + (ns - c) / LM_KEEP_OFF_WEIGHT, memory_order_relaxed);
}

/* keep_off_ns is how long a waiter keeps off after a failed attempt. */
static int64_t keep_off_ns(shmlock_lockmgr *m)
{
	int64_t off = LM_KEEP_OFF_ATTEMPTS * atomic_load_explicit(&m->attempt_cost, memory_order_relaxed);
	if (off < LM_MIN_KEEP_OFF_NS)
		off = LM_MIN_KEEP_OFF_NS;
	if (off > LM_MAX_KEEP_OFF_NS)
		off = LM_MAX_KEEP_OFF_NS;
	return off;
}

/* wait sleeps for d or until a hold of e ends (its gate moves from seq),
 * the segment closes, or a holder is found dead between sleep slices; it
 * first keeps off the entry for off ns (0 for an eager acquisition). */
static void wait_gate(shmlock_lockmgr *m, entry_t *e, uint32_t seq, int64_t d, int64_t off, uint64_t self)
{
	if (d <= 0)
		return;
	shm_keep_off(off < d ? off : d);
	/* A contended hold is often short: watch the gate a little before
	 * paying for a sleep and a wake in the kernel. */
	for (int i = 0; i < LM_WAIT_SPINS; i++) {
		if (LD(&e->gate) != seq)
			return;
		if (i >= LM_WAIT_SPINS - LM_WAIT_YIELDS)
			sched_yield();
	}
	int64_t now = shm_now_ns();
	int64_t end = d > INT64_MAX - now ? INT64_MAX : now + d; /* a backoff_max_ns of INT64_MAX */
	const int64_t slice = shm_liveness_ns(LM_SLEEP_SLICE_NS);
	for (;;) {
		/* Registered for one slice at a time: a registration dropped as
		 * stale costs a live sleeper one slice at most. */
		uint32_t ticket = shm_sleepers_register(&e->sleepers);
		SHM_STATS_ADD(stats_of(m, e), sleeps);
		(void)shm_futex_wait(&e->gate, seq, d < slice ? d : slice);
		shm_sleepers_unregister(&e->sleepers, ticket);
		d = end - shm_now_ns();
		if (d <= 0 || LD(&e->gate) != seq || closed(m) || holder_died(m, e, self))
			return;
	}
}

/* backoff_delay is the wait after the n'th failed attempt (n from 0),
 * shortened by the jitter. */
static int64_t backoff_delay(const shmlock_acquire_options *o, int64_t n)
{
	double init = o->backoff_initial_ns > 0 ? (double)o->backoff_initial_ns : (double)LM_BACKOFF_INITIAL_NS;
	double max = o->backoff_max_ns > 0 ? (double)o->backoff_max_ns : (double)LM_BACKOFF_MAX_NS;
	double d = init;
	for (int64_t i = 0; i < n && d < max; i++)
		d *= LM_BACKOFF_FACTOR;
	if (d > max)
		d = max;
	double r = (double)(shm_random64() >> 11) / 9007199254740992.0; /* [0, 1) */
	d -= LM_BACKOFF_JITTER * r * d;
	/* A maximum of INT64_MAX is 2^63 as a double, which no int64_t holds
	 * (the conversion would be undefined): with a jitter draw of 0. */
	if (d >= 9223372036854775808.0)
		return INT64_MAX;
	return (int64_t)d;
}

static int check_options(const shmlock_acquire_options *o)
{
	if (o->ttl_ns < 0 || o->wait_ns < 0 || o->retries < SHMLOCK_RETRY_FOREVER)
		return SHMLOCK_EINVALID_OPTIONS;
	/* As Go's Backoff: a delay of 0 or less is the default. */
	int64_t init = o->backoff_initial_ns > 0 ? o->backoff_initial_ns : LM_BACKOFF_INITIAL_NS;
	int64_t max = o->backoff_max_ns > 0 ? o->backoff_max_ns : LM_BACKOFF_MAX_NS;
	if (init > max)
		return SHMLOCK_EINVALID_OPTIONS;
	return 0;
}

/* writable is 0 if the table may be changed. */
static int writable(shmlock_lockmgr *m)
{
	if (closed(m))
		return SHMLOCK_ECLOSED;
	if (m->ro)
		return SHMLOCK_EREADONLY;
	return 0;
}

/* entry_for returns res's entry, locked, inserting it unless the table
 * accepts declared resources only. */
static int entry_for(shmlock_lockmgr *m, const struct key *res, uint64_t self, entry_t **out)
{
	if (m->n != 0 && (LD(&m->head->ctl) & LM_CTL_DECLARED_ONLY) != 0) {
		entry_t *e = find(m, res, self);
		if (e == NULL)
			return closed(m) ? SHMLOCK_ECLOSED : SHMLOCK_ERESOURCE_NOT_FOUND;
		if ((LD(&e->ctl) & LM_CTL_DECLARED) == 0) {
			unlock_entry(e);
			return SHMLOCK_ERESOURCE_NOT_FOUND;
		}
		*out = e;
		return 0;
	}
	if ((*out = find(m, res, self)) != NULL)
		return 0;
	return insert(m, res, self, out);
}

/* -------------------------------------------------------------- the API */

SHM_EXPORT int shmlock_lockmgr_open(shmlock_segment *seg, shmlock_lockmgr **out)
{
	if (seg == NULL || out == NULL)
		return SHMLOCK_EINVAL;
	if (shm_closed(seg))
		return SHMLOCK_ECLOSED;
	uint64_t count;
	void *base = shm_table_of(seg, SHM_LOCKMGR, &count);
	if (base == NULL || count == 0)
		return SHMLOCK_ENOTABLE;
	if (seg->tables[SHM_LOCKMGR].entry_size != sizeof(entry_t))
		return SHMLOCK_EMALFORMED;
	shmlock_lockmgr *m = calloc(1, sizeof *m);
	if (m == NULL)
		return SHMLOCK_ENOMEM;
	m->seg = seg;
	m->entries = base;
	m->head = &m->entries[0];
	m->n = count - 1;
	m->ro = seg->read_only;
	m->stats = m->ro ? NULL : shm_lock_stats(seg, SHM_LOCKMGR, 0); /* a read-only handle must not count */
	shm_seg_get(seg); /* the table stays mapped until this handle closes */
	*out = m;
	return 0;
}

SHM_EXPORT int shmlock_lockmgr_close(shmlock_lockmgr *m)
{
	if (m == NULL)
		return SHMLOCK_EINVAL;
	shm_seg_put(m->seg);
	free(m);
	return 0;
}

int64_t shm_test_lockmgr_attempts_before;

/* attempts_of is an attempt count as shmlock_lock_info's int holds it:
 * saturated at INT_MAX. */
static int attempts_of(int64_t n)
{
	return n < INT_MAX ? (int)n : INT_MAX;
}

static int acquire(shmlock_lockmgr *m, const struct key *res, const struct key *own, int mode, bool eager,
                   const shmlock_acquire_options *opts, shmlock_lock_info *info)
{
	uint64_t self = shm_self();
	int retries = opts->retries == 0 && opts->wait_ns > 0 ? SHMLOCK_RETRY_FOREVER : opts->retries;
	int64_t start = 0;
	bool reclaimed = false, reuse_tombs = false;
	int gone = 0; /* grow found the resource gone (LM_MAX_GONE) */
	/* A hold's end wakes one sleeper: one that gives up after sleeping
	 * may have taken that wake, so it passes it on. */
	entry_t *slept = NULL;
	int rc;
	/* 64 bits, as Go's int: an int would overflow (undefined) after 2^31
	 * attempts, hours of retrying for ever with tiny backoffs. */
	for (int64_t attempt = 0;;) {
		/* The clock is read before the entry is locked, as in Go. */
		int64_t now = shm_now_ns();
		entry_t *e;
		if ((rc = entry_for(m, res, self, &e)) != 0)
			goto failed;
		if (start == 0)
			start = now;
		struct outcome o;
		try_grant(m, e, own, mode, opts->ttl_ns, now, attempt == 0, reuse_tombs, self, &o);
		if (o.granted && !o.woke && slept == NULL)
			unlock_entry_no_wake(e); /* no wake follows */
		else
			unlock_entry(e);
		if (o.granted && mode == SHMLOCK_COLLABORATIVE && (o.woke || slept != NULL))
			wake_all(m, e); /* whoever waited behind the holds that ended may join too */
		else if (o.woke && !o.granted)
			wake_one(m, e);
		reclaimed = reclaimed || o.reclaimed;
		if (o.granted) {
			info->version = o.version;
			info->acquired_ns = now;
			info->expires_ns = (int64_t)expiry(now, opts->ttl_ns);
			info->reclaimed = reclaimed;
			info->inconsistent = o.inconsistent;
			info->attempts = attempts_of(attempt + 1);
			if (slept != NULL) /* it waited: a contended acquisition, granted */
				shm_stats_wait(stats_of(m, slept), start, false);
			return 0;
		}
		if (o.already) {
			rc = SHMLOCK_EALREADY_HELD;
			goto failed;
		}
		if (o.need_room) {
			rc = grow(m, res, self);
			if (rc == 0)
				continue; /* not a retry: nothing conflicted */
			if (rc == LM_GONE) {
				if (++gone < LM_MAX_GONE)
					continue;
				rc = SHMLOCK_ELOCK_TABLE_FULL; /* lookups miss what inserts find: a damaged table */
				goto failed;
			}
			if (o.tombs && !reuse_tombs && (rc == SHMLOCK_ETOO_MANY_HOLDERS || rc == SHMLOCK_ELOCK_TABLE_FULL)) {
				reuse_tombs = true; /* no more room: a tombstone's news gives way */
				continue;
			}
			/* A resource with as many holders as it may have is busy for
			 * an acquisition that asked to wait. */
			if (rc != SHMLOCK_ETOO_MANY_HOLDERS || retries == 0)
				goto failed;
		}
		attempt++;
		if (SHM_UNLIKELY(attempt == 1))
			attempt += shm_test_lockmgr_attempts_before;
		info->attempts = attempts_of(attempt);
		if (retries == 0) {
			rc = SHMLOCK_ERESOURCE_LOCKED;
			goto failed;
		}
		if (retries != SHMLOCK_RETRY_FOREVER && attempt > retries) {
			rc = SHMLOCK_EACQUISITION_FAILED;
			goto failed;
		}
		int64_t d = backoff_delay(opts, attempt - 1);
		int64_t tried = now;
		now = shm_now_ns();
		failed_attempt(m, now - tried);
		if (opts->wait_ns > 0) {
			int64_t left = opts->wait_ns - (now - start); /* start + wait_ns may overflow */
			if (left <= 0) {
				rc = SHMLOCK_EWAIT_TIMEOUT;
				goto failed;
			}
			if (d > left)
				d = left;
		}
		if (o.expiry != 0) {
			if (d > o.expiry - now)
				d = o.expiry - now;
			if (d < 0)
				d = 0;
		}
		wait_gate(m, e, o.seq, d, eager ? 0 : keep_off_ns(m), self);
		slept = e;
		if (closed(m)) {
			rc = SHMLOCK_ECLOSED;
			goto failed;
		}
	}
failed:
	if (slept != NULL) {
		wake_one(m, slept);
		shm_stats_wait(stats_of(m, slept), start, true); /* a contended acquisition, given up */
	}
	return rc;
}

SHM_EXPORT int shmlock_lockmgr_acquire(shmlock_lockmgr *m, const char *resource, const char *owner, int mode,
                                       const shmlock_acquire_options *opts, shmlock_lock_info *info)
{
	static const shmlock_acquire_options none;
	shmlock_lock_info scratch;
	if (info == NULL)
		info = &scratch;
	memset(info, 0, sizeof *info);
	if (m == NULL)
		return SHMLOCK_EINVAL;
	if (opts == NULL)
		opts = &none;
	struct key res, own;
	int rc = check_names(m, &res, &own, resource, owner);
	bool eager = (mode & SHMLOCK_ACQUIRE_EAGER) != 0;
	mode &= ~SHMLOCK_ACQUIRE_EAGER;
	if (rc == 0 && mode != SHMLOCK_EXCLUSIVE && mode != SHMLOCK_COLLABORATIVE)
		rc = SHMLOCK_EINVALID_MODE;
	if (rc == 0)
		rc = check_options(opts);
	if (rc == 0)
		rc = writable(m);
	if (rc != 0)
		return rc;
	return acquire(m, &res, &own, mode, eager, opts, info);
}

/* lookup is find that tells a resource not found (0, *out NULL) from a
 * wait for its entry lock that the segment's close ended. */
static int lookup(shmlock_lockmgr *m, const struct key *res, uint64_t self, entry_t **out)
{
	int64_t i = search(m, res, true, self);
	*out = i >= 0 ? &m->entries[i] : NULL;
	return i == SEARCH_GAVE_UP ? SHMLOCK_ECLOSED : 0;
}

/* Release ends owner's hold, also after the segment's close (the handle
 * keeps the mapping); SHMLOCK_ECLOSED only if it then had to wait for an
 * entry lock that another process keeps. Releasing a resource that does not exist, or
 * that nobody holds, succeeds (Go logs a warning). */
SHM_EXPORT int shmlock_lockmgr_release(shmlock_lockmgr *m, const char *resource, const char *owner)
{
	if (m == NULL)
		return SHMLOCK_EINVAL;
	struct key res, own;
	int rc = check_names(m, &res, &own, resource, owner);
	if (rc != 0)
		return rc;
	if (m->ro)
		return SHMLOCK_EREADONLY; /* a release works after the segment's close, though */
	uint64_t self = shm_self();
	int64_t now = shm_now_ns();
	entry_t *e;
	if ((rc = lookup(m, &res, self, &e)) != 0 || e == NULL)
		return rc;
	holder_t *hs[LM_MAX_HOLDERS], *mine = NULL;
	int n = holders(m, e, hs), others = 0;
	for (int i = 0; i < n; i++) {
		if (LD(&hs[i]->process) == 0)
			continue;
		if (mine == NULL && same_owner(hs[i], &own))
			mine = hs[i];
		else
			others++;
	}
	if (mine == NULL) {
		bool timed_out, forced;
		ended_without(m, e, &own, &timed_out, &forced);
		unlock_entry(e);
		if (forced)
			return SHMLOCK_ELOCK_NOT_HELD;
		if (timed_out)
			return SHMLOCK_ELOCK_TIMEOUT;
		return others > 0 ? SHMLOCK_ELOCK_NOT_HELD : 0;
	}
	if (expired_at(LD(&mine->expires), now)) {
		end_hold(m, e, mine, END_EXPIRED, now);
		SO(&e->last_expired, 0); /* told now, by this release */
		SO(&mine->companion, 0);
		rc = SHMLOCK_ELOCK_TIMEOUT;
	} else {
		end_hold(m, e, mine, END_RELEASED, now);
	}
	if (others == 0)
		SO(&e->ctl, with_mode(LD(&e->ctl), 0));
	unlock_entry(e);
	wake_one(m, e);
	return rc;
}

SHM_EXPORT int shmlock_lockmgr_refresh(shmlock_lockmgr *m, const char *resource, const char *owner, int64_t ttl_ns,
                                       shmlock_lock_info *info)
{
	shmlock_lock_info scratch;
	if (info == NULL)
		info = &scratch;
	memset(info, 0, sizeof *info);
	if (m == NULL)
		return SHMLOCK_EINVAL;
	struct key res, own;
	int rc = check_names(m, &res, &own, resource, owner);
	if (rc == 0 && ttl_ns < 0)
		rc = SHMLOCK_EINVALID_OPTIONS;
	if (rc == 0)
		rc = writable(m);
	if (rc != 0)
		return rc;
	uint64_t self = shm_self();
	entry_t *e = find(m, &res, self);
	if (e == NULL)
		return closed(m) ? SHMLOCK_ECLOSED : SHMLOCK_ELOCK_NOT_HELD;
	int64_t now = shm_now_ns();
	holder_t *hs[LM_MAX_HOLDERS], *mine = NULL;
	int n = holders(m, e, hs);
	for (int i = 0; i < n && mine == NULL; i++)
		if (LD(&hs[i]->process) != 0 && same_owner(hs[i], &own))
			mine = hs[i];
	if (mine == NULL) {
		bool timed_out, forced;
		ended_without(m, e, &own, &timed_out, &forced);
		unlock_entry(e);
		return timed_out && !forced ? SHMLOCK_ELOCK_TIMEOUT : SHMLOCK_ELOCK_NOT_HELD;
	}
	if (expired_at(LD(&mine->expires), now)) {
		end_hold(m, e, mine, END_EXPIRED, now);
		SO(&e->last_expired, 0); /* told now, by this refresh: a later */
		SO(&mine->companion, 0); /* release is not told again */
		unlock_entry(e);
		wake_one(m, e);
		return SHMLOCK_ELOCK_TIMEOUT;
	}
	uint64_t exp = expiry(now, ttl_ns);
	SO(&mine->expires, exp);
	info->version = LD(&e->version);
	info->acquired_ns = (int64_t)LD(&mine->acquired);
	info->expires_ns = (int64_t)exp;
	unlock_entry(e);
	return 0;
}

/* MarkConsistent, as release, works after the segment's close (SHMLOCK_ECLOSED
 * only if it then had to wait for an entry lock that another process keeps):
 * a holder that repaired the data as it unwinds says so, as the spinlock's
 * and the upgrade mutex's holders may; else every later holder is told of
 * damage that is no more. */
SHM_EXPORT int shmlock_lockmgr_mark_consistent(shmlock_lockmgr *m, const char *resource, const char *owner)
{
	if (m == NULL)
		return SHMLOCK_EINVAL;
	struct key res, own;
	int rc = check_names(m, &res, &own, resource, owner);
	if (rc != 0)
		return rc;
	if (m->ro)
		return SHMLOCK_EREADONLY;
	uint64_t self = shm_self();
	int64_t now = shm_now_ns();
	entry_t *e;
	if ((rc = lookup(m, &res, self, &e)) != 0)
		return rc;
	if (e == NULL)
		return SHMLOCK_ELOCK_NOT_HELD;
	holder_t *hs[LM_MAX_HOLDERS];
	int n = holders(m, e, hs);
	bool held = false;
	for (int i = 0; i < n && !held; i++)
		held = LD(&hs[i]->process) != 0 && same_owner(hs[i], &own) && !expired_at(LD(&hs[i]->expires), now);
	if (held)
		SO(&e->ctl, LD(&e->ctl) & ~LM_CTL_INCONSISTENT);
	unlock_entry(e);
	return held ? 0 : SHMLOCK_ELOCK_NOT_HELD;
}

SHM_EXPORT int shmlock_lockmgr_check_version(shmlock_lockmgr *m, const char *resource, uint64_t version)
{
	if (m == NULL)
		return SHMLOCK_EINVAL;
	struct key res;
	if (!set_key(&res, resource, SHM_NAME_LEN))
		return SHMLOCK_EINVALID_RESOURCE;
	if (closed(m))
		return SHMLOCK_ECLOSED;
	int64_t i = search(m, &res, false, 0);
	uint64_t cur = i >= 0 ? LD(&m->entries[i].version) : 0;
	if (closed(m))
		return SHMLOCK_ECLOSED;
	return i >= 0 && cur == version ? 0 : SHMLOCK_EVERSION_CONFLICT;
}
