/* test_spinlock.c: the spinlocks of libshmlock, in one process and its
 * forked children (the Go tests mix in Go processes). */
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "internal.h"

static char path[256];
static shmlock_segment *seg;

static void setup(void)
{
	check_temp_path(path, sizeof path, "spin");
	shmlock_options o = {.slots = 8};
	int rc = shmlock_create(path, &o, &seg);
	CHECK_RC(rc, 0);
	if (rc != 0)
		exit(1);
}

static void teardown(void)
{
	CHECK_RC(shmlock_close(seg), 0);
	CHECK_RC(shmlock_remove(path), 0);
}

/* slot is owner slot i of the segment, to look at the words directly. */
static struct shm_owner_slot *slot(size_t i)
{
	uint64_t n;
	struct shm_owner_slot *s = shm_table_of(seg, SHM_OWNER_SLOTS, &n);
	return i < n ? &s[i] : NULL;
}

static shmlock_spin *open_lock(size_t i, int mode)
{
	shmlock_spin *l = NULL;
	CHECK_RC(shmlock_spin_open(seg, i, mode, &l), 0);
	if (l == NULL)
		exit(1);
	return l;
}

static void test_recursion(void)
{
	shmlock_spin *l = open_lock(0, SHMLOCK_PIDTID);
	struct shm_owner_slot *s = slot(0);
	uint64_t h = shmlock_holder_new(), gen = shmlock_spin_generation(l);
	CHECK_RC(shmlock_spin_lock(l, h), 0);
	CHECK(atomic_load(&s->pid) == shmlock_self_identity());
	CHECK(atomic_load(&s->tid) == h);
	CHECK_RC(shmlock_spin_trylock(l, h), 0);
	CHECK_RC(shmlock_spin_timedlock(l, h, 1000000), 0);
	CHECK(atomic_load(&s->recursion) == 2);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK(shmlock_spin_generation(l) == gen); /* only the outermost release counts */
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK(shmlock_spin_generation(l) == gen + 1);
	CHECK(atomic_load(&s->pid) == 0 && atomic_load(&s->tid) == 0);
	CHECK_RC(shmlock_spin_unlock(l, h), SHMLOCK_ENOTOWNER);
	CHECK(shmlock_spin_generation(l) == gen + 1);

	/* A free slot with a recursion count was damaged: the grant drops the
	 * count and reports the slot inconsistent, and one release frees it. */
	atomic_store(&s->recursion, 5);
	CHECK_RC(shmlock_spin_lock(l, h), SHMLOCK_INCONSISTENT);
	CHECK(atomic_load(&s->recursion) == SHM_SLOT_INCONSISTENT);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK(atomic_load(&s->pid) == 0);
	CHECK_RC(shmlock_spin_mark_consistent(l, h), SHMLOCK_ENOTOWNER);
	atomic_store(&s->recursion, 0);

	/* The depth limit: bits 0-30 of the recursion word. */
	CHECK_RC(shmlock_spin_lock(l, h), 0);
	atomic_store(&s->recursion, SHM_SLOT_RECURSION_MASK);
	CHECK_RC(shmlock_spin_lock(l, h), SHMLOCK_ERECURSION);
	CHECK(atomic_load(&s->recursion) == SHM_SLOT_RECURSION_MASK);
	atomic_store(&s->recursion, 0);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK_RC(shmlock_spin_close(l), 0);
}

static void test_not_owner(void)
{
	shmlock_spin *l = open_lock(1, SHMLOCK_PIDTID);
	shmlock_spin *l2 = open_lock(1, SHMLOCK_PIDTID); /* a second handle on the same slot */
	uint64_t a = shmlock_holder_new(), b = shmlock_holder_new();
	CHECK_RC(shmlock_spin_lock(l, a), 0);
	CHECK_RC(shmlock_spin_unlock(l, b), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_unlock(l2, b), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_mark_consistent(l, b), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_trylock(l2, b), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_spin_timedlock(l2, b, 0), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_spin_timedlock(l2, b, 20 * 1000000), SHMLOCK_ETIMEDOUT);
	CHECK(atomic_load(&slot(1)->tid) == a);
	/* A timed-out waiter leaves no sleeper registered. */
	CHECK((atomic_load(&slot(1)->pad) & SHM_SLEEPERS_COUNT) == 0);
	CHECK_RC(shmlock_spin_unlock(l2, a), 0); /* any handle of the holder may release */
	CHECK_RC(shmlock_spin_trylock(l2, b), 0);
	CHECK_RC(shmlock_spin_unlock(l2, b), 0);
	CHECK_RC(shmlock_spin_close(l2), 0);
	CHECK_RC(shmlock_spin_close(l), 0);
}

static void test_bad_input(void)
{
	shmlock_spin *l = NULL;
	CHECK_RC(shmlock_spin_open(seg, 0, 2, &l), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_open(seg, 0, -1, &l), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_open(seg, 8, SHMLOCK_PIDTID, &l), SHMLOCK_EINDEX);
	CHECK_RC(shmlock_spin_open(seg, (size_t)-1, SHMLOCK_PIDTID, &l), SHMLOCK_EINDEX);
	CHECK_RC(shmlock_spin_open(NULL, 0, SHMLOCK_PIDTID, &l), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_open(seg, 0, SHMLOCK_PIDTID, NULL), SHMLOCK_EINVAL);
	CHECK(l == NULL);
	CHECK_RC(shmlock_spin_named(seg, "", SHMLOCK_PIDTID, &l), SHMLOCK_EBADNAME);
	CHECK_RC(shmlock_spin_named(seg, "a\nb", SHMLOCK_PIDTID, &l), SHMLOCK_EBADNAME);
	CHECK_RC(shmlock_spin_named(seg, "0123456789012345678901234567890123456789x", SHMLOCK_PIDTID, &l),
	         SHMLOCK_EBADNAME);
	CHECK_RC(shmlock_spin_named(seg, "ok", 7, &l), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_named(seg, NULL, SHMLOCK_PIDTID, &l), SHMLOCK_EINVAL);
	CHECK(l == NULL);

	CHECK_RC(shmlock_spin_lock(NULL, 1), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_trylock(NULL, 1), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_unlock(NULL, 1), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_mark_consistent(NULL, 1), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_close(NULL), SHMLOCK_EINVAL);
	CHECK_RC(shmlock_spin_index(NULL), SHMLOCK_EINVAL);
	CHECK(shmlock_spin_inconsistent(NULL) == 0);
	CHECK(shmlock_spin_generation(NULL) == 0);

	/* Identities that do not fit the mode change nothing. */
	l = open_lock(2, SHMLOCK_PIDTID);
	CHECK_RC(shmlock_spin_lock(l, 0), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_trylock(l, 0), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_timedlock(l, 0, 1000), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_unlock(l, 0), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_mark_consistent(l, 0), SHMLOCK_EBADIDENTITY);
	CHECK(atomic_load(&slot(2)->pid) == 0);
	CHECK(shmlock_spin_index(l) == 2);
	CHECK_RC(shmlock_spin_close(l), 0);

	l = open_lock(2, SHMLOCK_TOKEN);
	uint64_t high_only = UINT64_C(0xabcd) << 32; /* its low half, the futex word, is 0 */
	CHECK_RC(shmlock_spin_lock(l, high_only), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_lock(l, 0), SHMLOCK_EBADIDENTITY);
	CHECK_RC(shmlock_spin_unlock(l, high_only), SHMLOCK_EBADIDENTITY);
	CHECK(atomic_load(&slot(2)->token) == 0);
	CHECK_RC(shmlock_spin_close(l), 0);

	for (int i = 0; i < 100; i++) {
		CHECK(shmlock_holder_new() != 0);
		CHECK((uint32_t)shmlock_token_new() != 0);
	}
	CHECK(shmlock_holder_thread() == shmlock_holder_thread());
}

static void test_token(void)
{
	shmlock_spin *l = open_lock(3, SHMLOCK_TOKEN);
	struct shm_owner_slot *s = slot(3);
	uint64_t t = shmlock_token_new(), u = shmlock_token_new();
	CHECK_RC(shmlock_spin_lock(l, t), 0);
	CHECK(atomic_load(&s->token) == t && atomic_load(&s->pid) == 0);
	CHECK_RC(shmlock_spin_trylock(l, t), SHMLOCK_EWOULDBLOCK); /* tokens do not nest */
	CHECK_RC(shmlock_spin_trylock(l, u), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_spin_timedlock(l, u, 5 * 1000000), SHMLOCK_ETIMEDOUT);
	CHECK_RC(shmlock_spin_unlock(l, u), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_mark_consistent(l, t), 0);
	CHECK(shmlock_spin_generation(l) == 0);
	/* Whoever has the token releases: here another handle. */
	shmlock_spin *l2 = open_lock(3, SHMLOCK_TOKEN);
	CHECK_RC(shmlock_spin_unlock(l2, t), 0);
	CHECK(atomic_load(&s->token) == 0);
	CHECK_RC(shmlock_spin_unlock(l2, t), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_lock(l2, u), 0);
	CHECK_RC(shmlock_spin_unlock(l, u), 0);
	CHECK_RC(shmlock_spin_close(l2), 0);
	CHECK_RC(shmlock_spin_close(l), 0);
}

static void test_named(void)
{
	shmlock_spin *a = NULL, *b = NULL, *c = NULL;
	CHECK_RC(shmlock_spin_named(seg, "named.one", SHMLOCK_PIDTID, &a), 0);
	CHECK_RC(shmlock_spin_named(seg, "named.one", SHMLOCK_PIDTID, &b), 0);
	CHECK_RC(shmlock_spin_named(seg, "named.one", SHMLOCK_TOKEN, &c), SHMLOCK_EUSEMISMATCH);
	CHECK(c == NULL);
	if (a == NULL || b == NULL)
		return;
	CHECK(shmlock_spin_index(a) == shmlock_spin_index(b));
	CHECK_RC(shmlock_spin_named(seg, "named.two", SHMLOCK_TOKEN, &c), 0);
	if (c == NULL)
		return;
	CHECK(shmlock_spin_index(c) != shmlock_spin_index(a));
	uint64_t h = shmlock_holder_new();
	CHECK_RC(shmlock_spin_lock(a, h), 0);
	CHECK_RC(shmlock_spin_trylock(b, shmlock_holder_new()), SHMLOCK_EWOULDBLOCK);
	CHECK_RC(shmlock_spin_unlock(b, h), 0);
	CHECK_RC(shmlock_spin_close(a), 0);
	CHECK_RC(shmlock_spin_close(b), 0);
	CHECK_RC(shmlock_spin_close(c), 0);
}

/* Open by index refuses the mode a slot's claim contradicts, as named does
 * (spinlock.Open), changing nothing; a claim without a mode takes the mode
 * of its first open and then refuses the other; a use that is no mode, or
 * no claim, lets either mode open. */
static void test_open_claimed_mode(void)
{
	for (int mode = SHMLOCK_PIDTID; mode <= SHMLOCK_TOKEN; mode++) {
		int other = 1 - mode;
		shmlock_spin *named = NULL, *l = NULL;
		CHECK_RC(shmlock_spin_named(seg, mode ? "mode.token" : "mode.pidtid", mode, &named), 0);
		if (named == NULL)
			return;
		size_t i = (size_t)shmlock_spin_index(named);
		CHECK_RC(shmlock_spin_open(seg, i, other, &l), SHMLOCK_EUSEMISMATCH);
		CHECK(l == NULL);
		CHECK(shm_claim_use(seg, SHM_OWNER_SLOTS, i) == (uint32_t)mode + 1);
		CHECK_RC(shmlock_spin_open(seg, i, mode, &l), 0);
		if (l != NULL)
			CHECK_RC(shmlock_spin_close(l), 0);
		CHECK_RC(shmlock_spin_close(named), 0);
	}
	size_t unsaid, not_a_mode;
	CHECK_RC(shm_claim(seg, SHM_OWNER_SLOTS, "mode.unsaid", 0, &unsaid), 0);
	CHECK_RC(shm_claim(seg, SHM_OWNER_SLOTS, "mode.other", 7, &not_a_mode), 0);
	shmlock_spin *first = NULL, *refused = NULL;
	CHECK_RC(shmlock_spin_open(seg, unsaid, SHMLOCK_TOKEN, &first), 0);
	if (first != NULL)
		CHECK_RC(shmlock_spin_close(first), 0);
	CHECK(shm_claim_use(seg, SHM_OWNER_SLOTS, unsaid) == SHMLOCK_TOKEN + 1);
	CHECK_RC(shmlock_spin_open(seg, unsaid, SHMLOCK_PIDTID, &refused), SHMLOCK_EUSEMISMATCH);
	size_t idx[] = {not_a_mode, 7 /* the last slot: never claimed here */};
	for (size_t k = 0; k < sizeof idx / sizeof idx[0]; k++)
		for (int mode = SHMLOCK_PIDTID; mode <= SHMLOCK_TOKEN; mode++) {
			shmlock_spin *l = NULL;
			CHECK_RC(shmlock_spin_open(seg, idx[k], mode, &l), 0);
			if (l != NULL)
				CHECK_RC(shmlock_spin_close(l), 0);
		}
	CHECK_RC(shm_release_claim(seg, SHM_OWNER_SLOTS, unsaid), 0);
	CHECK_RC(shm_release_claim(seg, SHM_OWNER_SLOTS, not_a_mode), 0);
}

/* A forked child takes the lock and is SIGKILLed holding it. */
static pid_t child_holding(shmlock_spin *l)
{
	int fds[2];
	if (pipe(fds) != 0)
		exit(1);
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		int rc = shmlock_spin_lock(l, shmlock_holder_new());
		char c = rc >= 0 ? 'h' : 'x';
		if (write(fds[1], &c, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	char c = 0;
	CHECK(read(fds[0], &c, 1) == 1 && c == 'h');
	close(fds[0]);
	return pid;
}

static void kill_child(pid_t pid)
{
	int status;
	kill(pid, SIGKILL);
	CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
}

/* The holder id of another process's hold, given to this process's
 * unlock (a forged identity): ENOTOWNER, and the slot as it was. The
 * release does not read PID for a holder it finds in the handle's ours;
 * this one is not there, so PID is read first. */
static void test_forged_holder(void)
{
	shmlock_spin *l = open_lock(6, SHMLOCK_PIDTID);
	pid_t pid = child_holding(l);
	struct shm_owner_slot *s = slot(6);
	uint64_t p = atomic_load(&s->pid), t = atomic_load(&s->tid), g = atomic_load(&s->token);
	CHECK(p != 0 && t != 0);
	CHECK_RC(shmlock_spin_unlock(l, t), SHMLOCK_ENOTOWNER);
	CHECK(atomic_load(&s->pid) == p && atomic_load(&s->tid) == t && atomic_load(&s->token) == g);
	kill_child(pid);
	uint64_t h = shmlock_holder_new(); /* the slot left free and consistent */
	CHECK_RC(shmlock_spin_lock(l, h), SHMLOCK_OWNERDEAD);
	CHECK_RC(shmlock_spin_mark_consistent(l, h), 0);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK_RC(shmlock_spin_close(l), 0);
}

/* A child forked while its parent holds the lock has the parent's handle,
 * holder id and all: its unlock with that id is not the holder's (another
 * process), so ENOTOWNER and the slot as it was; the parent's unlock
 * works after. */
static void test_forked_child_unlock(void)
{
	shmlock_spin *l = open_lock(6, SHMLOCK_PIDTID);
	struct shm_owner_slot *s = slot(6);
	uint64_t h = shmlock_holder_new();
	CHECK_RC(shmlock_spin_lock(l, h), 0);
	uint64_t p = atomic_load(&s->pid), g = atomic_load(&s->token);
	pid_t pid = fork();
	if (pid == 0)
		_exit(shmlock_spin_unlock(l, h) == SHMLOCK_ENOTOWNER ? 0 : 1);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(atomic_load(&s->pid) == p && atomic_load(&s->tid) == h && atomic_load(&s->token) == g);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK_RC(shmlock_spin_close(l), 0);
}

/* A handle whose ours still names a holder whose hold ended through
 * another handle: the holder's unlock through it, once a child forked with
 * the same holder id (the pair process, holder is the holder) holds, is
 * ENOTOWNER and changes nothing; the child's unlock works after. It used
 * to pass on ours alone, clear the child's TID and bump the generation
 * before its CAS failed: the child's unlock then failed too, and the lock
 * stayed held while the child lived. */
static void test_stale_ours(void)
{
	shmlock_spin *a = open_lock(6, SHMLOCK_PIDTID), *b = open_lock(6, SHMLOCK_PIDTID);
	struct shm_owner_slot *s = slot(6);
	uint64_t h = shmlock_holder_new();
	CHECK_RC(shmlock_spin_lock(a, h), 0);
	CHECK_RC(shmlock_spin_unlock(b, h), 0); /* a's ours still names h */
	int held[2], done[2];
	if (pipe(held) != 0 || pipe(done) != 0)
		exit(1);
	pid_t pid = fork();
	if (pid == 0) {
		char c = shmlock_spin_lock(b, h) == 0 ? 'h' : 'x';
		if (write(held[1], &c, 1) != 1 || read(done[0], &c, 1) != 1)
			_exit(2);
		_exit(shmlock_spin_unlock(b, h) == 0 ? 0 : 1);
	}
	char c = 0;
	CHECK(read(held[0], &c, 1) == 1 && c == 'h');
	uint64_t p = atomic_load(&s->pid), g = atomic_load(&s->token);
	CHECK(p != shmlock_self_identity() && atomic_load(&s->tid) == h);
	CHECK_RC(shmlock_spin_unlock(a, h), SHMLOCK_ENOTOWNER);
	CHECK(atomic_load(&s->pid) == p && atomic_load(&s->tid) == h && atomic_load(&s->token) == g);
	CHECK(write(done[1], "u", 1) == 1);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(atomic_load(&s->pid) == 0);
	close(held[0]);
	close(held[1]);
	close(done[0]);
	close(done[1]);
	CHECK_RC(shmlock_spin_close(a), 0);
	CHECK_RC(shmlock_spin_close(b), 0);
}

static void test_reclaim(void)
{
	shmlock_spin *l = open_lock(4, SHMLOCK_PIDTID);
	struct shm_owner_slot *s = slot(4);
	uint64_t h = shmlock_holder_new(), g = shmlock_holder_new();
	pid_t pid = child_holding(l);
	uint64_t dead = atomic_load(&s->pid), gen = shmlock_spin_generation(l);
	CHECK(dead != 0 && dead != shmlock_self_identity());
	CHECK_RC(shmlock_spin_trylock(l, h), SHMLOCK_EWOULDBLOCK); /* alive */
	kill_child(pid);
	CHECK_RC(shmlock_spin_trylock(l, h), SHMLOCK_EWOULDBLOCK); /* a try never reclaims */
	CHECK(shmlock_spin_inconsistent(l) == 0);

	CHECK_RC(shmlock_spin_lock(l, h), SHMLOCK_OWNERDEAD);
	CHECK(atomic_load(&s->pid) == shmlock_self_identity() && atomic_load(&s->tid) == h);
	CHECK(shmlock_spin_generation(l) == gen + 1);
	CHECK(shmlock_spin_inconsistent(l) == 1);
	CHECK_RC(shmlock_spin_lock(l, h), SHMLOCK_INCONSISTENT); /* recursion is told too */
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK(shmlock_spin_inconsistent(l) == 1);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK(shmlock_spin_inconsistent(l) == 1); /* it stays until marked */

	/* Every holder is told until one marks the lock consistent. */
	CHECK_RC(shmlock_spin_lock(l, g), SHMLOCK_INCONSISTENT);
	CHECK_RC(shmlock_spin_unlock(l, g), 0);
	CHECK_RC(shmlock_spin_timedlock(l, h, 1000000), SHMLOCK_INCONSISTENT);
	CHECK_RC(shmlock_spin_mark_consistent(l, g), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_mark_consistent(l, h), 0);
	CHECK(shmlock_spin_inconsistent(l) == 0);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK_RC(shmlock_spin_lock(l, g), 0);
	CHECK_RC(shmlock_spin_unlock(l, g), 0);

	/* A timed wait reclaims too, and a holder that died twice is one
	 * reclaim each time. */
	pid = child_holding(l);
	kill_child(pid);
	CHECK_RC(shmlock_spin_timedlock(l, h, 5 * INT64_C(1000000000)), SHMLOCK_OWNERDEAD);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK_RC(shmlock_spin_mark_consistent(l, h), SHMLOCK_ENOTOWNER);
	CHECK_RC(shmlock_spin_lock(l, h), SHMLOCK_INCONSISTENT);
	CHECK_RC(shmlock_spin_mark_consistent(l, h), 0);
	CHECK_RC(shmlock_spin_unlock(l, h), 0);
	CHECK_RC(shmlock_spin_close(l), 0);
}

/* Threads of one process, each its own holder, hammer one lock. */
enum { THREADS = 4, ROUNDS = 20000 };
static uint64_t counter;
static int hammer_mode;

static void *hammer(void *arg)
{
	shmlock_spin *l = arg;
	uint64_t h = shmlock_holder_thread();
	for (int i = 0; i < ROUNDS; i++) {
		if (hammer_mode == SHMLOCK_TOKEN)
			h = shmlock_token_new(); /* a token per acquisition */
		int rc = shmlock_spin_lock(l, h);
		if (rc != 0) {
			fprintf(stderr, "lock: %s\n", shmlock_strerror(rc));
			return (void *)1;
		}
		uint64_t v = counter; /* a plain read-modify-write under the lock */
		counter = v + 1;
		if (shmlock_spin_unlock(l, h) != 0)
			return (void *)1;
	}
	return NULL;
}

static void test_threads(void)
{
	for (int mode = SHMLOCK_PIDTID; mode <= SHMLOCK_TOKEN; mode++) {
		shmlock_spin *l = open_lock(mode == SHMLOCK_PIDTID ? 5 : 7, mode); /* a slot keeps the generation of pid/tid use in its token word */
		pthread_t th[THREADS];
		counter = 0;
		hammer_mode = mode;
		uint64_t gen = shmlock_spin_generation(l);
		for (int i = 0; i < THREADS; i++)
			pthread_create(&th[i], NULL, hammer, l);
		for (int i = 0; i < THREADS; i++) {
			void *ret;
			pthread_join(th[i], &ret);
			CHECK(ret == NULL);
		}
		CHECK(counter == (uint64_t)THREADS * ROUNDS);
		if (mode == SHMLOCK_PIDTID)
			CHECK(shmlock_spin_generation(l) == gen + (uint64_t)THREADS * ROUNDS);
		CHECK_RC(shmlock_spin_close(l), 0);
	}
}

/* A waiter that found the lock held sleeps (it registers in pad) and the
 * release wakes it. */
struct sleeper {
	shmlock_spin *l;
	int rc;
};

/* wait_for_sleeper returns once a waiter is registered asleep on slot s. */
static void wait_for_sleeper(struct shm_owner_slot *s)
{
	while ((atomic_load(&s->pad) & SHM_SLEEPERS_COUNT) == 0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

static void *sleeper(void *arg)
{
	struct sleeper *w = arg;
	w->rc = shmlock_spin_lock(w->l, shmlock_holder_thread());
	if (w->rc == 0)
		w->rc = shmlock_spin_unlock(w->l, shmlock_holder_thread());
	return NULL;
}

static void test_sleep_wake(void)
{
	for (int mode = SHMLOCK_PIDTID; mode <= SHMLOCK_TOKEN; mode++) {
		size_t i = mode == SHMLOCK_PIDTID ? 6 : 3;
		shmlock_spin *l = open_lock(i, mode);
		struct shm_owner_slot *s = slot(i);
		uint64_t h = mode == SHMLOCK_TOKEN ? shmlock_token_new() : shmlock_holder_new();
		CHECK_RC(shmlock_spin_lock(l, h), 0);
		struct sleeper w = {.l = l, .rc = 99};
		pthread_t th;
		pthread_create(&th, NULL, sleeper, &w);
		wait_for_sleeper(s);
		CHECK_RC(shmlock_spin_unlock(l, h), 0);
		pthread_join(th, NULL);
		CHECK_RC(w.rc, 0);
		CHECK((atomic_load(&s->pad) & (SHM_SLEEPERS_COUNT | SHM_SLEEPERS_WAKE_PENDING)) == 0);
		CHECK_RC(shmlock_spin_close(l), 0);
	}
}

/* A waiter asleep when its segment is closed is not given the lock when
 * the holder (through another mapping) releases it: it returns ECLOSED and
 * the lock stays free, as in Go (spinlock.TestCloseEndsAWait). Granted, the
 * hold would be one its caller was told it could not take. */
static void test_closed_while_waiting(void)
{
	for (int mode = SHMLOCK_PIDTID; mode <= SHMLOCK_TOKEN; mode++) {
		size_t i = mode == SHMLOCK_PIDTID ? 6 : 3;
		shmlock_spin *l = open_lock(i, mode);
		struct shm_owner_slot *s = slot(i);
		uint64_t h = mode == SHMLOCK_TOKEN ? shmlock_token_new() : shmlock_holder_new();
		CHECK_RC(shmlock_spin_lock(l, h), 0);
		shmlock_segment *s2;
		CHECK_RC(shmlock_open(path, NULL, &s2), 0);
		shmlock_spin *l2 = NULL;
		CHECK_RC(shmlock_spin_open(s2, i, mode, &l2), 0);
		struct sleeper w = {.l = l2, .rc = 99};
		pthread_t th;
		pthread_create(&th, NULL, sleeper, &w);
		wait_for_sleeper(s);
		CHECK_RC(shmlock_close(s2), 0);
		CHECK_RC(shmlock_spin_unlock(l, h), 0); /* wakes the sleeper */
		pthread_join(th, NULL);
		CHECK_RC(w.rc, SHMLOCK_ECLOSED);
		CHECK(atomic_load(&s->pid) == 0);
		CHECK(mode == SHMLOCK_PIDTID || atomic_load(&s->token) == 0);
		CHECK((atomic_load(&s->pad) & (SHM_SLEEPERS_COUNT | SHM_SLEEPERS_WAKE_PENDING)) == 0);
		CHECK_RC(shmlock_spin_close(l2), 0);
		CHECK_RC(shmlock_spin_close(l), 0);
	}
}

/* A read-only mapping's slots are not lock handles: every acquisition
 * writes the slot, and the write would kill the process (as Go's
 * spinlock.Open). */
static void test_read_only(void)
{
	shmlock_options o = {.flags = SHMLOCK_READ_ONLY};
	shmlock_segment *ro;
	CHECK_RC(shmlock_open(path, &o, &ro), 0);
	shmlock_spin *l = NULL;
	for (int mode = SHMLOCK_PIDTID; mode <= SHMLOCK_TOKEN; mode++) {
		CHECK_RC(shmlock_spin_open(ro, 0, mode, &l), SHMLOCK_EREADONLY);
		CHECK_RC(shmlock_spin_named(ro, "read-only", mode, &l), SHMLOCK_EREADONLY);
	}
	CHECK(l == NULL);
	CHECK_RC(shmlock_close(ro), 0);
}

int main(void)
{
	setup();
	RUN(test_recursion);
	RUN(test_not_owner);
	RUN(test_bad_input);
	RUN(test_token);
	RUN(test_named);
	RUN(test_open_claimed_mode);
	RUN(test_forged_holder);
	RUN(test_forked_child_unlock);
	RUN(test_stale_ours);
	RUN(test_reclaim);
	RUN(test_threads);
	RUN(test_sleep_wake);
	RUN(test_closed_while_waiting);
	RUN(test_read_only);
	teardown();
	return CHECK_DONE();
}
