/* spinlock.c: spinlocks over owner slots (package spinlock in Go).
 *
 * The words (docs/FORMAT.md, Owner slots):
 *
 *   pid        pid/tid mode: the holder's packed process identity; 0 free.
 *              The lock word of that mode.
 *   tid        pid/tid mode: the holder id within the process; 0 free.
 *   token      token mode: the holder's token, 0 free (the lock word).
 *              pid/tid mode: the generation, bumped by every release and
 *              every reclaim.
 *   recursion  bits 0-30 (SHM_SLOT_RECURSION_MASK): re-entries of the
 *              holder beyond the first; bit 31 (SHM_SLOT_INCONSISTENT): a
 *              holder died and nobody has said the data is whole since.
 *   pad        a sleepers word (futex.c): sleepers, futile wakes,
 *              wake-pending.
 *
 * Acquire is one CAS of the lock word from 0; in pid/tid mode the holder
 * then stores its tid. Release clears tid, bumps the generation and stores
 * 0 to the lock word last, so whoever sees the word free sees the rest
 * reset; then, only if pad is non-zero, it wakes one sleeper. The
 * uncontended path makes no system call.
 *
 * Sleepers sleep on the futex of the low 32 bits of the lock word: never 0
 * while the lock is held (a token's low half is non-zero by construction, a
 * packed identity's low bits are the pid) and 0 once it is free. A waiter
 * reads the word, registers in pad, and the kernel compares the low half
 * before sleeping, so a release either sees the registration (both are
 * sequentially consistent) or changed the word first: no lost wake-up.
 * This is the Go protocol word for word; Go and C waiters share one pad.
 *
 * A sleeper wakes at least every SPIN_LIVENESS_NS to look at the holder: a
 * pid/tid holder whose process is dead (or recorded under an earlier boot)
 * is taken over with one CAS from the dead word, so exactly one of several
 * waiters wins; the winner stores its tid, sets recursion to the
 * inconsistent bit alone and bumps the generation, as if the dead holder
 * had released. Token mode has no owner to check and is not robust.
 */
#include <sched.h>
#include <stdlib.h>

#include "internal.h"

/* The waiting policy of spinlock/slow.go (see there for the measurements
 * behind each number). A waiter keeps off the lock's cache line for a
 * moment so that a holder with short critical sections runs a series, then
 * polls the lock word, yields the CPU (the holder may be waiting for it),
 * and only then sleeps (Go lets its process's goroutines run before each
 * sleep too; a C thread has no such holders). Five yields, as Go's, where
 * there was one: bench/matrix -baseline, far-placed host, 10 rounds:
 * counter 1.15x/1.14x/1.15x at 2/4/8 processes (10, 9 and 10 of 10
 * rounds), pingpong_retry 1.08x (6 of 10). */
#define SPIN_KEEP_OFF_NS 250
#define SPIN_LOADS 300
#define SPIN_OS_YIELDS 5
#define SPIN_LIVENESS_NS (50 * INT64_C(1000000)) /* longest sleep between liveness checks */
#define SPIN_OURS_WAYS 8

struct shmlock_spin {
	struct shm_owner_slot *slot;
	a64 *word;  /* the lock word: &slot->pid or &slot->token */
	a32 *fword; /* its low half (little-endian): the futex word */
	shmlock_segment *seg;
	struct shm_lock_stats *stats; /* the slot's contention counters; NULL if none or read-only */
	int mode;
	int index;
	bool named; /* made by shmlock_spin_named: close releases the claim */
	/* ours[holder % SPIN_OURS_WAYS] is {holder, the process's lock word,
	 * the slot's generation} while holder holds the lock through this
	 * handle (pid/tid mode): stored after its CAS, cleared at its release.
	 * A release that finds its holder there, with the word of the process
	 * it runs in (a child forked while the parent held has the parent's
	 * ours, and another word) and the generation still the slot's (a hold
	 * that ended through another handle left ours naming it; every end of
	 * a hold moves the generation), need not read the slot's PID (see
	 * shmlock_spin_unlock). A way a line, off the fields above, so threads
	 * of one handle write lines of their own (Go: Lock.ours). */
	char pad_[64];
	struct spin_ours {
		a64 tid;
		a64 word;
		a64 gen;
		char pad_[40];
	} ours[SPIN_OURS_WAYS];
};

/* ---------------------------------------------------------- identities */

/* The lock word that holder writes in l's mode, or 0 if it does not fit:
 * the futex compares the low half, which must be non-zero while held. */
static inline uint64_t spin_word_of(const shmlock_spin *l, uint64_t holder)
{
	if (l->mode == SHMLOCK_TOKEN)
		return (uint32_t)holder != 0 ? holder : 0;
	if (holder == 0)
		return 0;
	uint64_t self = shm_self();
	return (uint32_t)self != 0 ? self : 0;
}

static inline bool spin_closed(const shmlock_spin *l)
{
	return shm_closed(l->seg);
}

/* The report of an acquisition that did not reclaim: every holder is told
 * while the inconsistent bit is set (Guard.Inconsistent in Go). */
static inline int spin_report(const struct shm_owner_slot *s)
{
	uint32_t r = atomic_load((a32 *)&s->recursion);
	return (r & SHM_SLOT_INCONSISTENT) ? SHMLOCK_INCONSISTENT : SHMLOCK_OK;
}

/* spin_ours is holder's way of l->ours. */
static inline struct spin_ours *spin_ours(shmlock_spin *l, uint64_t holder)
{
	return &l->ours[holder % SPIN_OURS_WAYS];
}

/* spin_ours_set records that holder holds through l, in the process whose
 * lock word is word, the hold of generation gen. */
static inline void spin_ours_set(shmlock_spin *l, uint64_t holder, uint64_t word, uint64_t gen)
{
	struct spin_ours *o = spin_ours(l, holder);
	atomic_store_explicit(&o->word, word, memory_order_relaxed);
	atomic_store_explicit(&o->gen, gen, memory_order_relaxed);
	atomic_store_explicit(&o->tid, holder, memory_order_relaxed);
}

/* spin_try is the fast path: one CAS of the free lock word. */
/* spin_try_seen is spin_try that also says what a failed CAS found in the
 * lock word (*seen): the first acquisition's CAS tells the slow path
 * whether this process may hold the lock already (recursion) without
 * another read of the contended slot. */
static inline bool spin_try_seen(shmlock_spin *l, uint64_t word, uint64_t holder, uint64_t *seen)
{
	uint64_t cur = 0;
	if (!atomic_compare_exchange_strong(l->word, &cur, word)) {
		*seen = cur;
		return false;
	}
	if (l->mode == SHMLOCK_PIDTID) {
		SHM_STORE_OWNED(&l->slot->tid, holder);
		spin_ours_set(l, holder, word, atomic_load_explicit(&l->slot->token, memory_order_relaxed));
		/* A free slot with a recursion count: no release, reclaim or
		 * takeover leaves one, so the slot was damaged. The count would
		 * keep this holder's release from freeing the lock; it goes, and
		 * the slot is marked inconsistent as after a reclaim (Go:
		 * freedWithCount). */
		if (SHM_UNLIKELY((atomic_load_explicit(&l->slot->recursion, memory_order_relaxed) & SHM_SLOT_RECURSION_MASK) != 0))
			atomic_store(&l->slot->recursion, SHM_SLOT_INCONSISTENT);
	}
	return true;
}

/* spin_try is the slow paths' try: it refuses once the segment is closed,
 * as Go's tryAcquire, so a waiter never gets the lock after shmlock_close
 * (spin_acquire checks before the fast path's try). */
static inline bool spin_try(shmlock_spin *l, uint64_t word, uint64_t holder)
{
	uint64_t seen;
	return !spin_closed(l) && spin_try_seen(l, word, holder, &seen);
}

static bool spin_held_by(const shmlock_spin *l, uint64_t word, uint64_t holder)
{
	struct shm_owner_slot *s = l->slot;
	if (l->mode == SHMLOCK_TOKEN)
		return atomic_load(&s->token) == word;
	return atomic_load(&s->pid) == word && atomic_load(&s->tid) == holder;
}

/* ------------------------------------------------------------- waking */

static void spin_wake_one(shmlock_spin *l)
{
	if (shm_sleepers_wake_one(&l->slot->pad, l->fword))
		SHM_STATS_ADD(l->stats, wakeups);
}

/* spin_pass_wake is for a waiter that gives up: it may have consumed the
 * wake meant to hand the lock on, so if the lock is free the next sleeper
 * is woken. If it is held, its release will. */
static void spin_pass_wake(shmlock_spin *l)
{
	if (atomic_load(l->word) == 0 && (atomic_load(&l->slot->pad) & SHM_SLEEPERS_COUNT) != 0)
		spin_wake_one(l);
}

/* ------------------------------------------------------------ reclaim */

/* spin_reclaim takes the lock over from owner if owner is a dead process:
 * one CAS, so that of several waiters finding the same dead owner exactly
 * one wins. */
static bool spin_reclaim(shmlock_spin *l, uint64_t word, uint64_t holder, uint64_t owner)
{
	struct shm_owner_slot *s = l->slot;
	if (l->mode != SHMLOCK_PIDTID || owner == 0 || shm_owner_alive(l->seg, owner))
		return false;
	if (!atomic_compare_exchange_strong(&s->pid, &owner, word))
		return false;
	atomic_store(&s->tid, holder);
	atomic_store(&s->recursion, SHM_SLOT_INCONSISTENT);
	spin_ours_set(l, holder, word, atomic_fetch_add(&s->token, 1) + 1);
	SHM_STATS_ADD(l->stats, reclaims);
	return true;
}

/* ----------------------------------------------------------- waiting */

/* spin_keep_off returns the time it began: the start of a wait that will
 * be timed, without another clock read. */
static int64_t spin_keep_off(void)
{
	int64_t start = shm_now_ns();
	while (shm_now_ns() - start < SPIN_KEEP_OFF_NS) {
	}
	return start;
}

static int spin_wait(shmlock_spin *l, uint64_t word, uint64_t holder, int64_t deadline);

/* spin_lock_slow is everything but the first CAS: recursion, the try's
 * refusal, spinning, sleeping and reclaiming (in spin_wait, whose wait it
 * counts). deadline is a CLOCK_MONOTONIC time, or negative for none; try
 * means do not wait at all. seen is what the first CAS found in the lock
 * word: only if that is this process's identity can the caller hold the
 * lock already, and only then is the slot's TID read (reading PID and TID
 * after every failed CAS cost a contended acquisition one more transfer
 * of the slot's line, in the holder's way: spinlock/slow.go). */
static __attribute__((noinline)) int spin_lock_slow(shmlock_spin *l, uint64_t word, uint64_t holder,
                                                   int64_t deadline, bool try, uint64_t seen)
{
	struct shm_owner_slot *s = l->slot;
	if (l->mode == SHMLOCK_PIDTID && seen == word && spin_held_by(l, word, holder)) {
		uint32_t r = atomic_load(&s->recursion);
		if ((r & SHM_SLOT_RECURSION_MASK) == SHM_SLOT_RECURSION_MASK)
			return SHMLOCK_ERECURSION;
		atomic_fetch_add(&s->recursion, 1);
		return spin_report(s);
	}
	if (try)
		return SHMLOCK_EWOULDBLOCK;
	int64_t since = spin_keep_off();
	for (int i = 0; i < SPIN_LOADS; i++) {
		if (atomic_load(l->word) == 0 && spin_try(l, word, holder)) {
			shm_stats_spun(l->stats, false); /* not timed: FORMAT.md */
			return spin_report(s);
		}
	}
	int rc = spin_wait(l, word, holder, deadline);
	shm_stats_wait(l->stats, since, rc < 0);
	return rc;
}

/* spin_wait is the waiting part of spin_lock_slow once spinning has not
 * got the lock: yield, then sleep until the lock is free, its holder dead,
 * or the caller gives up. */
static int spin_wait(shmlock_spin *l, uint64_t word, uint64_t holder, int64_t deadline)
{
	struct shm_owner_slot *s = l->slot;
	for (int i = 0; i < SPIN_OS_YIELDS; i++) {
		sched_yield();
		if (atomic_load(l->word) == 0 && spin_try(l, word, holder))
			return spin_report(s);
	}
	for (;;) {
		if (spin_closed(l)) {
			spin_pass_wake(l); /* the wake it may have consumed goes on */
			return SHMLOCK_ECLOSED;
		}
		int64_t sleep = shm_liveness_ns(SPIN_LIVENESS_NS);
		if (deadline >= 0) {
			int64_t left = deadline - shm_now_ns();
			if (left <= 0) {
				spin_pass_wake(l);
				return SHMLOCK_ETIMEDOUT;
			}
			if (left < sleep)
				sleep = left;
		}
		uint64_t owner = atomic_load(l->word);
		if (owner == 0) {
			if (spin_try(l, word, holder))
				return spin_report(s);
			continue;
		}
		uint32_t ticket = shm_sleepers_register(&s->pad);
		SHM_STATS_ADD(l->stats, sleeps);
		int rc = shm_futex_wait(l->fword, (uint32_t)owner, sleep);
		shm_sleepers_unregister(&s->pad, ticket);
		if (atomic_load(l->word) == 0 && spin_try(l, word, holder))
			return spin_report(s);
		if (rc == SHMLOCK_ETIMEDOUT && !spin_closed(l) && spin_reclaim(l, word, holder, owner))
			return SHMLOCK_OWNERDEAD;
	}
}

/* spin_acquire checks what every acquisition checks, then tries the fast
 * path. timeout_ns: negative waits forever, 0 tries once. */
static inline int spin_acquire(shmlock_spin *l, uint64_t holder, int64_t timeout_ns)
{
	if (SHM_UNLIKELY(l == NULL))
		return SHMLOCK_EINVAL;
	uint64_t word = spin_word_of(l, holder);
	if (SHM_UNLIKELY(word == 0))
		return SHMLOCK_EBADIDENTITY;
	if (SHM_UNLIKELY(spin_closed(l)))
		return SHMLOCK_ECLOSED;
	uint64_t seen = 0;
	if (SHM_LIKELY(spin_try_seen(l, word, holder, &seen)))
		return spin_report(l->slot);
	int64_t deadline = -1;
	if (timeout_ns > 0) {
		int64_t now = shm_now_ns();
		deadline = timeout_ns > INT64_MAX - now ? -1 : now + timeout_ns;
	}
	return spin_lock_slow(l, word, holder, deadline, timeout_ns == 0, seen);
}

SHM_EXPORT int shmlock_spin_lock(shmlock_spin *l, uint64_t holder)
{
	return spin_acquire(l, holder, -1);
}

SHM_EXPORT int shmlock_spin_trylock(shmlock_spin *l, uint64_t holder)
{
	return spin_acquire(l, holder, 0);
}

SHM_EXPORT int shmlock_spin_timedlock(shmlock_spin *l, uint64_t holder, int64_t timeout_ns)
{
	return spin_acquire(l, holder, timeout_ns);
}

/* ----------------------------------------------------------- release */

SHM_EXPORT int shmlock_spin_unlock(shmlock_spin *l, uint64_t holder)
{
	if (SHM_UNLIKELY(l == NULL))
		return SHMLOCK_EINVAL;
	uint64_t word = spin_word_of(l, holder);
	if (SHM_UNLIKELY(word == 0))
		return SHMLOCK_EBADIDENTITY;
	/* No closed check: a hold taken before shmlock_close is still given
	 * back (the handle keeps the mapping), as in Go. */
	struct shm_owner_slot *s = l->slot;
	if (l->mode == SHMLOCK_TOKEN) {
		if (!atomic_compare_exchange_strong(&s->token, &word, 0))
			return SHMLOCK_ENOTOWNER;
	} else {
		/* A holder that holds through this handle (ours) is of this
		 * process (word is its identity), and its TID is in the slot
		 * only while it holds: the slot's PID is not read, and the CAS
		 * that frees the lock word checks it at the end (it fails only
		 * for a hold taken over meanwhile, which is then not freed).
		 * Reading PID first cost Go's release 10-15 % of its counter and
		 * pingpong_retry (spinlock/spinlock.go, release). A holder not
		 * found there (another handle's, or a forged TID of another
		 * process's holder) has PID read first, so it changes nothing;
		 * so has one found there whose hold ended through another handle
		 * (the generation moved): another process's holder with the same
		 * id (a holder drawn before a fork is the child's too) may hold,
		 * and passing on ours alone cleared its TID, wedging the lock. */
		struct spin_ours *ours = spin_ours(l, holder);
		uint64_t gen = atomic_load_explicit(&s->token, memory_order_relaxed);
		bool mine = atomic_load_explicit(&ours->tid, memory_order_relaxed) == holder &&
		            atomic_load_explicit(&ours->word, memory_order_relaxed) == word &&
		            atomic_load_explicit(&ours->gen, memory_order_relaxed) == gen;
		if ((!mine && atomic_load(&s->pid) != word) || atomic_load(&s->tid) != holder)
			return SHMLOCK_ENOTOWNER;
		uint32_t r = atomic_load(&s->recursion);
		if (r & SHM_SLOT_RECURSION_MASK) {
			atomic_store(&s->recursion, r - 1); /* keeps the inconsistent bit */
			return SHMLOCK_OK;
		}
		if (mine)
			atomic_store_explicit(&ours->tid, 0, memory_order_relaxed);
		SHM_STORE_OWNED(&s->tid, 0);
		SHM_STORE_OWNED(&s->token, gen + 1);
		if (!atomic_compare_exchange_strong(&s->pid, &word, 0)) /* last: the lock is free from here */
			return SHMLOCK_ENOTOWNER;
	}
	if (SHM_UNLIKELY((atomic_load(&s->pad) & SHM_SLEEPERS_COUNT) != 0))
		spin_wake_one(l);
	return SHMLOCK_OK;
}

SHM_EXPORT int shmlock_spin_mark_consistent(shmlock_spin *l, uint64_t holder)
{
	if (l == NULL)
		return SHMLOCK_EINVAL;
	uint64_t word = spin_word_of(l, holder);
	if (word == 0)
		return SHMLOCK_EBADIDENTITY;
	if (!spin_held_by(l, word, holder))
		return SHMLOCK_ENOTOWNER;
	struct shm_owner_slot *s = l->slot;
	uint32_t r = atomic_load(&s->recursion);
	if (r & SHM_SLOT_INCONSISTENT)
		atomic_store(&s->recursion, r & ~SHM_SLOT_INCONSISTENT); /* the holder's word */
	return SHMLOCK_OK;
}

SHM_EXPORT int shmlock_spin_inconsistent(const shmlock_spin *l)
{
	if (l == NULL)
		return 0;
	return spin_report(l->slot) == SHMLOCK_INCONSISTENT;
}

SHM_EXPORT uint64_t shmlock_spin_generation(const shmlock_spin *l)
{
	if (l == NULL || l->mode == SHMLOCK_TOKEN)
		return 0;
	return atomic_load(&l->slot->token);
}

/* ----------------------------------------------------------- handles */

static bool spin_mode_ok(int mode)
{
	return mode == SHMLOCK_PIDTID || mode == SHMLOCK_TOKEN;
}

/* spinlock's checkClaimedMode: SHMLOCK_EUSEMISMATCH if the slot's claim
 * records the other mode (use = mode + 1), whose handles would read this
 * one's lock word as free or as their own kind. Only the claim can tell: a
 * free pid/tid slot reads as a token slot held with its generation, and a
 * pid/tid hold shows only while it lasts. A claim without a mode (use 0)
 * takes this one (shm_claim_adopt_use), so that the directory can read its
 * words and free its claim once released; a slot not claimed says nothing. */
static int check_claimed_mode(shmlock_segment *seg, size_t index, int mode)
{
	uint32_t use = shm_claim_use(seg, SHM_OWNER_SLOTS, index);
	bool said = use == SHMLOCK_PIDTID + 1 || use == SHMLOCK_TOKEN + 1;
	if (said)
		return use == (uint32_t)mode + 1 ? 0 : SHMLOCK_EUSEMISMATCH;
	if (use != 0)
		return 0;
	return shm_claim_adopt_use(seg, SHM_OWNER_SLOTS, index, (uint32_t)mode + 1);
}

SHM_EXPORT int shmlock_spin_open(shmlock_segment *seg, size_t index, int mode, shmlock_spin **out)
{
	if (seg == NULL || out == NULL || !spin_mode_ok(mode))
		return SHMLOCK_EINVAL;
	if (shm_closed(seg))
		return SHMLOCK_ECLOSED;
	/* Every acquisition writes the slot: on a read-only mapping that
	 * would kill the process (as upgrade_open, spinlock.Open). */
	if (seg->read_only)
		return SHMLOCK_EREADONLY;
	uint64_t count;
	struct shm_owner_slot *slots = shm_table_of(seg, SHM_OWNER_SLOTS, &count);
	if (slots == NULL || index >= count || index > INT32_MAX)
		return SHMLOCK_EINDEX;
	int rc = check_claimed_mode(seg, index, mode);
	if (rc < 0)
		return rc;
	shmlock_spin *l = calloc(1, sizeof *l);
	if (l == NULL)
		return SHMLOCK_ENOMEM;
	l->slot = &slots[index];
	l->word = mode == SHMLOCK_TOKEN ? &l->slot->token : &l->slot->pid;
	l->fword = (a32 *)(void *)l->word; /* little-endian: the low half comes first */
	l->seg = seg;
	l->mode = mode;
	l->index = (int)index;
	l->stats = shm_lock_stats(seg, SHM_OWNER_SLOTS, index);
	shm_seg_get(seg); /* the mapping lives as long as the handle */
	*out = l;
	return SHMLOCK_OK;
}

SHM_EXPORT int shmlock_spin_named(shmlock_segment *seg, const char *name, int mode, shmlock_spin **out)
{
	if (seg == NULL || name == NULL || out == NULL)
		return SHMLOCK_EINVAL;
	uint64_t words[5];
	uint32_t len;
	int rc = shm_pack_name(name, words, &len); /* as Go: a bad name before a bad mode */
	if (rc < 0)
		return rc;
	if (!spin_mode_ok(mode))
		return SHMLOCK_EINVAL;
	size_t index;
	/* The claim records the mode (use = mode + 1, spinlock.Mode.ClaimUse):
	 * SHMLOCK_EUSEMISMATCH if others named the slot for the other mode. */
	rc = shm_claim(seg, SHM_OWNER_SLOTS, name, (uint32_t)mode + 1, &index);
	if (rc < 0)
		return rc;
	shmlock_spin *l;
	rc = shmlock_spin_open(seg, index, mode, &l);
	if (rc < 0) {
		shm_release_claim(seg, SHM_OWNER_SLOTS, index);
		return rc;
	}
	l->named = true;
	*out = l;
	return SHMLOCK_OK;
}

/* Close drops the claim that named took, the handle's reference to its
 * segment, and frees the handle. It does not release the lock: a lock still
 * held keeps its claim until it is released and claimed anew (as in Go). */
SHM_EXPORT int shmlock_spin_close(shmlock_spin *l)
{
	if (l == NULL)
		return SHMLOCK_EINVAL;
	int rc = SHMLOCK_OK;
	if (l->named)
		rc = shm_release_claim(l->seg, SHM_OWNER_SLOTS, (size_t)l->index);
	shm_seg_put(l->seg);
	free(l);
	return rc;
}

SHM_EXPORT int shmlock_spin_index(const shmlock_spin *l)
{
	return l == NULL ? SHMLOCK_EINVAL : l->index;
}
