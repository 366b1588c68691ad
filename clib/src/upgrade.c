/* upgrade.c: upgrade mutexes (package upgrade), word for word.
 *
 * An upgrade mutex is one UpgradeEntry and its reader records
 * (docs/FORMAT.md, Upgrade mutexes). Go and C handles contend on the same
 * words with the same protocol, so everything here follows the Go files of upgrade/;
 * the comments name the Go function each C function is.
 *
 * The state word (UpgradeEntry.State):
 *
 *	bit 31  UPG_WRITE        the unique lock is held (alone: by the writer
 *	                         in Writer; with UPG_UPGRADE: by the upgrade
 *	                         holder, after an upgrade to unique)
 *	bit 30  UPG_UPGRADE      the upgrade lock is held by Upgrader
 *	bit 29  UPG_PENDING      the upgrade holder waits for readers to drain
 *	bit 28  UPG_INCONSISTENT a dead holder's unique hold was freed and no
 *	                         unique holder has marked the data consistent
 *	bits 0-27                always 0
 *
 * Readers are counted in reader records (owner process, count), one per
 * handle; a reader adds 1 to its record and then loads State and Writer,
 * backing off if UPG_WRITE, UPG_PENDING or WRITER_UNIQUE is set (Dekker
 * with the writer or drainer, who sets its bit and then reads the records:
 * all seq_cst). Bit j%32 of record 0's Pad is set once record j was ever
 * claimed (the drain mask).
 *
 * The Writer word is the writers' own mutex: a packed identity, possibly
 * with WRITER_UNIQUE (bit 61: the holder holds the unique lock, taken by
 * the fast path in one CAS; see lock_unique) and WRITER_HUNGRY (a writer
 * has waited: the release hands the word to the waiting writers), or a
 * handoff: WRITER_HUNGRY, pid field 0, the release time (CLOCK_MONOTONIC
 * >> 20) in bits 22-60. A handoff older than HANDOFF_EXPIRY units is a
 * free word. A writer's unique hold is WRITER_UNIQUE or UPG_WRITE, never
 * both; WRITER_UNIQUE and UPG_UPGRADE exclude each other as Dekker's pair
 * (the writer CASes Writer and loads State, lock_upgrade CASes State and
 * loads Writer; whoever sees the other steps back).
 *
 * The Waiters word: bits 0-21 sleepers on SharedGate (readers, upgrade
 * seekers), bit 22 the Writer word's holder sleeps on UniqueGate, bit 23
 * the upgrade holder does, bits 24-30 futile wakes of SharedGate.
 * WriterSleepers is a sleepers word over WriterGate (writers waiting for
 * the Writer word; a release wakes one).
 *
 * A C handle is used by one thread at a time (shmlock.h), so its own
 * fields are plain; every word of the segment is a seq_cst atomic.
 */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* State bits. */
#define UPG_WRITE SHM_UPG_WRITE
#define UPG_UPGRADE SHM_UPG_UPGRADE
#define UPG_PENDING SHM_UPG_PENDING
#define UPG_INCONSISTENT SHM_UPG_INCONSISTENT
#define UPG_BLOCK_READERS (UPG_WRITE | UPG_PENDING) /* make a new reader wait (and WRITER_UNIQUE) */
#define UPG_LOCKED (UPG_WRITE | UPG_UPGRADE | UPG_PENDING) /* a hold or a pending upgrade */

/* Waiters bits. */
#define WAITERS_SHARED 1u
#define WAITERS_SHARED_MASK ((1u << 16) - 1)
#define WAITERS_EPOCH (0x3fu << 16) /* drops of the shared count, modulo 64 */
#define UNIQUE_WRITER (1u << 22)
#define UNIQUE_UPGRADER (1u << 23)
#define WAITERS_UNIQUE (UNIQUE_WRITER | UNIQUE_UPGRADER)

/* The Writer word's handoff (see the top of the file). */
#define WRITER_HUNGRY (UINT64_C(1) << 62)
#define WRITER_UNIQUE SHM_UPG_WRITER_UNIQUE
#define STAMP_SHIFT 20
#define STAMP_MASK ((UINT64_C(1) << (61 - SHM_PID_BITS)) - 1)
#define HANDOFF_EXPIRY 2 /* stamp units: at least 1.05 ms */

/* Limits and waiting (upgrade/state.go). */
#define MAX_SHARED ((UINT32_C(1) << 29) - 1)
#define SPIN_LOADS 100
/* A release that finds its writer word taken by an operator's force looks
 * again this many times (each a sched_yield) for the forcer to give it back
 * before it checks that the forcer is alive (upgrade/force.go:
 * forceGiveBackWait). */
#define FORCE_GIVE_BACK_WAIT 1000
/* sched_yields before a sleep (wait). Unlike the lock manager's entry lock,
 * whose holder is a few instructions from unlocking, a waiter here waits
 * for a hold: runs of PAUSEs in their place cost rw90 0.88x/0.79x at 4/8
 * processes on 2 vCPUs (bench/matrix -baseline, 6 rounds), the yield lets
 * the writer run. */
#define SPIN_YIELDS 4
#define WRITER_KEEP_OFF_NS 250
#define LIVENESS_NS (50 * INT64_C(1000000))
#define SOFT_DRAIN_NS INT64_C(1000000)
#define MIN_SLEEP_NS INT64_C(1000)
#define RECORDS_PER_LINE 4
#define MASK_BITS 32

struct shmlock_upgrade {
	shmlock_segment *seg;
	struct shm_upgrade_entry *e;
	struct shm_reader_record *readers; /* nreaders records */
	size_t nreaders;
	size_t index;
	uint64_t pid; /* packed identity of this process */
	uint64_t tid; /* this handle's holder id */
	struct shm_reader_record *rec; /* this handle's record, once claimed */
	bool named;
	struct shm_lock_stats *stats; /* the mutex's contention counters; NULL if none (stats below) */
	int64_t wait_start;           /* shm_now_ns() when the current acquisition began to wait; 0 if it has not */
};

/* ------------------------------------------------------------- atomics */

static inline uint32_t ld32(a32 *p) { return atomic_load(p); }
static inline uint64_t ld64(a64 *p) { return atomic_load(p); }
static inline bool cas32(a32 *p, uint32_t old, uint32_t new)
{
	return atomic_compare_exchange_strong(p, &old, new);
}
static inline bool cas64(a64 *p, uint64_t old, uint64_t new)
{
	return atomic_compare_exchange_strong(p, &old, new);
}

/* ------------------------------------------------------------ handoffs */

static inline bool is_handoff(uint64_t o) { return (o & WRITER_HUNGRY) && (o & SHM_PID_MASK) == 0; }

static inline uint64_t stamp_now(void) { return ((uint64_t)shm_now_ns() >> STAMP_SHIFT) & STAMP_MASK; }

/* handoffWord: the Writer word of a release handed to the hungry now. */
static inline uint64_t handoff_word(void) { return WRITER_HUNGRY | stamp_now() << SHM_PID_BITS; }

static bool handoff_expired(uint64_t o)
{
	uint64_t stamp = (o >> SHM_PID_BITS) & STAMP_MASK;
	return ((stamp_now() - stamp) & STAMP_MASK) >= HANDOFF_EXPIRY;
}

/* writerID: the identity in the Writer word, 0 if free or handed off. */
static inline uint64_t writer_id(uint64_t o) { return is_handoff(o) ? 0 : o & ~(WRITER_HUNGRY | WRITER_UNIQUE); }

/* ----------------------------------------------------------- the handle */

static inline bool seg_closed(const shmlock_upgrade *m) { return shm_closed(m->seg); }

void (*shm_test_hook_alive)(uint64_t identity);

/* OwnerAlive: a holder recorded under another boot is dead. */
static bool alive(const shmlock_upgrade *m, uint64_t id)
{
	if (SHM_UNLIKELY(shm_test_hook_alive != NULL))
		shm_test_hook_alive(id);
	return shm_owner_alive(m->seg, id);
}

/* holdsWriterWord: holds_writer for the Writer word w, as loaded. */
static inline bool holds_writer_word(shmlock_upgrade *m, uint64_t w)
{
	return (w & ~(WRITER_HUNGRY | WRITER_UNIQUE)) == m->pid && ld64(&m->e->writer_tid) == m->tid;
}

static inline bool holds_writer(shmlock_upgrade *m) { return holds_writer_word(m, ld64(&m->e->writer)); }

/* uniqueHeld: the unique lock is held, in either form, by the writer or an
 * upgraded upgrade holder; writerHoldsUnique: by the writer. */
static inline bool unique_held(uint32_t s, uint64_t w) { return (s & UPG_WRITE) || (w & WRITER_UNIQUE); }
static inline bool writer_holds_unique(uint32_t s, uint64_t w)
{
	return (s & (UPG_WRITE | UPG_UPGRADE)) == UPG_WRITE || (w & WRITER_UNIQUE);
}

/* readersBlocked: a reader must wait. */
static inline bool readers_blocked(shmlock_upgrade *m)
{
	return (ld32(&m->e->state) & UPG_BLOCK_READERS) || (ld64(&m->e->writer) & WRITER_UNIQUE);
}

static inline bool holds_upgrader(shmlock_upgrade *m)
{
	return ld64(&m->e->upgrader) == m->pid && ld64(&m->e->upgrader_tid) == m->tid;
}

static inline uint32_t shared_holds(shmlock_upgrade *m) { return m->rec ? ld32(&m->rec->count) : 0; }

static inline int open_err(shmlock_upgrade *m) { return seg_closed(m) ? SHMLOCK_ECLOSED : 0; }

/* ------------------------------------------------- contention counters */

/* upgrade/stats.go: only slow paths touch the counters. An acquisition that
 * misses its first try notes that it waits (begin_wait, at the start of
 * every wait: the first one counts), starts the wait's clock when it first
 * yields or sleeps (time_wait) and records its wait as it returns
 * (end_wait, on the paths that waited): a wait granted while it still spun
 * is recorded untimed (FORMAT.md). The start lives in the handle because
 * the waits are deep in helpers shared by every kind of acquisition; a
 * handle is used by one thread at a time.
 *
 * wait_start: 0 when the acquisition has not waited, WAIT_UNTIMED while it
 * has only spun, else CLOCK_MONOTONIC (positive) when it first left the
 * CPU. */
#define WAIT_UNTIMED (-1)

static inline void begin_wait(shmlock_upgrade *m)
{
	if (m->wait_start == 0)
		m->wait_start = WAIT_UNTIMED;
}

static inline void time_wait(shmlock_upgrade *m)
{
	if (m->wait_start == WAIT_UNTIMED)
		m->wait_start = shm_now_ns();
}

/* endWait: records the wait of the acquisition that returns rc, if it
 * waited: a grant (rc >= 0), or a give-up (timeout, close) if rc < 0. */
static inline int end_wait(shmlock_upgrade *m, int rc)
{
	if (m && m->wait_start != 0) {
		int64_t start = m->wait_start;
		m->wait_start = 0;
		if (start == WAIT_UNTIMED)
			shm_stats_spun(m->stats, rc < 0);
		else
			shm_stats_wait(m->stats, start, rc < 0);
	}
	return rc;
}

/* ------------------------------------------------------------ deadlines */

/* A deadline on CLOCK_MONOTONIC; at < 0: none (Go's Background context). */
struct deadline {
	int64_t at;
};

static struct deadline deadline_in(int64_t timeout_ns)
{
	struct deadline d = {-1};
	if (timeout_ns >= 0) {
		int64_t now = shm_now_ns();
		d.at = timeout_ns > INT64_MAX - now ? INT64_MAX : now + timeout_ns;
	}
	return d;
}

static inline int deadline_err(const struct deadline *d)
{
	return d->at >= 0 && shm_now_ns() >= d->at ? SHMLOCK_ETIMEDOUT : 0;
}

/* ---------------------------------------------------------- gates, wakes */

struct gate {
	a32 *word;
	uint32_t unit; /* a sleeper's registration */
	uint32_t all;  /* the bits of every sleeper of the gate */
};

static inline struct gate shared_gate(shmlock_upgrade *m)
{
	return (struct gate){&m->e->shared_gate, WAITERS_SHARED, WAITERS_SHARED_MASK};
}

/* uniqueGateAs: role is UNIQUE_WRITER or UNIQUE_UPGRADER for a sleeper,
 * 0 for a waker. */
static inline struct gate unique_gate_as(shmlock_upgrade *m, uint32_t role)
{
	return (struct gate){&m->e->unique_gate, role, WAITERS_UNIQUE};
}

static inline struct gate unique_gate(shmlock_upgrade *m) { return unique_gate_as(m, 0); }

/* register: returns the sleeper's ticket on the shared gate (the epoch it
 * counts in), 0 on the unique gate (a flag). */
static uint32_t gate_register(shmlock_upgrade *m, struct gate g)
{
	if (g.unit == WAITERS_SHARED)
		return shm_sleepers_register_in(&m->e->waiters, WAITERS_EPOCH);
	atomic_fetch_or(&m->e->waiters, g.unit);
	return 0;
}

static void gate_unregister(shmlock_upgrade *m, struct gate g, uint32_t ticket)
{
	if (g.unit != WAITERS_SHARED) {
		/* A pending upgrade an operator's force freed while it slept
		 * leaves the bit to the next holder's pending upgrade, which may
		 * have set it since (Go: unregister). */
		uint32_t s = ld32(&m->e->state);
		bool other_pending = (s & (UPG_UPGRADE | UPG_PENDING)) == (UPG_UPGRADE | UPG_PENDING);
		if (g.unit != UNIQUE_UPGRADER || holds_upgrader(m) || !other_pending)
			atomic_fetch_and(&m->e->waiters, ~g.unit);
	} else
		shm_sleepers_unregister_in(&m->e->waiters, WAITERS_SHARED_MASK, WAITERS_EPOCH, ticket);
}

/* wake: every sleeper of g, if it has any; the caller changed the state. */
static void wake_sleepers(shmlock_upgrade *m, struct gate g);

/* wake: the check for sleepers, inline on every release (most find none),
 * then the wake-up. */
static inline void wake(shmlock_upgrade *m, struct gate g)
{
	if ((ld32(&m->e->waiters) & g.all) != 0)
		wake_sleepers(m, g);
}

static __attribute__((noinline)) void wake_sleepers(shmlock_upgrade *m, struct gate g)
{
	atomic_fetch_add(g.word, 1);
	if (shm_futex_wake(g.word, INT_MAX) > 0)
		SHM_STATS_ADD(m->stats, wakeups);
	else if (g.all == WAITERS_SHARED_MASK)
		shm_sleepers_futile_in(&m->e->waiters, WAITERS_SHARED_MASK, WAITERS_EPOCH);
}

/* wakeWriter: one writer asleep on WriterGate; the gate moves first. */
static void wake_writer(shmlock_upgrade *m)
{
	atomic_fetch_add(&m->e->writer_gate, 1);
	if (shm_sleepers_wake_one(&m->e->writer_sleepers, &m->e->writer_gate))
		SHM_STATS_ADD(m->stats, wakeups);
}

/* ------------------------------------------------------------- waiting */

/* liveness: a waiter's schedule of checks for dead holders. */
struct liveness {
	int64_t next; /* 0 before the first sleep */
	bool again;   /* the last wait ended with a check: sleep at once */
};

static bool liveness_due(struct liveness *lv, bool timed_out)
{
	int64_t now = shm_now_ns();
	if (!timed_out && (lv->next == 0 || now < lv->next)) {
		if (lv->next == 0)
			lv->next = now + shm_liveness_ns(LIVENESS_NS);
		return false;
	}
	lv->next = now + shm_liveness_ns(LIVENESS_NS);
	return true;
}

typedef bool (*ready_fn)(shmlock_upgrade *m);

static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The close watch (upgrade/closewatch.go). An acquisition that holds part
 * of the lock while it waits for the rest (lock: the writers' mutex, and
 * maybe UPG_WRITE, while it waits for the upgrade holder or for readers;
 * lock_upgrade: the upgrader word while it waits for a writer;
 * upgrade_to_unique: UPG_PENDING while readers drain) would, should the
 * segment close meanwhile, keep it held by this live process until its next
 * liveness slice, and every other process waits for it. So before it first
 * gives up its CPU (a yield or a sleep) it counts itself in the segment's
 * watchers; shmlock_close, finding any, wakes every upgrade mutex's gates
 * and waits until the count is 0, each acquisition having seen the close
 * and given back what it held (watch_done). The count and the closed flag
 * are Dekker's pair: the watcher adds and then loads closed, close sets
 * closed and then loads the count, so a watcher close did not wait for
 * saw the close before it slept. */
struct watch {
	bool on;
};

/* watch counts w's acquisition in, once; ECLOSED if the segment is closed
 * already (the caller gives back what it holds). w NULL: the acquisition
 * holds nothing while it waits. */
static int watch(shmlock_upgrade *m, struct watch *w)
{
	if (!w || w->on)
		return 0;
	atomic_fetch_add(&m->seg->watchers, 1);
	w->on = true;
	return open_err(m);
}

/* watch_done ends w's watch, if it began: the acquisition returns, having
 * given back what it held if it failed. */
static void watch_done(shmlock_upgrade *m, struct watch *w)
{
	if (!w->on)
		return;
	w->on = false;
	if (atomic_fetch_sub(&m->seg->watchers, 1) == 1 && seg_closed(m))
		shm_futex_wake(&m->seg->watchers, INT_MAX);
}

void shm_wake_watchers(shmlock_segment *seg)
{
	if (atomic_load(&seg->watchers) == 0)
		return;
	uint64_t n;
	struct shm_upgrade_entry *es = shm_table_of(seg, SHM_UPGRADES, &n);
	for (uint64_t i = 0; i < n; i++) {
		/* Closed is set: a sleeper that reads the gate after this bump
		 * sees it before it sleeps (upg_wait); the others wake. Sleepers
		 * of other processes sleep again. */
		atomic_fetch_add(&es[i].shared_gate, 1);
		shm_futex_wake(&es[i].shared_gate, INT_MAX);
		atomic_fetch_add(&es[i].unique_gate, 1);
		shm_futex_wake(&es[i].unique_gate, INT_MAX);
	}
	for (uint32_t k; (k = atomic_load(&seg->watchers)) != 0;)
		shm_futex_wait(&seg->watchers, k, -1);
}

/* wait (upgrade/wait.go): returns 0 once ready (the caller tries again),
 * or with *slice set once a liveness check is due, or ETIMEDOUT at the
 * deadline, or ECLOSED once the segment is closed. w, if not NULL, is the
 * caller's close watch: it holds part of the lock while it waits, and
 * counts itself in before it first yields or sleeps. */
static int upg_wait(shmlock_upgrade *m, struct gate g, const struct deadline *d, struct liveness *lv,
                    ready_fn ready, struct watch *w, bool *slice)
{
	*slice = false;
	begin_wait(m);
	for (int i = 0; i < SPIN_LOADS + SPIN_YIELDS && !lv->again; i++) {
		if (ready(m))
			return open_err(m);
		if (i >= SPIN_LOADS) {
			int rc = watch(m, w);
			if (rc)
				return rc;
			time_wait(m);
			sched_yield();
		}
	}
	lv->again = false;
	int rc = deadline_err(d);
	if (rc)
		return rc;
	int64_t now = shm_now_ns();
	if (lv->next == 0)
		lv->next = now + shm_liveness_ns(LIVENESS_NS);
	int64_t sleep = max64(lv->next - now, MIN_SLEEP_NS);
	if (d->at >= 0)
		sleep = min64(sleep, max64(d->at - now, MIN_SLEEP_NS));
	if (seg_closed(m))
		return SHMLOCK_ECLOSED;
	if ((rc = watch(m, w)) != 0)
		return rc;
	uint32_t ticket = gate_register(m, g);
	uint32_t seq = ld32(g.word);
	if (ready(m) || seg_closed(m)) {
		gate_unregister(m, g, ticket);
		return open_err(m);
	}
	time_wait(m);
	SHM_STATS_ADD(m->stats, sleeps);
	rc = shm_futex_wait(g.word, seq, sleep);
	gate_unregister(m, g, ticket);
	if (seg_closed(m))
		return SHMLOCK_ECLOSED;
	int derr = deadline_err(d);
	if (derr)
		return derr;
	*slice = liveness_due(lv, rc == SHMLOCK_ETIMEDOUT);
	lv->again = *slice;
	return 0;
}

/* readersIn: a shared hold recorded in one of the records mask names. */
static bool readers_in(shmlock_upgrade *m, uint32_t mask)
{
	for (; mask != 0; mask &= mask - 1)
		for (size_t j = (size_t)__builtin_ctz(mask); j < m->nreaders; j += MASK_BITS)
			if (ld32(&m->readers[j].count) != 0)
				return true;
	return false;
}

/* readersZero: no shared hold recorded in the records the mask names.
 * Inline: a mutex whose records were never claimed needs one load. */
static inline bool readers_zero(shmlock_upgrade *m)
{
	if (m->nreaders == 0)
		return true;
	uint32_t mask = ld32(&m->readers[0].pad);
	return mask == 0 || !readers_in(m, mask);
}

static bool ready_upgrade_clear(shmlock_upgrade *m) { return (ld32(&m->e->state) & UPG_UPGRADE) == 0; }
static bool ready_upgrader_free(shmlock_upgrade *m) { return ld64(&m->e->upgrader) == 0; }
static bool ready_readers_unblocked(shmlock_upgrade *m) { return !readers_blocked(m); }

/* ------------------------------------------------- releases and takeovers */

/* bumpGeneration: the end of a unique or upgrade hold, by its holder,
 * before its state bit goes. Those holds exclude each other and nobody
 * else bumps the generation (upgrade/state.go), so it is an owned word: a
 * load and a store, published by the state word's release. */
static void bump_generation(shmlock_upgrade *m)
{
	SHM_STORE_OWNED(&m->e->generation, ld64(&m->e->generation) + 1);
}

/* handOffWriterWord: the release of the writer word o (as last loaded) when
 * the first CAS failed or was not tried. The word is this handle's identity
 * (with WRITER_UNIQUE if the hold is so) and only a waiting writer changes
 * it meanwhile, adding or taking off WRITER_HUNGRY: a failed CAS reloads it
 * (upgrade/wait.go: freeWriterWord); a hungry word is handed off. Or an
 * operator's force (Go's ForceUnlock) took the word while this release
 * ran: the forcer gives it back when it sees the holder id gone, so wait
 * for that for as long as the forcer lives and has the word (a release that
 * stopped sooner left the word given back to nobody, for good), and free
 * nothing that is not ours: a word gone elsewhere ends the wait
 * (upgrade/wait.go: handOffWriterWord). Go's forces of one mutex never
 * overlap (an fcntl lock on the segment file, upgrade/force.go), so one
 * forcer at most takes the word from a release. */
static void hand_off_writer_word(shmlock_upgrade *m, uint64_t o)
{
	uint64_t forcer = 0;
	for (int tries = 0;;) {
		uint64_t id = writer_id(o);
		if (id != m->pid) {
			if (id == 0 || (forcer != 0 && id != forcer))
				return;
			forcer = id;
			/* The verdict is on the forcer, not on o: it may have given
			 * the word back and exited after o was loaded (shmctl unlock
			 * --force exits just after), and a dead one's word is final,
			 * so it is loaded again after the verdict. */
			if (++tries % FORCE_GIVE_BACK_WAIT == 0 && !alive(m, id) && writer_id(ld64(&m->e->writer)) == id)
				return; /* a waiter takes the dead forcer's word over */
			sched_yield();
			o = ld64(&m->e->writer);
			continue;
		}
		uint64_t next = (o & WRITER_HUNGRY) ? handoff_word() : 0;
		if (atomic_compare_exchange_strong(&m->e->writer, &o, next))
			return;
	}
}

/* releaseWriterWord: holder id, then the word o (as the caller loaded it
 * and found its own: one CAS to 0 unless a writer is hungry); then one
 * waiting writer is woken. The end of a unique hold has bumped the
 * generation before. */
static inline void release_writer_word_from(shmlock_upgrade *m, uint64_t o)
{
	SHM_STORE_OWNED(&m->e->writer_tid, 0);
	if ((o & WRITER_HUNGRY) || !atomic_compare_exchange_strong(&m->e->writer, &o, 0))
		hand_off_writer_word(m, o);
	if ((ld32(&m->e->writer_sleepers) & SHM_SLEEPERS_COUNT) != 0)
		wake_writer(m);
}

/* release_writer_word loads the word afresh: one a force took goes the
 * checked way (upgrade/wait.go: releaseWriterWord). */
static void release_writer_word(shmlock_upgrade *m)
{
	uint64_t o = ld64(&m->e->writer);
	if (writer_id(o) == m->pid) {
		release_writer_word_from(m, o);
		return;
	}
	SHM_STORE_OWNED(&m->e->writer_tid, 0);
	hand_off_writer_word(m, o);
	if ((ld32(&m->e->writer_sleepers) & SHM_SLEEPERS_COUNT) != 0)
		wake_writer(m);
}

static void release_upgrader_word(shmlock_upgrade *m)
{
	SHM_STORE_OWNED(&m->e->upgrader_tid, 0);
	atomic_store(&m->e->upgrader, 0);
}

/* clearWriteBit: a writer's UPG_WRITE (only without UPG_UPGRADE). */
static void clear_write_bit(shmlock_upgrade *m)
{
	for (;;) {
		uint32_t s = ld32(&m->e->state);
		if (!(s & UPG_WRITE) || (s & UPG_UPGRADE) || cas32(&m->e->state, s, s & ~UPG_WRITE))
			return;
	}
}

/* clearUpgradeBits: the upgrade holder's bits; returns the state found (0
 * if UPG_UPGRADE was clear). With mark, a unique hold cleared sets
 * UPG_INCONSISTENT in the same CAS (Go sets it by a second operation just
 * after; one CAS never lets a reader in before the mark). */
static uint32_t clear_upgrade_bits(shmlock_upgrade *m, bool mark)
{
	for (;;) {
		uint32_t s = ld32(&m->e->state);
		if (!(s & UPG_UPGRADE))
			return 0;
		uint32_t next = s & ~(UPG_UPGRADE | UPG_PENDING | UPG_WRITE);
		if (mark && (s & UPG_WRITE))
			next |= UPG_INCONSISTENT;
		if (cas32(&m->e->state, s, next))
			return s;
	}
}

/* clearDeadTID: the holder id of the dead holder of the identity word w,
 * while w is still o, goes before the takeover's CAS: after it the word
 * names the live taker, and an operator's force (Go's ForceUnlock) that
 * saw a holder id there would free the taker's acquisition under it. By
 * CAS from the id seen, so that a later holder's id stays (upgrade/wait.go:
 * clearDeadTID). */
static void clear_dead_tid(a64 *w, a64 *tid, uint64_t o)
{
	uint64_t t = ld64(tid);
	if (t != 0 && ld64(w) == o)
		cas64(tid, t, 0);
}

/* takeOverWriter: the Writer word o, if its holder is dead. A
 * WRITER_UNIQUE hold ends in the CAS, which lets readers in: the mark and
 * the generation go first, with locked instructions (another repairer may
 * do the same). */
static bool take_over_writer(shmlock_upgrade *m, uint64_t o)
{
	uint64_t id = writer_id(o);
	/* The verdict is on the holder, not on o: it may have released and
	 * exited after o was loaded, and the marks below go before the CAS
	 * that would tell. A dead one's word is final, so it is loaded again
	 * after the verdict. */
	if (id == 0 || alive(m, id) || ld64(&m->e->writer) != o)
		return false;
	if (o & WRITER_UNIQUE) {
		atomic_fetch_or(&m->e->state, UPG_INCONSISTENT);
		atomic_fetch_add(&m->e->generation, 1);
	}
	clear_dead_tid(&m->e->writer, &m->e->writer_tid, o);
	if (!cas64(&m->e->writer, o, m->pid))
		return false;
	/* The dead one's grant, if any, is over: no holder id until the
	 * taker is granted (upgrade/state.go: granted holds). */
	atomic_store(&m->e->writer_tid, 0);
	atomic_fetch_and(&m->e->waiters, ~UNIQUE_WRITER);
	if ((ld32(&m->e->state) & (UPG_WRITE | UPG_UPGRADE)) == UPG_WRITE) {
		/* It held the unique lock (or drained readers for it): that
		 * hold, and with it the generation, is ours now. */
		bump_generation(m);
		atomic_fetch_or(&m->e->state, UPG_INCONSISTENT);
	}
	SHM_STATS_ADD(m->stats, reclaims);
	return true;
}

static bool take_over_upgrader(shmlock_upgrade *m, uint64_t o)
{
	if (o == 0 || alive(m, o))
		return false;
	clear_dead_tid(&m->e->upgrader, &m->e->upgrader_tid, o);
	if (!cas64(&m->e->upgrader, o, m->pid))
		return false;
	atomic_store(&m->e->upgrader_tid, 0); /* as in take_over_writer */
	atomic_fetch_and(&m->e->waiters, ~UNIQUE_UPGRADER);
	if (ld32(&m->e->state) & UPG_UPGRADE)
		bump_generation(m); /* as in take_over_writer */
	SHM_STATS_ADD(m->stats, reclaims);
	return true;
}

static bool release_stale_handoff(shmlock_upgrade *m, uint64_t o)
{
	if (!cas64(&m->e->writer, o, 0))
		return false;
	wake(m, shared_gate(m));
	wake_writer(m);
	return true;
}

/* releaseDeadWriter: release the writer's lock if its holder is dead. */
static bool release_dead_writer(shmlock_upgrade *m)
{
	uint64_t o = ld64(&m->e->writer);
	if (is_handoff(o)) {
		if (handoff_expired(o))
			release_stale_handoff(m, o);
		return false;
	}
	if (!take_over_writer(m, o))
		return false;
	clear_write_bit(m);
	release_writer_word(m);
	wake(m, shared_gate(m));
	wake(m, unique_gate(m));
	return true;
}

/* releaseDeadUpgrader: *unique reports that the dead one held the unique
 * lock. */
static bool release_dead_upgrader(shmlock_upgrade *m, bool *unique)
{
	*unique = false;
	if (!take_over_upgrader(m, ld64(&m->e->upgrader)))
		return false;
	*unique = (clear_upgrade_bits(m, true) & UPG_WRITE) != 0;
	release_upgrader_word(m);
	wake(m, shared_gate(m));
	wake(m, unique_gate(m));
	return true;
}

/* freeDeadRecord: CAS the owner to us, zero the count, free the record. */
static void free_dead_record(shmlock_upgrade *m, struct shm_reader_record *r)
{
	uint64_t o = ld64(&r->owner);
	if (o == 0 || alive(m, o) || !cas64(&r->owner, o, m->pid))
		return;
	uint32_t count = ld32(&r->count); /* the record is ours: its count is final */
	atomic_store(&r->count, 0);
	atomic_store(&r->owner, 0);
	if (count != 0)
		SHM_STATS_ADD(m->stats, reclaims); /* shared holds ended for the dead */
}

static void clear_dead_readers(shmlock_upgrade *m)
{
	for (size_t j = 0; j < m->nreaders; j++)
		if (ld32(&m->readers[j].count) != 0)
			free_dead_record(m, &m->readers[j]);
}

/* repairBlockers: release whichever dead holder blocks readers. */
/* repair_blockers releases whichever dead holder blocks readers. Both may:
 * a writer killed on the fast path between its CAS of the unique bit and
 * its step back leaves the bit under a live upgrade holder's UPG_UPGRADE,
 * and readers, whom the upgrade holder does not block, would otherwise wait
 * for as long as it holds (Go: repairBlockers). */
static void repair_blockers(shmlock_upgrade *m)
{
	bool unique;
	if (ld32(&m->e->state) & UPG_UPGRADE)
		release_dead_upgrader(m, &unique);
	if (writer_holds_unique(ld32(&m->e->state), ld64(&m->e->writer)))
		release_dead_writer(m);
}

/* -------------------------------------------------------- reader records */

static void mark_record(shmlock_upgrade *m, size_t j)
{
	uint32_t bit = UINT32_C(1) << (j % MASK_BITS);
	if (!(ld32(&m->readers[0].pad) & bit))
		atomic_fetch_or(&m->readers[0].pad, bit);
}

/* claimRecord: a free record, one per cache line first, or a dead one's. */
static struct shm_reader_record *claim_record(shmlock_upgrade *m)
{
	size_t n = m->nreaders;
	for (size_t first = 0; first < RECORDS_PER_LINE; first++) {
		for (size_t j = first; j < n; j += RECORDS_PER_LINE) {
			struct shm_reader_record *r = &m->readers[j];
			if (ld64(&r->owner) == 0 && cas64(&r->owner, 0, m->pid)) {
				atomic_store(&r->count, 0);
				mark_record(m, j);
				return r;
			}
		}
	}
	for (size_t j = 0; j < n; j++) {
		struct shm_reader_record *r = &m->readers[j];
		uint64_t o = ld64(&r->owner);
		if (o != 0 && !alive(m, o) && cas64(&r->owner, o, m->pid)) {
			atomic_store(&r->count, 0); /* the dead process's holds go with it */
			mark_record(m, j);
			return r;
		}
	}
	return NULL;
}

static int record(shmlock_upgrade *m, struct shm_reader_record **out)
{
	if (!m->rec) {
		if (seg_closed(m))
			return SHMLOCK_ECLOSED;
		m->rec = claim_record(m);
		if (!m->rec)
			return SHMLOCK_ETOOMANYREADERS;
	}
	*out = m->rec;
	return 0;
}

/* backOff: take back a shared hold; the last one a drainer waits for wakes it. */
/* grantable: may a record whose count the hold just raised to n grant it?
 * n in 1..MAX_SHARED; 0 is a count that wrapped (a damaged record said
 * 2^32-1), where a grant would count nothing its release could find. */
static inline bool grantable(uint32_t n) { return n - 1 < MAX_SHARED; }

/* back_off takes back a shared hold that was counted (n: the count its add
 * made) but not granted. A grantable count is taken back never below 0, as
 * a release is: an operator's forced unlock (Go's ForceUnlock) may have
 * dropped the record's count since the add, and a decrement would leave
 * 2^32-1 holds of a live process that writers wait for for ever. A count
 * that was not grantable (a damaged record) is put back as it was (Go:
 * backOff). */
/* drop_shared takes one hold off r's count, never below 0 (false if it was
 * 0 already), and wakes a writer or an upgrade that drains readers if that
 * emptied the record (Go: dropShared). */
static bool drop_shared(shmlock_upgrade *m, struct shm_reader_record *r)
{
	for (;;) {
		uint32_t n = ld32(&r->count);
		if (n == 0)
			return false;
		if (cas32(&r->count, n, n - 1)) {
			if (n == 1 && (ld32(&m->e->state) & UPG_BLOCK_READERS))
				wake(m, unique_gate(m));
			return true;
		}
	}
}

static void back_off(shmlock_upgrade *m, struct shm_reader_record *r, uint32_t n)
{
	if (!grantable(n)) {
		atomic_fetch_sub(&r->count, 1);
		return;
	}
	drop_shared(m, r);
}

/* ------------------------------------------------------- the writers' word */

static void pass_writer_wake(shmlock_upgrade *m)
{
	uint64_t o = ld64(&m->e->writer);
	if (is_handoff(o))
		cas64(&m->e->writer, o, 0);
	if (ld64(&m->e->writer) == 0 && (ld32(&m->e->writer_sleepers) & SHM_SLEEPERS_COUNT) != 0)
		wake_writer(m);
}

static void give_up_writer_wait(shmlock_upgrade *m)
{
	uint64_t o = ld64(&m->e->writer);
	if ((o & WRITER_HUNGRY) && !is_handoff(o))
		cas64(&m->e->writer, o, o & ~WRITER_HUNGRY);
	pass_writer_wake(m);
}

/* claimHungry: take the word if free or handed off, else mark it hungry. */
static bool claim_hungry(shmlock_upgrade *m)
{
	uint64_t o = ld64(&m->e->writer);
	if (o == 0 || is_handoff(o))
		return cas64(&m->e->writer, o, m->pid);
	if (!(o & WRITER_HUNGRY))
		cas64(&m->e->writer, o, o | WRITER_HUNGRY);
	return false;
}

/* acquireWriterWord (upgrade/wait.go). */
static int acquire_writer_word(shmlock_upgrade *m, const struct deadline *d, bool try, bool *reclaimed,
                               bool *waited)
{
	a64 *w = &m->e->writer;
	if (cas64(w, 0, m->pid))
		return 0;
	if (try) {
		uint64_t o = ld64(w);
		if (is_handoff(o) && handoff_expired(o) && cas64(w, o, m->pid))
			return 0;
		return SHMLOCK_EWOULDBLOCK;
	}
	*waited = true;
	begin_wait(m);
	shm_keep_off(WRITER_KEEP_OFF_NS);
	for (int i = 0; i < SPIN_LOADS + SPIN_YIELDS; i++) {
		if (ld64(w) == 0 && cas64(w, 0, m->pid))
			return 0;
		shm_cpu_relax();
	}
	for (int i = 0; i < SPIN_LOADS; i++)
		if (claim_hungry(m))
			return 0;
	struct liveness lv = {0, false};
	for (;;) {
		int rc = deadline_err(d);
		if (rc) {
			give_up_writer_wait(m);
			return rc;
		}
		int64_t now = shm_now_ns();
		if (lv.next == 0)
			lv.next = now + shm_liveness_ns(LIVENESS_NS);
		int64_t sleep = max64(lv.next - now, MIN_SLEEP_NS);
		if (d->at >= 0)
			sleep = min64(sleep, max64(d->at - now, MIN_SLEEP_NS));
		uint32_t ticket = shm_sleepers_register(&m->e->writer_sleepers);
		uint32_t seq = ld32(&m->e->writer_gate);
		uint64_t o = ld64(w);
		if (o == 0 || is_handoff(o)) {
			shm_sleepers_unregister(&m->e->writer_sleepers, ticket);
			if (cas64(w, o, m->pid))
				return 0;
			continue;
		} else if (o & WRITER_HUNGRY) {
			/* Only writers on a CPU ask for handoffs. */
			cas64(w, o, o & ~WRITER_HUNGRY);
		}
		time_wait(m);
		SHM_STATS_ADD(m->stats, sleeps);
		rc = shm_futex_wait(&m->e->writer_gate, seq, sleep);
		shm_sleepers_unregister(&m->e->writer_sleepers, ticket);
		if (seg_closed(m)) {
			give_up_writer_wait(m);
			return SHMLOCK_ECLOSED;
		}
		for (int i = 0; i < SPIN_LOADS; i++)
			if (claim_hungry(m))
				return 0;
		if (liveness_due(&lv, rc == SHMLOCK_ETIMEDOUT) && take_over_writer(m, ld64(w))) {
			*reclaimed = true;
			return 0;
		}
	}
}

/* ---------------------------------------------------------- unique holds */

/* abandonWriter: undo a Lock that could not finish. */
static void abandon_writer(shmlock_upgrade *m)
{
	clear_write_bit(m);
	release_writer_word(m);
	wake(m, shared_gate(m));
	wake(m, unique_gate(m));
}

/* The report of a unique acquisition: this call took over a dead holder,
 * or one died since the last MarkConsistent (Go: Reclaimed()). */
static int unique_report(shmlock_upgrade *m, bool reclaimed)
{
	if (reclaimed)
		return SHMLOCK_OWNERDEAD;
	return (ld32(&m->e->state) & UPG_INCONSISTENT) ? SHMLOCK_INCONSISTENT : SHMLOCK_OK;
}

/* writerGranted. */
static int writer_granted(shmlock_upgrade *m, bool reclaimed, bool waited)
{
	if (waited && seg_closed(m)) {
		abandon_writer(m);
		return SHMLOCK_ECLOSED;
	}
	SHM_STORE_OWNED(&m->e->writer_tid, m->tid); /* granted (upgrade/state.go) */
	return unique_report(m, reclaimed);
}

static int drain_readers(shmlock_upgrade *m, const struct deadline *d, uint32_t role, struct watch *w)
{
	struct liveness lv = {0, false};
	while (!readers_zero(m)) {
		bool slice;
		int rc = upg_wait(m, unique_gate_as(m, role), d, &lv, readers_zero, w, &slice);
		if (rc)
			return rc;
		if (slice)
			clear_dead_readers(m);
	}
	return 0;
}

/* setWriteBit: UPG_WRITE for the Writer word's holder once the upgrade
 * lock is free, releasing a dead upgrade holder's lock if it must. */
static int set_write_bit(shmlock_upgrade *m, const struct deadline *d, bool try, bool *reclaimed,
                         bool *waited, struct watch *w)
{
	struct liveness lv = {0, false};
	for (;;) {
		uint32_t s = ld32(&m->e->state);
		if (!(s & UPG_UPGRADE)) {
			if ((s & UPG_WRITE) || cas32(&m->e->state, s, s | UPG_WRITE))
				return 0;
			continue;
		}
		if (try) {
			abandon_writer(m);
			return SHMLOCK_EWOULDBLOCK;
		}
		*waited = true;
		bool slice, unique;
		int rc = upg_wait(m, unique_gate_as(m, UNIQUE_WRITER), d, &lv, ready_upgrade_clear, w, &slice);
		if (rc) {
			abandon_writer(m);
			return rc;
		}
		if (slice && release_dead_upgrader(m, &unique) && unique)
			*reclaimed = true; /* it died holding the unique lock */
	}
}

/* finishLock: the Writer word is ours; set UPG_WRITE and drain readers,
 * with a grace period (SOFT_DRAIN_NS) in which UPG_WRITE is cleared again
 * while readers are slow to leave. */
static int finish_lock_watched(shmlock_upgrade *m, const struct deadline *d, bool try, bool reclaimed, bool waited,
                               struct watch *w)
{
	int64_t grace_end = 0;
	for (;;) {
		int rc = set_write_bit(m, d, try, &reclaimed, &waited, w);
		if (rc)
			return rc;
		for (int i = 0; i < SPIN_LOADS; i++) {
			if (readers_zero(m))
				return writer_granted(m, reclaimed, waited);
			if (try) {
				abandon_writer(m);
				return SHMLOCK_EWOULDBLOCK;
			}
		}
		int64_t now = shm_now_ns();
		if (grace_end == 0)
			grace_end = now + SOFT_DRAIN_NS;
		if (now >= grace_end)
			break;
		begin_wait(m);
		time_wait(m); /* the grace period yields */
		clear_write_bit(m);
		wake(m, shared_gate(m));
		waited = true;
		/* The grace period yields with the writers' mutex held. */
		if ((rc = watch(m, w)) != 0) {
			release_writer_word(m);
			wake(m, shared_gate(m));
			return rc;
		}
		while (!readers_zero(m) && shm_now_ns() < grace_end) {
			if ((rc = deadline_err(d)) != 0) {
				release_writer_word(m);
				wake(m, shared_gate(m));
				return rc;
			}
			sched_yield();
		}
	}
	int rc = drain_readers(m, d, UNIQUE_WRITER, w);
	if (rc) {
		abandon_writer(m);
		return rc;
	}
	return writer_granted(m, reclaimed, true);
}

static int finish_lock(shmlock_upgrade *m, const struct deadline *d, bool try, bool reclaimed, bool waited)
{
	struct watch w = {false};
	int rc = finish_lock_watched(m, d, try, reclaimed, waited, &w);
	watch_done(m, &w);
	return rc;
}

static int check_open(shmlock_upgrade *m)
{
	if (!m)
		return SHMLOCK_EINVAL;
	return open_err(m);
}

static int lock_slow(shmlock_upgrade *m, const struct deadline *d, bool try)
{
	int rc = check_open(m);
	if (rc)
		return rc;
	if (holds_writer(m) || holds_upgrader(m) || shared_holds(m) != 0)
		return SHMLOCK_EHELD;
	bool reclaimed = false, waited = false;
	rc = acquire_writer_word(m, d, try, &reclaimed, &waited);
	if (rc)
		return rc;
	return finish_lock(m, d, try, reclaimed, waited);
}

static int lock_unique(shmlock_upgrade *m, const struct deadline *d)
{
	/* Fast path: nobody holds or wants anything: the unique lock in one
	 * CAS, WRITER_UNIQUE (upgrade/exclusive.go: lock). The holder id goes
	 * in once the lock is granted (upgrade/state.go: granted holds). */
	if (m && !seg_closed(m) && shared_holds(m) == 0 && cas64(&m->e->writer, 0, m->pid | WRITER_UNIQUE)) {
		/* With no lock bit, readers still counted leave within a few
		 * loads and the bit keeps new ones out: keep it for SPIN_LOADS
		 * checks before stepping back (upgrade/exclusive.go:
		 * lockAfterWriterWord). */
		if (!(ld32(&m->e->state) & UPG_LOCKED))
			for (int i = 0; i < SPIN_LOADS; i++)
				if (readers_zero(m)) {
					SHM_STORE_OWNED(&m->e->writer_tid, m->tid);
					return (ld32(&m->e->state) & UPG_INCONSISTENT) ? SHMLOCK_INCONSISTENT : SHMLOCK_OK;
				}
		/* stepBack: keep the Writer word, go on through UPG_WRITE. */
		atomic_fetch_and(&m->e->writer, ~WRITER_UNIQUE);
		wake(m, shared_gate(m));
		if (holds_upgrader(m)) {
			abandon_writer(m);
			return SHMLOCK_EHELD;
		}
		return end_wait(m, finish_lock(m, d, false, false, false));
	}
	return end_wait(m, lock_slow(m, d, false));
}

SHM_EXPORT int shmlock_upgrade_lock(shmlock_upgrade *m)
{
	struct deadline d = {-1};
	return lock_unique(m, &d);
}

SHM_EXPORT int shmlock_upgrade_trylock(shmlock_upgrade *m)
{
	struct deadline d = {-1};
	return lock_slow(m, &d, true);
}

SHM_EXPORT int shmlock_upgrade_timedlock(shmlock_upgrade *m, int64_t timeout_ns)
{
	if (timeout_ns == 0)
		return shmlock_upgrade_trylock(m);
	struct deadline d = deadline_in(timeout_ns);
	return lock_unique(m, &d);
}

/* The releases (unlock, unlock_shared, unlock_upgrade, an upgraded
 * holder's unique_to_upgrade) work after the segment's shmlock_close too,
 * as Go's: the handle keeps the mapping until its own close, and a hold
 * that could not be given back would stall every other process until this
 * one exits. Only acquisitions check for the close. */
SHM_EXPORT int shmlock_upgrade_unlock(shmlock_upgrade *m)
{
	if (!m)
		return SHMLOCK_EINVAL;
	uint64_t w = ld64(&m->e->writer);
	if (!holds_writer_word(m, w)) {
		if (writer_id(w) != 0 && writer_holds_unique(ld32(&m->e->state), w))
			return SHMLOCK_ENOTOWNER;
		return SHMLOCK_ENOTHELD;
	}
	/* Ours: while UPG_WRITE is set without UPG_UPGRADE nobody else changes
	 * the state word (upgrade/state.go: a dead holder's reclaim and an
	 * operator's force-unlock aside, which meet a live unlock only in the
	 * nanoseconds that force-unlocking a live holder always had), nor the
	 * generation. So plain and release stores, no locked instruction;
	 * release_writer_word's CAS is the full barrier before wake loads the
	 * waiters word. A WRITER_UNIQUE hold leaves the state word alone: its
	 * bit goes with the word's CAS. The holder id goes first, so that a
	 * force that meets this release sees it (upgrade/exclusive.go:
	 * endUniqueHold). */
	SHM_STORE_OWNED(&m->e->writer_tid, 0);
	bump_generation(m);
	if (!(w & WRITER_UNIQUE))
		SHM_STORE_OWNED(&m->e->state, ld32(&m->e->state) & ~UPG_WRITE);
	release_writer_word_from(m, w);
	wake(m, shared_gate(m)); /* UniqueGate has no sleeper now */
	return SHMLOCK_OK;
}

/* Inconsistent: a unique holder died and nobody has marked it since. */
SHM_EXPORT int shmlock_upgrade_inconsistent(const shmlock_upgrade *m)
{
	if (!m)
		return 0;
	return (ld32(&m->e->state) & UPG_INCONSISTENT) != 0;
}

SHM_EXPORT int shmlock_upgrade_mark_consistent(shmlock_upgrade *m)
{
	/* No closed check: like a release, it works after the segment's close
	 * (the holder that repaired the data may still say so). */
	if (!m)
		return SHMLOCK_EINVAL;
	uint32_t s = ld32(&m->e->state);
	uint64_t w = ld64(&m->e->writer);
	bool unique = (holds_writer_word(m, w) && writer_holds_unique(s, w)) ||
	              (holds_upgrader(m) && (s & (UPG_WRITE | UPG_UPGRADE)) == (UPG_WRITE | UPG_UPGRADE));
	if (!unique)
		return SHMLOCK_ENOTHELD;
	if (s & UPG_INCONSISTENT)
		atomic_fetch_and(&m->e->state, ~UPG_INCONSISTENT); /* others set it only for dead holders */
	return SHMLOCK_OK;
}

/* ---------------------------------------------------------- shared holds */


static bool lock_shared_fast(shmlock_upgrade *m)
{
	struct shm_reader_record *r = m->rec;
	if (r && !seg_closed(m)) {
		uint32_t n = atomic_fetch_add(&r->count, 1) + 1;
		if (grantable(n) && !readers_blocked(m))
			return true;
		back_off(m, r, n);
	}
	return false;
}

static int lock_shared_slow(shmlock_upgrade *m, const struct deadline *d, bool try)
{
	int rc = check_open(m);
	if (rc)
		return rc;
	if (holds_writer(m) || (holds_upgrader(m) && (ld32(&m->e->state) & UPG_WRITE)))
		return SHMLOCK_EHELD; /* it would wait for itself */
	struct shm_reader_record *r;
	if ((rc = record(m, &r)) != 0)
		return rc;
	bool waited = false;
	struct liveness lv = {0, false};
	for (;;) {
		uint32_t n = atomic_fetch_add(&r->count, 1) + 1;
		if (!grantable(n)) {
			back_off(m, r, n);
			return SHMLOCK_EOVERFLOW;
		}
		if (!readers_blocked(m)) {
			if (waited && seg_closed(m)) {
				back_off(m, r, n);
				return SHMLOCK_ECLOSED;
			}
			return SHMLOCK_OK;
		}
		back_off(m, r, n);
		if (try)
			return SHMLOCK_EWOULDBLOCK;
		waited = true;
		for (;;) {
			bool slice;
			rc = upg_wait(m, shared_gate(m), d, &lv, ready_readers_unblocked, NULL, &slice);
			if (rc)
				return rc;
			if (!slice)
				break;
			repair_blockers(m);
		}
	}
}

SHM_EXPORT int shmlock_upgrade_lock_shared(shmlock_upgrade *m)
{
	if (m && lock_shared_fast(m))
		return SHMLOCK_OK;
	struct deadline d = {-1};
	return end_wait(m, lock_shared_slow(m, &d, false));
}

SHM_EXPORT int shmlock_upgrade_trylock_shared(shmlock_upgrade *m)
{
	struct deadline d = {-1};
	return lock_shared_slow(m, &d, true);
}

SHM_EXPORT int shmlock_upgrade_timedlock_shared(shmlock_upgrade *m, int64_t timeout_ns)
{
	if (timeout_ns == 0)
		return shmlock_upgrade_trylock_shared(m);
	if (m && lock_shared_fast(m))
		return SHMLOCK_OK;
	struct deadline d = deadline_in(timeout_ns);
	return end_wait(m, lock_shared_slow(m, &d, false));
}

SHM_EXPORT int shmlock_upgrade_unlock_shared(shmlock_upgrade *m)
{
	if (!m)
		return SHMLOCK_EINVAL;
	struct shm_reader_record *r = m->rec;
	if (!r || !drop_shared(m, r))
		return SHMLOCK_ENOTHELD;
	return SHMLOCK_OK;
}

/* --------------------------------------------------------- upgrade holds */

/* writerWordFree: no writer holds or waits for the unique lock. */
static bool writer_word_free(shmlock_upgrade *m)
{
	uint64_t o = ld64(&m->e->writer);
	if (o == 0)
		return true;
	return is_handoff(o) && handoff_expired(o) && (cas64(&m->e->writer, o, 0) || ld64(&m->e->writer) == 0);
}

static bool ready_for_upgrade(shmlock_upgrade *m)
{
	return !(ld32(&m->e->state) & UPG_WRITE) && writer_word_free(m);
}

/* upgradeBitStands: the upgrade seeker's half of Dekker's pair with
 * lock_unique's fast path: after the CAS of UPG_UPGRADE, a writer that
 * took WRITER_UNIQUE meanwhile keeps the lock, and the seeker clears its
 * bit again and waits (keeping the Upgrader word). */
static bool upgrade_bit_stands(shmlock_upgrade *m)
{
	if (!(ld64(&m->e->writer) & WRITER_UNIQUE))
		return true;
	atomic_fetch_and(&m->e->state, ~UPG_UPGRADE);
	wake(m, unique_gate(m));
	return false;
}

static void abandon_upgrader(shmlock_upgrade *m)
{
	release_upgrader_word(m);
	wake(m, shared_gate(m));
}

static int lock_upgrade_watched(shmlock_upgrade *m, const struct deadline *d, bool try, struct watch *w)
{
	int rc = check_open(m);
	if (rc)
		return rc;
	if (holds_writer(m) || holds_upgrader(m))
		return SHMLOCK_EHELD;
	bool reclaimed = false, waited = false, slice;
	struct liveness lv = {0, false};
	while (!cas64(&m->e->upgrader, 0, m->pid)) {
		if (try)
			return SHMLOCK_EWOULDBLOCK;
		waited = true;
		if ((rc = upg_wait(m, shared_gate(m), d, &lv, ready_upgrader_free, NULL, &slice)) != 0)
			return end_wait(m, rc);
		if (slice && take_over_upgrader(m, ld64(&m->e->upgrader))) {
			reclaimed = true;
			break;
		}
	}
	lv = (struct liveness){0, false};
	for (;;) {
		uint32_t s = ld32(&m->e->state);
		if (s & UPG_UPGRADE) {
			/* Left by the dead holder we took over: keep the upgrade
			 * lock, drop its pending upgrade or unique hold (recorded
			 * for the next unique holder). */
			uint32_t next = s & ~(UPG_PENDING | UPG_WRITE);
			if (s & UPG_WRITE)
				next |= UPG_INCONSISTENT;
			if (!cas32(&m->e->state, s, next))
				continue;
			if (s & (UPG_PENDING | UPG_WRITE))
				wake(m, shared_gate(m));
			if (upgrade_bit_stands(m))
				break;
		} else if (!(s & UPG_WRITE) && writer_word_free(m)) {
			/* A writer holding the writers' mutex goes first (fairness). */
			if (!cas32(&m->e->state, s, s | UPG_UPGRADE))
				continue;
			if (upgrade_bit_stands(m))
				break;
		}
		if (try) {
			abandon_upgrader(m);
			return SHMLOCK_EWOULDBLOCK;
		}
		waited = true;
		/* Waiting with the upgrader word held. */
		if ((rc = upg_wait(m, shared_gate(m), d, &lv, ready_for_upgrade, w, &slice)) != 0) {
			abandon_upgrader(m);
			return end_wait(m, rc);
		}
		if (slice)
			release_dead_writer(m);
	}
	if (waited && seg_closed(m)) {
		clear_upgrade_bits(m, false);
		release_upgrader_word(m);
		wake(m, shared_gate(m));
		wake(m, unique_gate(m));
		return end_wait(m, SHMLOCK_ECLOSED);
	}
	SHM_STORE_OWNED(&m->e->upgrader_tid, m->tid); /* granted */
	rc = reclaimed ? SHMLOCK_OWNERDEAD : SHMLOCK_OK;
	if (waited) /* only here: the uncontended path has no wait to record */
		return end_wait(m, rc);
	return rc;
}

static int lock_upgrade(shmlock_upgrade *m, const struct deadline *d, bool try)
{
	struct watch w = {false};
	int rc = lock_upgrade_watched(m, d, try, &w);
	watch_done(m, &w);
	return rc;
}

SHM_EXPORT int shmlock_upgrade_lock_upgrade(shmlock_upgrade *m)
{
	struct deadline d = {-1};
	return lock_upgrade(m, &d, false);
}

SHM_EXPORT int shmlock_upgrade_trylock_upgrade(shmlock_upgrade *m)
{
	struct deadline d = {-1};
	return lock_upgrade(m, &d, true);
}

SHM_EXPORT int shmlock_upgrade_timedlock_upgrade(shmlock_upgrade *m, int64_t timeout_ns)
{
	struct deadline d = deadline_in(timeout_ns);
	return lock_upgrade(m, &d, timeout_ns == 0);
}

/* upgraderState: the state word, if the handle holds the upgrade lock. */
static int upgrader_state(shmlock_upgrade *m, uint32_t *s)
{
	if (holds_upgrader(m)) {
		*s = ld32(&m->e->state);
		if (*s & UPG_UPGRADE)
			return 0;
	}
	if (ld64(&m->e->upgrader) != 0 && (ld32(&m->e->state) & UPG_UPGRADE))
		return SHMLOCK_ENOTOWNER;
	return SHMLOCK_ENOTHELD;
}

SHM_EXPORT int shmlock_upgrade_unlock_upgrade(shmlock_upgrade *m)
{
	if (!m)
		return SHMLOCK_EINVAL;
	int rc;
	uint32_t s;
	if ((rc = upgrader_state(m, &s)) != 0)
		return rc;
	if (s & UPG_WRITE)
		return SHMLOCK_ENOTHELD; /* leave the unique lock first */
	/* As in unlock: the holder id goes first; the state word is ours while
	 * UPG_UPGRADE is; the upgrader word's store is the full barrier. */
	SHM_STORE_OWNED(&m->e->upgrader_tid, 0);
	bump_generation(m);
	SHM_STORE_OWNED(&m->e->state, ld32(&m->e->state) & ~(UPG_UPGRADE | UPG_PENDING));
	atomic_store(&m->e->upgrader, 0);
	wake(m, shared_gate(m)); /* each checks its bits inline (the epoch is no sleeper) */
	wake(m, unique_gate(m));
	return SHMLOCK_OK;
}

/* ----------------------------------------------------------- conversions */

/* Only the caller's pending upgrade: an operator's force may have freed
 * its upgrade lock while it waited, and another holder's upgrade be
 * pending now (Go: cancelPending). */
static void cancel_pending(shmlock_upgrade *m)
{
	for (;;) {
		uint32_t s = ld32(&m->e->state);
		if (!(s & UPG_PENDING) || ((s & UPG_UPGRADE) && !holds_upgrader(m)))
			return;
		if (cas32(&m->e->state, s, s & ~UPG_PENDING))
			break;
	}
	wake(m, shared_gate(m));
}

static int upgrade_to_unique(shmlock_upgrade *m, const struct deadline *d, bool try)
{
	int rc = check_open(m);
	if (rc)
		return rc;
	uint32_t s;
	if ((rc = upgrader_state(m, &s)) != 0)
		return rc;
	if ((s & UPG_WRITE) || shared_holds(m) != 0)
		return SHMLOCK_EHELD;
	/* While UPG_UPGRADE is ours nobody else changes the state word. */
	atomic_fetch_or(&m->e->state, UPG_PENDING);
	if (!readers_zero(m)) {
		if (try) {
			cancel_pending(m);
			return SHMLOCK_EWOULDBLOCK;
		}
		/* Draining with UPG_PENDING set, which keeps readers out. */
		struct watch w = {false};
		rc = drain_readers(m, d, UNIQUE_UPGRADER, &w);
		if (!rc && seg_closed(m))
			rc = SHMLOCK_ECLOSED;
		if (rc)
			cancel_pending(m);
		watch_done(m, &w);
		if (rc)
			return end_wait(m, rc);
	}
	for (;;) {
		s = ld32(&m->e->state);
		if ((s & (UPG_UPGRADE | UPG_PENDING)) != (UPG_UPGRADE | UPG_PENDING) || !holds_upgrader(m)) {
			/* An operator's force freed the upgrade lock while this
			 * upgrade drained readers (Go: upgradeToUnique). If it came
			 * before this upgrade set UPG_PENDING, the bit stands with no
			 * upgrade lock under it, keeping readers out: take it down. */
			if ((s & (UPG_UPGRADE | UPG_PENDING)) == UPG_PENDING) {
				if (!cas32(&m->e->state, s, s & ~UPG_PENDING))
					continue;
				wake(m, shared_gate(m));
			}
			uint32_t ignored;
			rc = upgrader_state(m, &ignored);
			return end_wait(m, rc ? rc : SHMLOCK_ENOTHELD);
		}
		if (cas32(&m->e->state, s, (s & ~UPG_PENDING) | UPG_WRITE))
			/* after the CAS: a granted wait, if it waited */
			return end_wait(m, (s & UPG_INCONSISTENT) ? SHMLOCK_INCONSISTENT : SHMLOCK_OK);
	}
}

SHM_EXPORT int shmlock_upgrade_upgrade_to_unique(shmlock_upgrade *m)
{
	struct deadline d = {-1};
	return upgrade_to_unique(m, &d, false);
}

SHM_EXPORT int shmlock_upgrade_try_upgrade_to_unique(shmlock_upgrade *m)
{
	struct deadline d = {-1};
	return upgrade_to_unique(m, &d, true);
}

SHM_EXPORT int shmlock_upgrade_timed_upgrade_to_unique(shmlock_upgrade *m, int64_t timeout_ns)
{
	struct deadline d = deadline_in(timeout_ns);
	return upgrade_to_unique(m, &d, timeout_ns == 0);
}

static int not_unique(shmlock_upgrade *m)
{
	return unique_held(ld32(&m->e->state), ld64(&m->e->writer)) ? SHMLOCK_ENOTOWNER : SHMLOCK_ENOTHELD;
}

SHM_EXPORT int shmlock_upgrade_unique_to_upgrade(shmlock_upgrade *m)
{
	if (!m)
		return SHMLOCK_EINVAL;
	if (holds_upgrader(m) && (ld32(&m->e->state) & (UPG_UPGRADE | UPG_WRITE)) == (UPG_UPGRADE | UPG_WRITE)) {
		/* Only a release: it works after the segment's close too. */
		atomic_fetch_and(&m->e->state, ~UPG_WRITE);
		wake(m, shared_gate(m)); /* readers; writers still wait for the upgrade lock */
		return SHMLOCK_OK;
	}
	if (seg_closed(m))
		return SHMLOCK_ECLOSED; /* a writer's would take the upgrader word */
	if (!holds_writer(m))
		return not_unique(m);
	/* A dead seeker's word (killed between its CAS and UPG_UPGRADE) is
	 * nobody waiting: take it over rather than refuse for good (Go:
	 * UniqueToUpgrade). */
	if (!cas64(&m->e->upgrader, 0, m->pid) && !take_over_upgrader(m, ld64(&m->e->upgrader)))
		return SHMLOCK_EWOULDBLOCK;
	SHM_STORE_OWNED(&m->e->writer_tid, 0); /* the unique hold ends here: its id first */
	/* The writer's UPG_WRITE becomes UPG_UPGRADE in one step, then the
	 * writers' mutex goes. */
	bump_generation(m); /* the unique hold ends */
	for (;;) {
		uint32_t s = ld32(&m->e->state);
		if (cas32(&m->e->state, s, (s & ~UPG_WRITE) | UPG_UPGRADE))
			break;
	}
	SHM_STORE_OWNED(&m->e->upgrader_tid, m->tid); /* granted now that its bit is set */
	release_writer_word(m);
	wake(m, shared_gate(m));
	wake(m, unique_gate(m));
	return SHMLOCK_OK;
}

SHM_EXPORT int shmlock_upgrade_unique_to_shared(shmlock_upgrade *m)
{
	int rc = check_open(m);
	if (rc)
		return rc;
	bool writer = holds_writer(m);
	bool upgrader = !writer && holds_upgrader(m) &&
	                (ld32(&m->e->state) & (UPG_UPGRADE | UPG_WRITE)) == (UPG_UPGRADE | UPG_WRITE);
	if (!writer && !upgrader)
		return not_unique(m);
	struct shm_reader_record *r;
	if ((rc = record(m, &r)) != 0)
		return rc;
	/* The shared hold is counted before the exclusive one goes. */
	if (!grantable(atomic_fetch_add(&r->count, 1) + 1)) {
		atomic_fetch_sub(&r->count, 1);
		return SHMLOCK_EOVERFLOW;
	}
	/* The exclusive hold ends here: its holder id goes first, as in
	 * unlock (upgrade/convert.go: UniqueToShared). */
	SHM_STORE_OWNED(writer ? &m->e->writer_tid : &m->e->upgrader_tid, 0);
	bump_generation(m);
	if (writer) {
		atomic_fetch_and(&m->e->state, ~UPG_WRITE);
		release_writer_word(m);
	} else {
		atomic_fetch_and(&m->e->state, ~(UPG_WRITE | UPG_UPGRADE | UPG_PENDING));
		release_upgrader_word(m);
	}
	wake(m, shared_gate(m));
	wake(m, unique_gate(m));
	return SHMLOCK_OK;
}

/* ------------------------------------------------------ opening, closing */

SHM_EXPORT int shmlock_upgrade_open(shmlock_segment *seg, size_t index, shmlock_upgrade **out)
{
	if (!seg || !out)
		return SHMLOCK_EINVAL;
	if (shm_closed(seg))
		return SHMLOCK_ECLOSED;
	if (seg->read_only)
		return SHMLOCK_EREADONLY;
	uint64_t count, nrec;
	void *entries = shm_table_of(seg, SHM_UPGRADES, &count);
	void *records = shm_table_of(seg, SHM_UPGRADE_READERS, &nrec);
	if (!entries || index >= count)
		return SHMLOCK_EINDEX;
	shmlock_upgrade *m = calloc(1, sizeof *m);
	if (!m)
		return SHMLOCK_ENOMEM;
	m->seg = seg;
	m->e = (struct shm_upgrade_entry *)entries + index;
	m->nreaders = records ? (size_t)(nrec / count) : 0;
	m->readers = m->nreaders ? (struct shm_reader_record *)records + index * m->nreaders : NULL;
	m->index = index;
	m->pid = shm_self();
	m->tid = shm_random64();
	m->stats = shm_lock_stats(seg, SHM_UPGRADES, index); /* the segment is writable: checked above */
	shm_seg_get(seg); /* the segment (and its closed flag) outlives the handle */
	*out = m;
	return SHMLOCK_OK;
}

SHM_EXPORT int shmlock_upgrade_named(shmlock_segment *seg, const char *name, shmlock_upgrade **out)
{
	if (!seg || !name || !out)
		return SHMLOCK_EINVAL;
	uint64_t words[5];
	uint32_t len;
	int rc = shm_pack_name(name, words, &len); /* the empty name too */
	if (rc)
		return rc;
	size_t i;
	if ((rc = shm_claim(seg, SHM_UPGRADES, name, 0, &i)) != 0)
		return rc;
	if ((rc = shmlock_upgrade_open(seg, i, out)) != 0) {
		shm_release_claim(seg, SHM_UPGRADES, i);
		return rc;
	}
	(*out)->named = true;
	return SHMLOCK_OK;
}

/* Close: the handle's reader record and, if named, its claim reference.
 * SHMLOCK_EHELD, leaving the handle open, if it still holds the lock. */
SHM_EXPORT int shmlock_upgrade_close(shmlock_upgrade *m)
{
	if (!m)
		return SHMLOCK_EINVAL;
	/* Also after the segment's close, as Go's Close: refused while the
	 * handle holds anything (its releases still work), and the reader
	 * record and the claim go back, or they would stay this live process's
	 * until it exits. */
	if (shared_holds(m) != 0 || holds_writer(m) || holds_upgrader(m))
		return SHMLOCK_EHELD;
	if (m->rec)
		cas64(&m->rec->owner, m->pid, 0); /* count is 0: the record is free */
	int rc = 0;
	if (m->named)
		rc = shm_release_claim(m->seg, SHM_UPGRADES, m->index);
	shm_seg_put(m->seg);
	free(m);
	return rc;
}

SHM_EXPORT int shmlock_upgrade_index(const shmlock_upgrade *m)
{
	return m ? (int)m->index : SHMLOCK_EINVAL;
}

/* Generation: bumped by every release of Writer or Upgrader and every
 * takeover; 0 once the segment is closed. */
SHM_EXPORT uint64_t shmlock_upgrade_generation(const shmlock_upgrade *m)
{
	if (!m || seg_closed(m))
		return 0;
	return ld64(&m->e->generation);
}
