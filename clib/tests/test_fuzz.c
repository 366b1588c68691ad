/* test_fuzz.c: the exported API driven by byte strings. Each input is a
 * sequence of calls (segments opened, closed and reopened, spinlocks,
 * upgrade mutexes and lock managers opened by index and by name, locked,
 * tried, timed, unlocked by others, twice, after the segment's close; NULL
 * handles, bad names, modes, sizes, options) against a model of one process:
 * every return code must be the one the model expects, the words in the
 * segment must say what the model says, and once every handle is gone
 * every lock word, reader record and claim reference is free.
 *
 *   test_fuzz                  a few hundred seeded inputs (make test)
 *   test_fuzz FILE...          replays inputs
 *   SHMLOCK_LONG=1 test_fuzz   random inputs for SHMLOCK_FUZZ_SECONDS (60);
 *                              each is written to SHMLOCK_FUZZ_DIR (/tmp)
 *                              first, so a crash leaves it behind, and a
 *                              model failure keeps it as fail-*.bin
 */
#include "check.h"
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <time.h>

/* ------------------------------------------------------------ the input */

static const uint8_t *in;
static size_t in_n, in_at;
static int failed; /* model failures of this input */
static unsigned long checks; /* calls checked, over all inputs */

static uint8_t byte(void) { return in_at < in_n ? in[in_at++] : 0; }
static uint32_t pick(uint32_t n) { return byte() % n; }

#define EXPECT(got, want)                                                                          \
	do {                                                                                       \
		int g_ = (got), w_ = (want);                                                       \
		checks++;                                                                          \
		if (g_ != w_) {                                                                    \
			fprintf(stderr, "%s:%d: op %zu: %s = %d (%s), want %d (%s)\n", __FILE__, __LINE__, \
			        in_at, #got, g_, shmlock_strerror(g_), w_, shmlock_strerror(w_));  \
			failed++;                                                                  \
		}                                                                                  \
	} while (0)
#define EXPECT_TRUE(c)                                                                             \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: op %zu: %s\n", __FILE__, __LINE__, in_at, #c);     \
			failed++;                                                                  \
		}                                                                                  \
	} while (0)

/* ------------------------------------------------------------ the model */

#define NSEG 2
#define NSLOT 8   /* owner slots and upgrade mutexes; names take 0-3, indexes 4-7 */
#define NNAME 4
#define NSPIN 8
#define NUPG 8
#define NLM 4
#define NRES 4
#define NOWN 3
#define NREADERS 4 /* reader records per mutex */

static char path[256];
static int lm_small; /* the lock manager's table is small: TABLE_FULL may come */

static struct segh {
	shmlock_segment *s;
	bool closed, ro;
	int handles;
} segs[NSEG];

static const char *names[NNAME] = {"a", "b\xc3\xa9", "cccccccccccccccccccccccccccccccccccccccc", "d d"};
static const char *bad_names[] = {"", "x\x01", "\xff", "\xc0\xaf", "\xed\xa0\x80",
                                  "ccccccccccccccccccccccccccccccccccccccccc", "\x7f", "\xc2\x80"};
#define NBAD (sizeof bad_names / sizeof bad_names[0])

/* Owner slots: in pid/tid mode the holder id and depth; tok the Token word
 * (the token in token mode, the generation in pid/tid mode). */
static struct slot {
	uint64_t holder;
	uint32_t depth;
	uint64_t tok;
} slots[NSLOT];
static struct claim {
	int idx, use, refs; /* idx -1: not claimed */
} spin_claims[NNAME], upg_claims[NNAME];

static uint64_t holders[3], tokens[2];

static struct spinh {
	shmlock_spin *l;
	int seg, idx, mode, name;
} spins[NSPIN];

static struct upgh {
	shmlock_upgrade *m;
	int seg, idx, name;
	bool w, u, uw, rec;
	uint32_t s;
} upgs[NUPG];
static uint64_t upg_gen[NSLOT];

static struct lmh {
	shmlock_lockmgr *m;
	int seg;
} lms[NLM];
static const char *res_names[NRES] = {"r0", "r1", "resource/\xe2\x82\xac", "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr"};
static const char *own_names[NOWN] = {"o0", "o1", "oooooooooooooooooooooooooooooooo"};
static int lm_mode[NRES][NOWN]; /* 0 not held */

static struct region_model {
	bool claimed;
	uint64_t size, offset;
} regions[NNAME];
static uint64_t data_end, data_area;

/* A live segment handle whose memory is still there (closed ones only while
 * a handle keeps them); -1 none. */
static int seg_pick(bool allow_closed)
{
	int k = (int)pick(NSEG);
	if (!segs[k].s || (segs[k].closed && !allow_closed))
		return -1;
	return k;
}

static void seg_put(int k)
{
	if (--segs[k].handles == 0 && segs[k].closed)
		segs[k].s = NULL; /* freed with its last handle */
}

static shmlock_segment *any_open_seg(void)
{
	for (int k = 0; k < NSEG; k++)
		if (segs[k].s && !segs[k].closed && !segs[k].ro)
			return segs[k].s;
	return NULL;
}

/* ------------------------------------------------------------- segments */

static void op_seg_open(void)
{
	int k = (int)pick(NSEG);
	bool ro = pick(4) == 0;
	if (segs[k].s)
		return;
	static const int64_t readies[] = {0, 1, -1, 1000000, INT64_MAX, INT64_MIN};
	shmlock_options o = {.flags = ro ? SHMLOCK_READ_ONLY : 0, .ready_timeout_ns = readies[pick(6)]};
	int rc = shmlock_open(path, &o, &segs[k].s);
	EXPECT(rc, 0);
	if (rc) {
		segs[k].s = NULL;
		return;
	}
	segs[k].closed = false;
	segs[k].ro = ro;
	segs[k].handles = 0;
}

static void op_seg_close(void)
{
	int k = (int)pick(NSEG);
	if (!segs[k].s)
		return;
	if (segs[k].closed) { /* the memory is there while a handle is */
		EXPECT(shmlock_close(segs[k].s), SHMLOCK_ECLOSED);
		return;
	}
	EXPECT(shmlock_close(segs[k].s), 0);
	segs[k].closed = true;
	if (segs[k].handles == 0)
		segs[k].s = NULL;
}

/* A segment of odd sizes elsewhere: made (then closed and removed) or
 * refused with SHMLOCK_ELIMIT. */
static void op_create_odd(void)
{
	static const int64_t vals[] = {0, -1, 1, 7, (int64_t)1 << 21, INT64_MAX, INT64_MIN, INT64_MAX / 2 + 1};
	shmlock_options o = {0};
	int64_t *f[] = {&o.slots, &o.upgrades, &o.upgrade_readers, &o.txn_records, &o.txn_arena_bytes,
	                &o.lockmgr_entries, &o.claim_refs, &o.data_bytes, &o.data_regions, &o.ready_timeout_ns};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		*f[i] = pick(3) ? 0 : vals[pick(8)];
	char p2[256];
	check_temp_path(p2, sizeof p2, "fuzz-odd"); /* named for the Go tests' sweep of dead tests' files */
	shmlock_segment *s = NULL;
	int rc = shmlock_create(p2, &o, &s);
	EXPECT_TRUE(rc == 0 || rc == SHMLOCK_ELIMIT);
	if (rc != 0) {
		EXPECT_TRUE(access(p2, F_OK) != 0);
		return;
	}
	uint64_t n;
	shm_table_of(s, SHM_OWNER_SLOTS, &n);
	EXPECT_TRUE(n == (uint64_t)(o.slots == 0 ? 64 : o.slots < 0 ? 0 : o.slots));
	EXPECT(shmlock_close(s), 0);
	EXPECT(shmlock_open(p2, &o, &s), 0);
	EXPECT(shmlock_close(s), 0);
	EXPECT(shmlock_remove(p2), 0);
}

/* ------------------------------------------------------------- spinlocks */

static struct shm_owner_slot *slot_words(int i)
{
	shmlock_segment *s = any_open_seg();
	if (!s)
		return NULL;
	uint64_t n;
	struct shm_owner_slot *t = shm_table_of(s, SHM_OWNER_SLOTS, &n);
	return (uint64_t)i < n ? &t[i] : NULL;
}

static void slot_reset(int i) { slots[i] = (struct slot){0, 0, 0}; }

static void check_slot(int i)
{
	struct shm_owner_slot *w = slot_words(i);
	if (!w)
		return;
	struct slot *m = &slots[i];
	EXPECT_TRUE(atomic_load(&w->pid) == (m->holder ? shm_self() : 0));
	EXPECT_TRUE(atomic_load(&w->tid) == m->holder);
	EXPECT_TRUE(atomic_load(&w->recursion) == m->depth);
	EXPECT_TRUE(atomic_load(&w->token) == m->tok);
}

static int first_free_claim(struct claim *c)
{
	for (int i = 0; i < NNAME; i++) {
		bool used = false;
		for (int j = 0; j < NNAME; j++)
			used = used || c[j].idx == i;
		if (!used)
			return i;
	}
	return -1;
}

static int free_spin(void)
{
	for (int i = 0; i < NSPIN; i++)
		if (!spins[i].l)
			return i;
	return -1;
}

static void op_spin_open(void)
{
	int h = free_spin(), k = seg_pick(true);
	int idx = (int)pick(12) - 2; /* -2..9: out of range too */
	int mode = (int)pick(3);     /* 2: bad */
	if (h < 0 || k < 0)
		return;
	shmlock_spin *l = NULL;
	int want = mode == 2 ? SHMLOCK_EINVAL : segs[k].closed ? SHMLOCK_ECLOSED : segs[k].ro ? SHMLOCK_EREADONLY
	         : idx < 0 || idx >= NSLOT ? SHMLOCK_EINDEX : 0;
	if (want == 0 && idx < NNAME) /* the names' slots: only look */
		return;
	int rc = shmlock_spin_open(segs[k].s, (size_t)(ssize_t)idx, mode, &l);
	EXPECT(rc, want);
	if (rc == 0) {
		spins[h] = (struct spinh){l, k, idx, mode, -1};
		segs[k].handles++;
		EXPECT(shmlock_spin_index(l), idx);
	}
}

static void op_spin_named(void)
{
	int h = free_spin(), k = seg_pick(true);
	int ni = (int)pick(NNAME + 2), mode = (int)pick(3);
	if (h < 0 || k < 0)
		return;
	shmlock_spin *l = NULL;
	if (ni >= NNAME) {
		const char *bad = ni == NNAME ? bad_names[pick(NBAD)] : NULL;
		EXPECT(shmlock_spin_named(segs[k].s, bad, mode, &l), bad ? SHMLOCK_EBADNAME : SHMLOCK_EINVAL);
		return;
	}
	struct claim *c = &spin_claims[ni];
	int want = mode == 2 ? SHMLOCK_EINVAL : segs[k].closed ? SHMLOCK_ECLOSED : segs[k].ro ? SHMLOCK_EREADONLY
	         : c->idx >= 0 && c->use != mode + 1 ? SHMLOCK_EUSEMISMATCH : 0;
	int rc = shmlock_spin_named(segs[k].s, names[ni], mode, &l);
	EXPECT(rc, want);
	if (rc != 0)
		return;
	int idx = c->idx;
	if (idx < 0) { /* a fresh claim: the slot is zeroed */
		idx = first_free_claim(spin_claims);
		slot_reset(idx);
		*c = (struct claim){idx, mode + 1, 0};
	}
	c->refs++;
	EXPECT(shmlock_spin_index(l), idx);
	spins[h] = (struct spinh){l, k, idx, mode, ni};
	segs[k].handles++;
}

/* The end of a name's last reference frees its entry if the lock is free. */
static void spin_unref(int ni)
{
	struct claim *c = &spin_claims[ni];
	if (--c->refs > 0)
		return;
	struct slot *s = &slots[c->idx];
	bool free = s->holder == 0 && s->depth == 0 && (c->use == 1 || s->tok == 0);
	if (free) {
		slot_reset(c->idx);
		c->idx = -1;
	}
}

static void op_spin_close(void)
{
	int h = (int)pick(NSPIN);
	if (!spins[h].l)
		return;
	EXPECT(shmlock_spin_close(spins[h].l), 0);
	if (spins[h].name >= 0)
		spin_unref(spins[h].name);
	seg_put(spins[h].seg);
	spins[h].l = NULL;
}

static uint64_t holder_of(int mode, uint32_t b, bool *bad)
{
	if (mode == SHMLOCK_PIDTID) {
		*bad = b == 3;
		return b == 3 ? 0 : holders[b];
	}
	*bad = b >= 2;
	return b == 2 ? 0 : b == 3 ? UINT64_C(0xabcd00000000) : tokens[b];
}

/* grantable: 0 the call would grant now, 1 it would wait. */
static int spin_would(struct spinh *sp, uint64_t holder)
{
	struct slot *s = &slots[sp->idx];
	if (sp->mode == SHMLOCK_TOKEN)
		return s->tok != 0;
	return s->holder != 0 && s->holder != holder;
}

static void spin_grant(struct spinh *sp, uint64_t holder)
{
	struct slot *s = &slots[sp->idx];
	if (sp->mode == SHMLOCK_TOKEN)
		s->tok = holder;
	else if (s->holder == holder)
		s->depth++;
	else
		s->holder = holder, s->depth = 0;
}

static void op_spin_lock(void)
{
	int h = (int)pick(NSPIN), kind = (int)pick(4);
	uint32_t hb = pick(4);
	static const int64_t timeouts[] = {0, 1, 1000, 200000, -1, INT64_MAX, INT64_MIN};
	int64_t t = timeouts[pick(7)];
	if (!spins[h].l)
		return;
	struct spinh *sp = &spins[h];
	bool bad;
	uint64_t holder = holder_of(sp->mode, hb, &bad);
	int want;
	if (bad)
		want = SHMLOCK_EBADIDENTITY;
	else if (segs[sp->seg].closed)
		want = SHMLOCK_ECLOSED;
	else if (!spin_would(sp, holder))
		want = 0;
	else if (kind == 0 || (kind == 2 && t == 0))
		want = SHMLOCK_EWOULDBLOCK;
	else if (kind == 2 && t > 0 && t < INT64_MAX)
		want = SHMLOCK_ETIMEDOUT;
	else
		return; /* it would wait for ever */
	int rc = kind == 0 ? shmlock_spin_trylock(sp->l, holder)
	       : kind == 1 ? shmlock_spin_lock(sp->l, holder)
	       : kind == 2 ? shmlock_spin_timedlock(sp->l, holder, t)
	       : shmlock_spin_timedlock(sp->l, holder, -1);
	EXPECT(rc, want);
	if (rc == 0 && want == 0)
		spin_grant(sp, holder);
	check_slot(sp->idx);
}

static void op_spin_unlock(void)
{
	int h = (int)pick(NSPIN);
	uint32_t hb = pick(4);
	bool mark = pick(4) == 0;
	if (!spins[h].l)
		return;
	struct spinh *sp = &spins[h];
	struct slot *s = &slots[sp->idx];
	bool bad;
	uint64_t holder = holder_of(sp->mode, hb, &bad);
	bool holds = sp->mode == SHMLOCK_TOKEN ? s->tok == holder : s->holder == holder;
	int want = bad ? SHMLOCK_EBADIDENTITY : holds ? 0 : SHMLOCK_ENOTOWNER;
	if (mark) {
		EXPECT(shmlock_spin_mark_consistent(sp->l, holder), want);
		EXPECT(shmlock_spin_inconsistent(sp->l), 0);
		return;
	}
	EXPECT(shmlock_spin_unlock(sp->l, holder), want);
	if (want == 0) {
		if (sp->mode == SHMLOCK_TOKEN)
			s->tok = 0;
		else if (s->depth > 0)
			s->depth--;
		else
			s->holder = 0, s->tok++;
	}
	EXPECT_TRUE(shmlock_spin_generation(sp->l) == (sp->mode == SHMLOCK_TOKEN ? 0 : s->tok));
	check_slot(sp->idx);
}

/* ------------------------------------------------------- upgrade mutexes */

static int free_upg(void)
{
	for (int i = 0; i < NUPG; i++)
		if (!upgs[i].m)
			return i;
	return -1;
}

/* What the other handles of mutex idx hold. */
static void upg_others(struct upgh *me, bool *w, bool *u, bool *uw, uint32_t *s, int *recs)
{
	*w = *u = *uw = false;
	*s = 0;
	*recs = 0;
	for (int i = 0; i < NUPG; i++) {
		struct upgh *o = &upgs[i];
		if (!o->m || o->idx != me->idx)
			continue;
		*recs += o->rec;
		if (o == me)
			continue;
		*w = *w || o->w;
		*u = *u || o->u;
		*uw = *uw || o->uw;
		*s += o->s;
	}
}

static void check_upg(int idx)
{
	shmlock_segment *sg = any_open_seg();
	if (!sg)
		return;
	uint64_t n;
	struct shm_upgrade_entry *e = (struct shm_upgrade_entry *)shm_table_of(sg, SHM_UPGRADES, &n) + idx;
	struct shm_reader_record *r = (struct shm_reader_record *)sg->tables[SHM_UPGRADE_READERS].base + idx * NREADERS;
	bool w = false, u = false, uw = false;
	uint32_t sh = 0, recs = 0;
	for (int i = 0; i < NUPG; i++) {
		if (!upgs[i].m || upgs[i].idx != idx)
			continue;
		w = w || upgs[i].w, u = u || upgs[i].u, uw = uw || upgs[i].uw;
		sh += upgs[i].s, recs += upgs[i].rec;
	}
	uint32_t st = atomic_load(&e->state);
	uint64_t wr = atomic_load(&e->writer);
	EXPECT_TRUE(((st & SHM_UPG_WRITE) || (wr & SHM_UPG_WRITER_UNIQUE)) == (w || uw));
	EXPECT_TRUE(!!(st & SHM_UPG_UPGRADE) == u);
	EXPECT_TRUE((st & (SHM_UPG_PENDING | SHM_UPG_INCONSISTENT)) == 0);
	EXPECT_TRUE(((wr & SHM_PID_MASK) != 0) == w);
	EXPECT_TRUE((atomic_load(&e->upgrader) != 0) == u);
	uint32_t sum = 0, owned = 0;
	for (int j = 0; j < NREADERS; j++)
		sum += atomic_load(&r[j].count), owned += atomic_load(&r[j].owner) != 0;
	EXPECT_TRUE(sum == sh);
	EXPECT_TRUE(owned == recs);
	EXPECT_TRUE(atomic_load(&e->generation) == upg_gen[idx]);
}

static void op_upg_open(void)
{
	int h = free_upg(), k = seg_pick(true);
	int how = (int)pick(3), ni = (int)pick(NNAME + 2), idx = (int)pick(12) - 2;
	if (h < 0 || k < 0)
		return;
	shmlock_upgrade *m = NULL;
	int want = 0, rc;
	if (how == 0) { /* by index */
		want = segs[k].closed ? SHMLOCK_ECLOSED : segs[k].ro ? SHMLOCK_EREADONLY
		     : idx < 0 || idx >= NSLOT ? SHMLOCK_EINDEX : 0;
		if (want == 0 && idx < NNAME)
			return;
		rc = shmlock_upgrade_open(segs[k].s, (size_t)(ssize_t)idx, &m);
		EXPECT(rc, want);
		ni = -1;
	} else if (ni >= NNAME) {
		const char *bad = ni == NNAME ? bad_names[pick(NBAD)] : NULL;
		EXPECT(shmlock_upgrade_named(segs[k].s, bad, &m), bad ? SHMLOCK_EBADNAME : SHMLOCK_EINVAL);
		return;
	} else {
		struct claim *c = &upg_claims[ni];
		want = segs[k].closed ? SHMLOCK_ECLOSED : segs[k].ro ? SHMLOCK_EREADONLY : 0;
		rc = shmlock_upgrade_named(segs[k].s, names[ni], &m);
		EXPECT(rc, want);
		if (rc == 0) {
			if (c->idx < 0) {
				c->idx = first_free_claim(upg_claims);
				upg_gen[c->idx] = 0;
				c->refs = 0;
			}
			c->refs++;
			idx = c->idx;
		}
	}
	if (rc != 0)
		return;
	EXPECT(shmlock_upgrade_index(m), idx);
	upgs[h] = (struct upgh){.m = m, .seg = k, .idx = idx, .name = ni};
	segs[k].handles++;
}

static void op_upg_close(void)
{
	int h = (int)pick(NUPG);
	struct upgh *u = &upgs[h];
	if (!u->m)
		return;
	bool held = u->w || u->u || u->s;
	EXPECT(shmlock_upgrade_close(u->m), held ? SHMLOCK_EHELD : 0);
	if (held)
		return;
	if (u->name >= 0 && --upg_claims[u->name].refs == 0) {
		upg_gen[upg_claims[u->name].idx] = 0; /* freed: zeroed */
		upg_claims[u->name].idx = -1;
	}
	int idx = u->idx;
	seg_put(u->seg);
	u->m = NULL;
	check_upg(idx);
}

static int64_t upg_timeout(int *kind)
{
	/* kind: 0 try, 1 for ever, 2 timed (the timeout returned) */
	static const int64_t ts[] = {0, 1, 1000, 100000, -1, INT64_MAX, INT64_MIN};
	*kind = (int)pick(3);
	return *kind == 2 ? ts[pick(7)] : 0;
}

/* The code of a call that would wait: try EWOULDBLOCK, a timed one with a
 * real bound ETIMEDOUT, 1 for one that would wait for ever (not made). */
static int blocked(int kind, int64_t t)
{
	if (kind == 0 || (kind == 2 && t == 0))
		return SHMLOCK_EWOULDBLOCK;
	if (kind == 2 && t > 0 && t < INT64_MAX)
		return SHMLOCK_ETIMEDOUT;
	return 1;
}

static void op_upg(void)
{
	int h = (int)pick(NUPG), op = (int)pick(12), kind;
	int64_t t = upg_timeout(&kind);
	struct upgh *me = &upgs[h];
	if (!me->m)
		return;
	bool ow, ou, ouw;
	uint32_t os;
	int recs;
	upg_others(me, &ow, &ou, &ouw, &os, &recs);
	bool closed = segs[me->seg].closed;
	shmlock_upgrade *m = me->m;
	int want, rc;
	switch (op) {
	case 0: /* unique */
		want = closed ? SHMLOCK_ECLOSED : (me->w || me->u || me->s) ? SHMLOCK_EHELD
		     : (ow || ou || os) ? blocked(kind, t) : 0;
		if (want == 1)
			return;
		rc = kind == 0 ? shmlock_upgrade_trylock(m) : kind == 1 ? shmlock_upgrade_lock(m) : shmlock_upgrade_timedlock(m, t);
		EXPECT(rc, want);
		if (rc == 0 && want == 0)
			me->w = true;
		break;
	case 1: /* shared */
		want = closed ? SHMLOCK_ECLOSED : (me->w || me->uw) ? SHMLOCK_EHELD
		     : (!me->rec && recs >= NREADERS) ? SHMLOCK_ETOOMANYREADERS : (ow || ouw) ? blocked(kind, t) : 0;
		if (want == 1)
			return;
		rc = kind == 0 ? shmlock_upgrade_trylock_shared(m) : kind == 1 ? shmlock_upgrade_lock_shared(m)
		   : shmlock_upgrade_timedlock_shared(m, t);
		EXPECT(rc, want);
		if (!closed && !(me->w || me->uw) && want != SHMLOCK_ETOOMANYREADERS)
			me->rec = true; /* a shared attempt claims the handle's record */
		if (rc == 0 && want == 0)
			me->s++;
		break;
	case 2: /* upgrade */
		want = closed ? SHMLOCK_ECLOSED : (me->w || me->u) ? SHMLOCK_EHELD : (ow || ou) ? blocked(kind, t) : 0;
		if (want == 1)
			return;
		rc = kind == 0 ? shmlock_upgrade_trylock_upgrade(m) : kind == 1 ? shmlock_upgrade_lock_upgrade(m)
		   : shmlock_upgrade_timedlock_upgrade(m, t);
		EXPECT(rc, want);
		if (rc == 0 && want == 0)
			me->u = true;
		break;
	case 3: /* upgrade to unique */
		want = closed ? SHMLOCK_ECLOSED : !me->u ? (ou ? SHMLOCK_ENOTOWNER : SHMLOCK_ENOTHELD)
		     : (me->uw || me->s) ? SHMLOCK_EHELD : os ? blocked(kind, t) : 0;
		if (want == 1)
			return;
		rc = kind == 0 ? shmlock_upgrade_try_upgrade_to_unique(m) : kind == 1 ? shmlock_upgrade_upgrade_to_unique(m)
		   : shmlock_upgrade_timed_upgrade_to_unique(m, t);
		EXPECT(rc, want);
		if (rc == 0 && want == 0)
			me->uw = true;
		break;
	case 4:
		want = me->w ? 0 : ow ? SHMLOCK_ENOTOWNER : SHMLOCK_ENOTHELD;
		EXPECT(shmlock_upgrade_unlock(m), want);
		if (want == 0)
			me->w = false, upg_gen[me->idx]++;
		break;
	case 5:
		want = me->s ? 0 : SHMLOCK_ENOTHELD;
		EXPECT(shmlock_upgrade_unlock_shared(m), want);
		if (want == 0)
			me->s--;
		break;
	case 6:
		want = me->u ? (me->uw ? SHMLOCK_ENOTHELD : 0) : ou ? SHMLOCK_ENOTOWNER : SHMLOCK_ENOTHELD;
		EXPECT(shmlock_upgrade_unlock_upgrade(m), want);
		if (want == 0)
			me->u = false, upg_gen[me->idx]++;
		break;
	case 7: /* unique to shared */
		want = closed ? SHMLOCK_ECLOSED : !(me->w || me->uw) ? ((ow || ouw) ? SHMLOCK_ENOTOWNER : SHMLOCK_ENOTHELD)
		     : (!me->rec && recs >= NREADERS) ? SHMLOCK_ETOOMANYREADERS : 0;
		EXPECT(shmlock_upgrade_unique_to_shared(m), want);
		if (want == 0) {
			me->rec = true;
			me->s++;
			me->w = me->u = me->uw = false;
			upg_gen[me->idx]++;
		}
		break;
	case 8: /* unique to upgrade */
		if (me->uw)
			want = 0;
		else if (closed)
			want = SHMLOCK_ECLOSED;
		else if (!me->w)
			want = (ow || ouw) ? SHMLOCK_ENOTOWNER : SHMLOCK_ENOTHELD;
		else
			want = ou ? SHMLOCK_EWOULDBLOCK : 0;
		EXPECT(shmlock_upgrade_unique_to_upgrade(m), want);
		if (want == 0 && me->uw) {
			me->uw = false;
		} else if (want == 0) {
			me->w = false, me->u = true;
			upg_gen[me->idx]++;
		}
		break;
	case 9:
		EXPECT(shmlock_upgrade_mark_consistent(m), (me->w || me->uw) ? 0 : SHMLOCK_ENOTHELD);
		EXPECT(shmlock_upgrade_inconsistent(m), 0);
		break;
	default:
		EXPECT_TRUE(shmlock_upgrade_generation(m) == (closed ? 0 : upg_gen[me->idx]));
		break;
	}
	check_upg(me->idx);
}

/* ---------------------------------------------------------- lock manager */

static void op_lm_open(void)
{
	int h = (int)pick(NLM), k = seg_pick(true);
	if (lms[h].m || k < 0)
		return;
	int rc = shmlock_lockmgr_open(segs[k].s, &lms[h].m);
	EXPECT(rc, segs[k].closed ? SHMLOCK_ECLOSED : 0);
	if (rc == 0) {
		lms[h].seg = k;
		segs[k].handles++;
	} else {
		lms[h].m = NULL;
	}
}

static void op_lm_close(void)
{
	int h = (int)pick(NLM);
	if (!lms[h].m)
		return;
	EXPECT(shmlock_lockmgr_close(lms[h].m), 0);
	seg_put(lms[h].seg);
	lms[h].m = NULL;
}

/* A resource or owner name: i < n a good one, n NULL, else a bad one. */
static const char *lm_name(const char **good, int n, int i, bool owner, int *bad)
{
	static const char *bad_res[] = {"", "x\x01", "\xff", "\xc0\xaf", "\x7f",
	                                "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr"};
	static const char *bad_own[] = {"", "\x01", "\xed\xa0\x80", "ooooooooooooooooooooooooooooooooo"};
	*bad = i >= n;
	if (i < n)
		return good[i];
	if (i == n)
		return NULL;
	return owner ? bad_own[pick(4)] : bad_res[pick(6)];
}

static void op_lm(void)
{
	int h = (int)pick(NLM), op = (int)pick(5), ri = (int)pick(NRES + 2), oi = (int)pick(NOWN + 2);
	if (!lms[h].m)
		return;
	shmlock_lockmgr *m = lms[h].m;
	int rbad, obad;
	const char *res = lm_name(res_names, NRES, ri, false, &rbad), *own = lm_name(own_names, NOWN, oi, true, &obad);
	bool closed = segs[lms[h].seg].closed, ro = segs[lms[h].seg].ro;
	int names_rc = rbad ? SHMLOCK_EINVALID_RESOURCE : obad ? SHMLOCK_EINVALID_OWNER : 0;
	shmlock_lock_info info;
	switch (op) {
	case 0: { /* acquire */
		int mode = (int)pick(4), ob = (int)pick(8);
		static const int modes[] = {SHMLOCK_EXCLUSIVE, SHMLOCK_COLLABORATIVE,
		                            SHMLOCK_COLLABORATIVE | SHMLOCK_ACQUIRE_EAGER, 3};
		shmlock_acquire_options o = {0};
		static const int64_t ttls[] = {0, 3600 * INT64_C(1000000000), INT64_MAX, -1};
		o.ttl_ns = ttls[ob & 3];
		bool bad_opts = o.ttl_ns < 0;
		int conflict_rc = SHMLOCK_ERESOURCE_LOCKED;
		switch (ob >> 2) {
		case 1:
			o.retries = 1, o.backoff_initial_ns = 1000, o.backoff_max_ns = 2000;
			conflict_rc = SHMLOCK_EACQUISITION_FAILED;
			break;
		}
		if (pick(8) == 0)
			o.retries = -2, bad_opts = true;
		else if (pick(8) == 0)
			o.retries = SHMLOCK_RETRY_FOREVER, o.wait_ns = 20000, conflict_rc = SHMLOCK_EWAIT_TIMEOUT;
		else if (pick(8) == 0)
			o.backoff_initial_ns = 10, o.backoff_max_ns = 5, bad_opts = true;
		int md = modes[mode] & ~SHMLOCK_ACQUIRE_EAGER;
		int want = names_rc;
		if (!want && md != SHMLOCK_EXCLUSIVE && md != SHMLOCK_COLLABORATIVE)
			want = SHMLOCK_EINVALID_MODE;
		if (!want && bad_opts)
			want = SHMLOCK_EINVALID_OPTIONS;
		if (!want && closed)
			want = SHMLOCK_ECLOSED;
		if (!want && ro)
			want = SHMLOCK_EREADONLY;
		if (!want && lm_mode[ri][oi])
			want = SHMLOCK_EALREADY_HELD;
		if (!want)
			for (int j = 0; j < NOWN; j++)
				if (lm_mode[ri][j] && (md == SHMLOCK_EXCLUSIVE || lm_mode[ri][j] != md))
					want = conflict_rc;
		bool with_info = pick(2);
		int rc = shmlock_lockmgr_acquire(m, res, own, modes[mode], &o, with_info ? &info : NULL);
		if (rc == SHMLOCK_ELOCK_TABLE_FULL && want == 0 && lm_small)
			return;
		EXPECT(rc, want);
		if (rc == 0 && want == 0) {
			lm_mode[ri][oi] = md;
			EXPECT(shmlock_lockmgr_check_version(m, res, 0), SHMLOCK_EVERSION_CONFLICT);
			if (with_info) {
				EXPECT(shmlock_lockmgr_check_version(m, res, info.version), 0);
				EXPECT_TRUE(info.attempts == 1 && !info.reclaimed && !info.inconsistent);
				EXPECT_TRUE(o.ttl_ns == 0 ? info.expires_ns == 0 : info.expires_ns > info.acquired_ns);
			}
		}
		break;
	}
	case 1: { /* release */
		int want = names_rc;
		if (!want && ro)
			want = SHMLOCK_EREADONLY;
		bool others = false;
		for (int j = 0; j < NOWN; j++)
			others = others || (!rbad && !obad && j != oi && lm_mode[ri][j]);
		if (!want && !lm_mode[ri][oi] && others)
			want = SHMLOCK_ELOCK_NOT_HELD;
		EXPECT(shmlock_lockmgr_release(m, res, own), want);
		if (!names_rc && !ro)
			lm_mode[ri][oi] = 0;
		break;
	}
	case 2: { /* refresh */
		static const int64_t ttls[] = {0, 1000000000, INT64_MAX, -1, INT64_MIN};
		int64_t ttl = ttls[pick(5)];
		int want = names_rc;
		if (!want && ttl < 0)
			want = SHMLOCK_EINVALID_OPTIONS;
		if (!want && closed)
			want = SHMLOCK_ECLOSED;
		if (!want && ro)
			want = SHMLOCK_EREADONLY;
		if (!want && !lm_mode[ri][oi])
			want = SHMLOCK_ELOCK_NOT_HELD;
		int rc = shmlock_lockmgr_refresh(m, res, own, ttl, &info);
		EXPECT(rc, want);
		if (rc == 0)
			EXPECT_TRUE(info.expires_ns == 0 ? ttl == 0 : info.expires_ns > info.acquired_ns);
		break;
	}
	case 3: { /* mark consistent: as release, also after the close */
		int want = names_rc;
		if (!want && ro)
			want = SHMLOCK_EREADONLY;
		if (!want && !lm_mode[ri][oi])
			want = SHMLOCK_ELOCK_NOT_HELD;
		EXPECT(shmlock_lockmgr_mark_consistent(m, res, own), want);
		break;
	}
	default: {
		int rc = shmlock_lockmgr_check_version(m, res, UINT64_MAX);
		EXPECT(rc, rbad ? SHMLOCK_EINVALID_RESOURCE : closed ? SHMLOCK_ECLOSED : SHMLOCK_EVERSION_CONFLICT);
		break;
	}
	}
}

/* ------------------------------------------------------------ data, misc */

static void fill(uint8_t *p, uint64_t n, int ni)
{
	for (uint64_t j = 0; j < n; j++)
		p[j] = (uint8_t)(ni * 37 + j);
}

static bool filled(const uint8_t *p, uint64_t n, int ni)
{
	for (uint64_t j = 0; j < n; j++)
		if (p[j] != (uint8_t)(ni * 37 + j))
			return false;
	return true;
}

static void op_data(void)
{
	int k = seg_pick(false), ni = (int)pick(NNAME + 1);
	static const size_t sizes[] = {0, 1, 64, 100, 4096, 1 << 20, SIZE_MAX, (size_t)1 << 40};
	size_t size = sizes[pick(8)];
	if (k < 0)
		return;
	void *p = NULL;
	if (ni == NNAME) {
		EXPECT(shmlock_data(segs[k].s, bad_names[pick(NBAD)], size, &p), SHMLOCK_EBADNAME);
		return;
	}
	struct region_model *r = &regions[ni];
	int want;
	if (r->claimed)
		want = size && size != r->size ? SHMLOCK_EREGIONSIZE : 0;
	else if (size == 0)
		want = SHMLOCK_ENOTFOUND;
	else if (segs[k].ro)
		want = SHMLOCK_EREADONLY;
	else if (size > data_area - data_end)
		want = SHMLOCK_EDATAFULL;
	else
		want = 0;
	int rc = shmlock_data(segs[k].s, names[ni], size, &p);
	EXPECT(rc, want);
	if (rc != 0 || want != 0)
		return;
	uint64_t off = (uint64_t)((uint8_t *)p - (uint8_t *)segs[k].s->tables[SHM_DATA].base);
	if (!r->claimed) {
		*r = (struct region_model){true, size, data_end};
		data_end = (data_end + size + 63) & ~(uint64_t)63;
		if (!segs[k].ro)
			fill(p, size, ni);
	}
	EXPECT_TRUE(off == r->offset);
	EXPECT_TRUE(filled(p, r->size, ni));
}

static void op_null(void)
{
	shmlock_segment *s = NULL;
	shmlock_spin *l = NULL;
	shmlock_upgrade *u = NULL;
	shmlock_lockmgr *m = NULL;
	void *p;
	switch (pick(8)) {
	case 0:
		EXPECT(shmlock_close(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_open(path, NULL, NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_create(NULL, NULL, &s), SHMLOCK_EBADPATH);
		EXPECT(shmlock_open("", NULL, &s), SHMLOCK_EBADPATH);
		EXPECT(shmlock_open_or_create("dir/", NULL, &s), SHMLOCK_EBADPATH);
		EXPECT(shmlock_remove(".."), SHMLOCK_EBADPATH);
		break;
	case 1:
		EXPECT(shmlock_spin_open(NULL, 0, 0, &l), SHMLOCK_EINVAL);
		EXPECT(shmlock_spin_named(NULL, "a", 0, &l), SHMLOCK_EINVAL);
		EXPECT(shmlock_spin_close(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_spin_index(NULL), SHMLOCK_EINVAL);
		break;
	case 2:
		EXPECT(shmlock_spin_lock(NULL, 1), SHMLOCK_EINVAL);
		EXPECT(shmlock_spin_trylock(NULL, 1), SHMLOCK_EINVAL);
		EXPECT(shmlock_spin_timedlock(NULL, 1, 5), SHMLOCK_EINVAL);
		EXPECT(shmlock_spin_unlock(NULL, 1), SHMLOCK_EINVAL);
		EXPECT(shmlock_spin_mark_consistent(NULL, 1), SHMLOCK_EINVAL);
		EXPECT(shmlock_spin_inconsistent(NULL), 0);
		EXPECT_TRUE(shmlock_spin_generation(NULL) == 0);
		break;
	case 3:
		EXPECT(shmlock_upgrade_open(NULL, 0, &u), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_named(NULL, "a", &u), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_close(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_index(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_lock(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_trylock(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_timedlock(NULL, 5), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_timedlock(NULL, 0), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_unlock(NULL), SHMLOCK_EINVAL);
		break;
	case 4:
		EXPECT(shmlock_upgrade_lock_shared(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_trylock_shared(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_timedlock_shared(NULL, 5), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_unlock_shared(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_lock_upgrade(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_trylock_upgrade(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_timedlock_upgrade(NULL, 5), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_unlock_upgrade(NULL), SHMLOCK_EINVAL);
		break;
	case 5:
		EXPECT(shmlock_upgrade_upgrade_to_unique(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_try_upgrade_to_unique(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_timed_upgrade_to_unique(NULL, 5), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_unique_to_shared(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_unique_to_upgrade(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_mark_consistent(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_upgrade_inconsistent(NULL), 0);
		EXPECT_TRUE(shmlock_upgrade_generation(NULL) == 0);
		break;
	case 6:
		EXPECT(shmlock_lockmgr_open(NULL, &m), SHMLOCK_EINVAL);
		EXPECT(shmlock_lockmgr_close(NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_lockmgr_acquire(NULL, "r", "o", 1, NULL, NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_lockmgr_release(NULL, "r", "o"), SHMLOCK_EINVAL);
		EXPECT(shmlock_lockmgr_refresh(NULL, "r", "o", 0, NULL), SHMLOCK_EINVAL);
		EXPECT(shmlock_lockmgr_mark_consistent(NULL, "r", "o"), SHMLOCK_EINVAL);
		EXPECT(shmlock_lockmgr_check_version(NULL, "r", 0), SHMLOCK_EINVAL);
		break;
	default:
		EXPECT(shmlock_data(NULL, "a", 1, &p), SHMLOCK_EINVAL);
		for (int k = 0; k < NSEG; k++)
			if (segs[k].s && !segs[k].closed) {
				EXPECT(shmlock_data(segs[k].s, "a", 1, NULL), SHMLOCK_EINVAL);
				EXPECT(shmlock_spin_open(segs[k].s, 0, 0, NULL), SHMLOCK_EINVAL);
				EXPECT(shmlock_upgrade_open(segs[k].s, 0, NULL), SHMLOCK_EINVAL);
				EXPECT(shmlock_lockmgr_open(segs[k].s, NULL), SHMLOCK_EINVAL);
			}
		EXPECT_TRUE(shmlock_strerror(INT_MIN) != NULL && shmlock_strerror(12345) != NULL);
		break;
	}
}

/* ------------------------------------------------------------- one input */

static void teardown_check(void)
{
	/* Give back every hold, close every handle, then look at the words. */
	shmlock_segment *s = NULL;
	int rc = shmlock_open(path, NULL, &s);
	EXPECT(rc, 0);
	if (rc)
		return;
	for (int i = 0; i < NUPG; i++) {
		struct upgh *u = &upgs[i];
		if (!u->m)
			continue;
		if (u->uw)
			EXPECT(shmlock_upgrade_unique_to_upgrade(u->m), 0);
		if (u->u)
			EXPECT(shmlock_upgrade_unlock_upgrade(u->m), 0);
		if (u->w)
			EXPECT(shmlock_upgrade_unlock(u->m), 0);
		for (; u->s; u->s--)
			EXPECT(shmlock_upgrade_unlock_shared(u->m), 0);
		u->w = u->u = u->uw = false;
		EXPECT(shmlock_upgrade_close(u->m), 0);
		seg_put(u->seg);
		u->m = NULL;
	}
	/* Spin holds: by a handle of the slot's mode (named slots too). */
	for (int i = 0; i < NSLOT; i++) {
		for (int mode = 1; mode >= 0; mode--) { /* token first: a pid/tid release bumps the word */
			struct slot *sl = &slots[i];
			uint64_t h = mode == SHMLOCK_PIDTID ? sl->holder : sl->tok;
			if (h == 0 || (mode == SHMLOCK_TOKEN && (uint32_t)h == 0))
				continue;
			if (mode == SHMLOCK_TOKEN && h != tokens[0] && h != tokens[1])
				continue; /* a generation */
			shmlock_spin *l;
			EXPECT(shmlock_spin_open(s, (size_t)i, mode, &l), 0);
			for (uint32_t d = 0; d <= (mode ? 0 : sl->depth); d++)
				EXPECT(shmlock_spin_unlock(l, h), 0);
			EXPECT(shmlock_spin_close(l), 0);
		}
	}
	for (int i = 0; i < NSPIN; i++)
		if (spins[i].l) {
			EXPECT(shmlock_spin_close(spins[i].l), 0);
			seg_put(spins[i].seg);
			spins[i].l = NULL;
		}
	shmlock_lockmgr *lm;
	EXPECT(shmlock_lockmgr_open(s, &lm), 0);
	for (int r = 0; r < NRES; r++)
		for (int o = 0; o < NOWN; o++)
			if (lm_mode[r][o])
				EXPECT(shmlock_lockmgr_release(lm, res_names[r], own_names[o]), 0);
	EXPECT(shmlock_lockmgr_close(lm), 0);
	for (int i = 0; i < NLM; i++)
		if (lms[i].m) {
			EXPECT(shmlock_lockmgr_close(lms[i].m), 0);
			seg_put(lms[i].seg);
			lms[i].m = NULL;
		}
	for (int k = 0; k < NSEG; k++) {
		if (segs[k].s && !segs[k].closed)
			EXPECT(shmlock_close(segs[k].s), 0);
		segs[k].s = NULL;
	}
	/* Every lock is free, every claim unreferenced, every record free. */
	uint64_t n;
	struct shm_owner_slot *sl = shm_table_of(s, SHM_OWNER_SLOTS, &n);
	for (uint64_t i = 0; i < n; i++)
		EXPECT_TRUE(atomic_load(&sl[i].pid) == 0 && atomic_load(&sl[i].recursion) == 0 &&
		            atomic_load(&sl[i].pad) == 0);
	struct shm_upgrade_entry *ue = shm_table_of(s, SHM_UPGRADES, &n);
	for (uint64_t i = 0; i < n; i++) {
		EXPECT_TRUE(atomic_load(&ue[i].state) == 0 && atomic_load(&ue[i].upgrader) == 0);
		EXPECT_TRUE((atomic_load(&ue[i].writer) & SHM_PID_MASK) == 0);
		EXPECT_TRUE((atomic_load(&ue[i].waiters) & 0xffffff) == 0);
	}
	struct shm_reader_record *rr = shm_table_of(s, SHM_UPGRADE_READERS, &n);
	for (uint64_t i = 0; i < n; i++)
		EXPECT_TRUE(atomic_load(&rr[i].owner) == 0 && atomic_load(&rr[i].count) == 0);
	struct shm_claim_ref *cr = shm_table_of(s, SHM_CLAIM_REFS, &n);
	for (uint64_t i = 0; i < n; i++)
		EXPECT_TRUE(atomic_load(&cr[i].owner) == 0);
	for (int kind = SHM_SLOT_DIRECTORY; kind <= SHM_UPGRADE_DIRECTORY; kind += 2) {
		struct shm_dir_entry *d = shm_table_of(s, kind, &n);
		for (uint64_t i = 0; i < n; i++)
			EXPECT_TRUE(atomic_load(&d[i].refs) == 0);
	}
	struct shm_lockmgr_entry *le = shm_table_of(s, SHM_LOCKMGR, &n);
	for (uint64_t i = 0; i < n; i++) {
		EXPECT_TRUE(atomic_load(&le[i].lock) == 0);
		for (int j = 0; j < 2; j++)
			EXPECT_TRUE(atomic_load(&le[i].holders[j].process) == 0);
	}
	EXPECT_TRUE(atomic_load(&s->hdr->registry) == 0);
	EXPECT(shmlock_close(s), 0);
}

static int run(const uint8_t *data, size_t n)
{
	in = data, in_n = n, in_at = 0, failed = 0;
	memset(segs, 0, sizeof segs);
	memset(slots, 0, sizeof slots);
	memset(spins, 0, sizeof spins);
	memset(upgs, 0, sizeof upgs);
	memset(lms, 0, sizeof lms);
	memset(lm_mode, 0, sizeof lm_mode);
	memset(regions, 0, sizeof regions);
	memset(upg_gen, 0, sizeof upg_gen);
	for (int i = 0; i < NNAME; i++)
		spin_claims[i] = upg_claims[i] = (struct claim){-1, 0, 0};
	data_end = 0;
	check_temp_path(path, sizeof path, "fuzz");
	uint8_t cfg = byte();
	lm_small = cfg & 1;
	shmlock_options o = {.slots = NSLOT, .upgrades = NSLOT, .upgrade_readers = NREADERS,
	                     .lockmgr_entries = lm_small ? 3 : 0, .data_bytes = cfg & 2 ? 256 : 0};
	data_area = cfg & 2 ? 256 : 64 << 10;
	int rc = shmlock_create(path, &o, &segs[0].s);
	EXPECT(rc, 0);
	if (rc)
		return 1;
	while (in_at < in_n && failed == 0) {
		switch (pick(16)) {
		case 0: op_seg_open(); break;
		case 1: if (pick(4) == 0) op_seg_close(); break;
		case 2: op_spin_open(); break;
		case 3: op_spin_named(); break;
		case 4: op_spin_close(); break;
		case 5: case 6: op_spin_lock(); break;
		case 7: op_spin_unlock(); break;
		case 8: op_upg_open(); break;
		case 9: op_upg_close(); break;
		case 10: case 11: op_upg(); break;
		case 12: op_lm_open(); break;
		case 13: op_lm_close(); if (pick(2)) op_lm(); break;
		case 14: op_lm(); break;
		default:
			switch (pick(8)) {
			case 0: op_create_odd(); break;
			case 1: case 2: case 3: op_null(); break;
			default: op_data(); break;
			}
			break;
		}
	}
	if (failed == 0)
		teardown_check();
	else /* leave what is held: the process ends; only the file goes */
		memset(segs, 0, sizeof segs);
	shmlock_remove(path);
	return failed;
}

/* ------------------------------------------------------------------ main */

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_rand(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return rng;
}

static int run_random(uint64_t seed, size_t len, const char *dir)
{
	uint8_t buf[4096];
	rng = seed | 1;
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)next_rand();
	char cur[512];
	if (dir) {
		snprintf(cur, sizeof cur, "%s/shmlock-fuzz-cur-%d.bin", dir, (int)getpid());
		FILE *f = fopen(cur, "wb");
		if (f) {
			fwrite(buf, 1, len, f);
			fclose(f);
		}
	}
	int bad = run(buf, len);
	if (bad && dir) {
		char keep[512];
		snprintf(keep, sizeof keep, "%s/shmlock-fuzz-fail-%016llx.bin", dir, (unsigned long long)seed);
		rename(cur, keep);
		fprintf(stderr, "kept %s\n", keep);
	}
	return bad;
}

int main(int argc, char **argv)
{
	holders[0] = shmlock_holder_new(), holders[1] = shmlock_holder_new(), holders[2] = shmlock_holder_thread();
	tokens[0] = shmlock_token_new(), tokens[1] = shmlock_token_new();
	if (argc > 1) {
		for (int i = 1; i < argc; i++) {
			FILE *f = fopen(argv[i], "rb");
			if (!f) {
				perror(argv[i]);
				return 2;
			}
			static uint8_t buf[1 << 16];
			size_t n = fread(buf, 1, sizeof buf, f);
			fclose(f);
			int bad = run(buf, n);
			fprintf(stderr, "%s %s\n", bad ? "FAIL" : "ok  ", argv[i]);
			check_failures += bad;
		}
		return CHECK_DONE();
	}
	const char *lng = getenv("SHMLOCK_LONG");
	if (lng && *lng && strcmp(lng, "0") != 0) {
		const char *secs = getenv("SHMLOCK_FUZZ_SECONDS"), *dir = getenv("SHMLOCK_FUZZ_DIR");
		int64_t end = shm_vdso_now_ns() + (secs ? atoll(secs) : 60) * INT64_C(1000000000);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32), runs = 0;
		while (shm_vdso_now_ns() < end) {
			uint64_t s = seed + runs++ * 0x9e3779b97f4a7c15u;
			if (run_random(s, 64 + (size_t)(s % 1500), dir ? dir : "/tmp")) {
				check_failures++;
				break;
			}
		}
		if (!check_failures) {
			char cur[512];
			snprintf(cur, sizeof cur, "%s/shmlock-fuzz-cur-%d.bin", dir ? dir : "/tmp", (int)getpid());
			unlink(cur);
		}
		fprintf(stderr, "%llu inputs, %lu calls checked\n", (unsigned long long)runs, checks);
		return CHECK_DONE();
	}
	int bad = 0;
	for (uint64_t s = 1; s <= 300 && !bad; s++)
		bad = run_random(s * 0x2545f4914f6cdd1du, 64 + (size_t)(s * 7 % 1200), NULL);
	fprintf(stderr, "%s fuzz (300 seeded inputs, %lu calls checked)\n", bad ? "FAIL" : "ok  ", checks);
	check_failures += bad;
	return CHECK_DONE();
}
