/* test_ident.c: identities, liveness, holders, tokens, the sleepers word. */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "check.h"
#include "internal.h"

static void test_self(void)
{
	uint64_t id = shm_self();
	CHECK((id & SHM_PID_MASK) == (uint64_t)getpid());
	CHECK((id >> SHM_PID_BITS & SHM_START_MASK) != 0);
	CHECK(shmlock_self_identity() == id);
	CHECK(shmlock_identity_alive(id) == 1);
	CHECK(shm_alive(id));
	CHECK(!shm_alive(0));
	CHECK(!shm_alive(id | SHM_STALE_BIT));
	CHECK(!shm_alive_uncached(id | SHM_STALE_BIT));
	/* Same pid, another start time: a reused pid. */
	CHECK(!shm_alive_uncached(id ^ (UINT64_C(1) << SHM_PID_BITS)));
}

static void test_fork(void)
{
	uint64_t parent = shm_self(), tok = shmlock_token_new();
	int fds[2];
	CHECK(pipe(fds) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		uint64_t v[2] = {shm_self(), shmlock_token_new()};
		ssize_t n = write(fds[1], v, sizeof v);
		_exit(n == sizeof v ? 0 : 1);
	}
	uint64_t v[2] = {0, 0};
	CHECK(read(fds[0], v, sizeof v) == sizeof v);
	CHECK((v[0] & SHM_PID_MASK) == (uint64_t)pid);
	CHECK(v[0] != parent);
	CHECK(v[1] != shmlock_token_new()); /* the child reseeded */
	(void)tok;
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	/* Dead and reaped. */
	CHECK(!shm_alive_uncached(v[0]));
	CHECK(!shm_alive(v[0]));
	close(fds[0]);
	close(fds[1]);
}

static void test_zombie(void)
{
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	/* Wait until it is a zombie, without reaping it. */
	siginfo_t si;
	CHECK(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) == 0);
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	if (f) {
		CHECK(fgets(buf, sizeof buf, f) != NULL);
		fclose(f);
		char *p = strrchr(buf, ')');
		unsigned long long start = 0;
		int field = 2;
		for (char *t = strtok(p + 1, " "); t; t = strtok(NULL, " "))
			if (++field == 22)
				start = strtoull(t, NULL, 10);
		uint64_t id = (uint64_t)pid | (start & SHM_START_MASK) << SHM_PID_BITS;
		CHECK(!shm_alive_uncached(id));
	}
	waitpid(pid, NULL, 0);
}

/* A process whose main thread exited (pthread_exit) shows Z in
 * /proc/<pid>/stat while its other threads run, and may hold locks: alive
 * until the last one exits (zombie meant dead: two holders). */
static int leader_pipe[2];

static void *leader_thread(void *arg)
{
	(void)arg;
	char c;
	while (read(leader_pipe[0], &c, 1) > 0) {
	}
	return NULL;
}

static char stat_state(pid_t pid, uint64_t *start)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char *got = fgets(buf, sizeof buf, f);
	fclose(f);
	if (!got)
		return 0;
	char *p = strrchr(buf, ')');
	char state = p[2];
	int field = 2;
	for (char *t = strtok(p + 1, " "); t; t = strtok(NULL, " "))
		if (++field == 22)
			*start = strtoull(t, NULL, 10);
	return state;
}

static void test_leader_exited(void)
{
	CHECK(pipe(leader_pipe) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(leader_pipe[1]);
		pthread_t t;
		if (pthread_create(&t, NULL, leader_thread, NULL) != 0)
			_exit(1);
		pthread_exit(NULL);
	}
	close(leader_pipe[0]);
	uint64_t start = 0;
	for (int i = 0; i < 10000 && stat_state(pid, &start) != 'Z'; i++)
		usleep(1000);
	CHECK(stat_state(pid, &start) == 'Z');
	uint64_t id = (uint64_t)pid | (start & SHM_START_MASK) << SHM_PID_BITS;
	CHECK(shm_alive_uncached(id));
	close(leader_pipe[1]); /* its last thread exits */
	bool alive = true;
	for (int i = 0; i < 10000 && (alive = shm_alive_uncached(id)); i++)
		usleep(1000);
	CHECK(!alive);
	waitpid(pid, NULL, 0);
}

static void *thread_holder(void *arg)
{
	*(uint64_t *)arg = shmlock_holder_thread();
	return NULL;
}

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x80
#endif

/* A process of another time namespace, in the same PID namespace, reads
 * its own start time shifted by its namespace's boot-time offset: it runs
 * all the same (Go: TestAliveOtherTimeNamespace). The child makes the
 * namespace, which needs the privilege to; its child is of it. */
static void test_other_time_namespace(void)
{
	int out[2], hold[2];
	CHECK(pipe(out) == 0 && pipe(hold) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(out[0]);
		close(hold[1]);
		int fd = -1;
		if (unshare(CLONE_NEWTIME) != 0 || (fd = open("/proc/self/timens_offsets", O_WRONLY)) < 0)
			_exit(2);
		static const char offsets[] = "boottime 1000 0\n";
		if (write(fd, offsets, sizeof offsets - 1) != (ssize_t)(sizeof offsets - 1))
			_exit(2);
		close(fd);
		pid_t inner = fork();
		if (inner == 0) {
			uint64_t id = shm_self();
			if (write(out[1], &id, sizeof id) != sizeof id)
				_exit(1);
			char c;
			while (read(hold[0], &c, 1) > 0) {
			}
			_exit(0);
		}
		int st = 0;
		_exit(inner > 0 && waitpid(inner, &st, 0) == inner && WIFEXITED(st) ? WEXITSTATUS(st) : 1);
	}
	close(out[1]);
	close(hold[0]);
	uint64_t id = 0;
	ssize_t n = read(out[0], &id, sizeof id);
	if (n == sizeof id) {
		uint32_t inner = (uint32_t)(id & SHM_PID_MASK);
		char path[64], line[1024];
		snprintf(path, sizeof path, "/proc/%u/stat", inner);
		FILE *f = fopen(path, "r");
		unsigned long long seen = 0;
		char *end = f && fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL;
		if (end)
			sscanf(end + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &seen);
		if (f)
			fclose(f);
		CHECK(seen != 0 && seen != (id >> SHM_PID_BITS & SHM_START_MASK)); /* shifted */
		CHECK(shm_alive_uncached(id));
	}
	close(hold[1]);
	close(out[0]);
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
	if (n != sizeof id) {
		CHECK(WEXITSTATUS(st) == 2);
		CHECK_SKIP("cannot make a time namespace here");
	} else {
		CHECK(WEXITSTATUS(st) == 0);
	}
}

static void test_holders(void)
{
	uint64_t h = shmlock_holder_thread();
	CHECK(h == shmlock_holder_thread());
	CHECK((h & 0xffffffffu) == (uint64_t)syscall(SYS_gettid));
	uint64_t other = 0;
	pthread_t t;
	CHECK(pthread_create(&t, NULL, thread_holder, &other) == 0);
	pthread_join(t, NULL);
	CHECK(other != 0 && other != h);
	for (int i = 0; i < 1000; i++) {
		CHECK(shmlock_holder_new() != 0);
		CHECK((uint32_t)shmlock_token_new() != 0);
	}
	CHECK(shmlock_holder_new() != shmlock_holder_new());
}

static void test_boot_clock(void)
{
	uint8_t a[16], zero[16] = {0};
	CHECK_RC(shm_boot_id(a), 0);
	CHECK(memcmp(a, zero, 16) != 0);
	int64_t t0 = shm_now_ns(), t1 = shm_now_ns();
	CHECK(t0 > 0 && t1 >= t0 - 1000); /* a new anchor may step back by up to a microsecond */
}

/* shm_now_ns tracks CLOCK_MONOTONIC: each reading lies between the vDSO
 * readings taken around it, give or take the fast clock's bound (1 us),
 * for long enough that the fast clock, where it runs, calibrates (10 ms)
 * and takes a few hundred anchors (one a millisecond); and by then it is
 * either off for good or extrapolating, not still calibrating. */
static void test_clock_tracks_kernel(void)
{
	int64_t end = shm_vdso_now_ns() + 300 * INT64_C(1000000);
	long n = 0, outside = 0;
	for (int64_t a; (a = shm_vdso_now_ns()) < end; n++) {
		int64_t t = shm_now_ns();
		int64_t b = shm_vdso_now_ns();
		if (t < a - 1000 || t > b + 1000) {
			if (outside++ == 0)
				fprintf(stderr, "shm_now_ns %lld outside [%lld, %lld] by more than 1 us\n", (long long)t,
				        (long long)a, (long long)b);
		}
	}
	CHECK(outside == 0);
	CHECK(n > 1000);
	int state = shm_clock_state();
	fprintf(stderr, "fast clock state %d after %ld readings\n", state, n);
	CHECK(state != 0);
}

static void test_sleepers(void)
{
	a32 w = 0, gate = 0;
	uint32_t early = shm_sleepers_register(&w);
	shm_sleepers_register(&w);
	CHECK(atomic_load(&w) == 2 && early == 0);
	/* Nobody in the kernel: the wake is futile and clears wake-pending. */
	shm_sleepers_wake_one(&w, &gate);
	CHECK(atomic_load(&w) == (2 | 1u << SHM_SLEEPERS_FUTILE_SHIFT));
	for (int i = 0; i < 125; i++)
		shm_sleepers_wake_one(&w, &gate);
	CHECK(atomic_load(&w) == (2 | 126u << SHM_SLEEPERS_FUTILE_SHIFT));
	shm_sleepers_wake_all(&w, &gate); /* the 127th: the count is dropped, next epoch */
	CHECK(atomic_load(&w) == 1u << SHM_SLEEPERS_EPOCH_SHIFT);
	/* A sleeper registered after the drop is counted; one from before it
	 * leaves without taking that count (internal/sleepers: no steal). */
	uint32_t late = shm_sleepers_register(&w);
	CHECK(late == 1u << SHM_SLEEPERS_EPOCH_SHIFT);
	shm_sleepers_unregister(&w, early);
	CHECK(atomic_load(&w) == (1 | 1u << SHM_SLEEPERS_EPOCH_SHIFT));
	shm_sleepers_unregister(&w, late);
	CHECK(atomic_load(&w) == 1u << SHM_SLEEPERS_EPOCH_SHIFT);
	shm_sleepers_unregister(&w, late); /* never below zero */
	CHECK(atomic_load(&w) == 1u << SHM_SLEEPERS_EPOCH_SHIFT);
	atomic_store(&w, 3 | SHM_SLEEPERS_WAKE_PENDING | 5u << SHM_SLEEPERS_FUTILE_SHIFT);
	shm_sleepers_unregister(&w, 0);
	CHECK(atomic_load(&w) == 2);
	/* The epoch wraps. */
	atomic_store(&w, 1 | SHM_SLEEPERS_EPOCH | 126u << SHM_SLEEPERS_FUTILE_SHIFT);
	shm_sleepers_wake_all(&w, &gate);
	CHECK(atomic_load(&w) == 0);
	/* The In forms (the upgrade mutex's waiters word: count 0-15, epoch
	 * 16-21, flags 22-23) keep the caller's flags and have an epoch too. */
	const uint32_t count = (1u << 16) - 1, epoch = 0x3fu << 16, flags = 1u << 22 | 1u << 23;
	atomic_store(&w, 0x2 | flags);
	uint32_t t0 = shm_sleepers_register_in(&w, epoch);
	CHECK(t0 == 0 && atomic_load(&w) == (0x3 | flags));
	atomic_store(&w, 0x3 | flags | 4u << SHM_SLEEPERS_FUTILE_SHIFT);
	shm_sleepers_unregister_in(&w, count, epoch, t0);
	CHECK(atomic_load(&w) == (0x2 | flags));
	atomic_store(&w, 0x2 | flags | 126u << SHM_SLEEPERS_FUTILE_SHIFT);
	shm_sleepers_futile_in(&w, count, epoch); /* the 127th drops the count, moves the epoch */
	CHECK(atomic_load(&w) == (flags | 1u << 16));
	uint32_t t1 = shm_sleepers_register_in(&w, epoch);
	CHECK(t1 == 1u << 16);
	shm_sleepers_unregister_in(&w, count, epoch, t0); /* dropped: takes nobody off */
	CHECK(atomic_load(&w) == (1 | flags | 1u << 16));
	shm_sleepers_unregister_in(&w, count, epoch, t1);
	CHECK(atomic_load(&w) == (flags | 1u << 16));
	atomic_store(&w, 1 | flags | epoch | 126u << SHM_SLEEPERS_FUTILE_SHIFT);
	shm_sleepers_futile_in(&w, count, epoch); /* the epoch wraps within its bits */
	CHECK(atomic_load(&w) == flags);
	/* A full count takes no more, rather than carry into the epoch (and
	 * from the last epoch into the flags). */
	atomic_store(&w, SHM_SLEEPERS_COUNT | 5u << SHM_SLEEPERS_EPOCH_SHIFT);
	CHECK(shm_sleepers_register(&w) == 5u << SHM_SLEEPERS_EPOCH_SHIFT);
	CHECK(atomic_load(&w) == (SHM_SLEEPERS_COUNT | 5u << SHM_SLEEPERS_EPOCH_SHIFT));
	atomic_store(&w, count | flags | epoch);
	CHECK(shm_sleepers_register_in(&w, epoch) == epoch);
	CHECK(atomic_load(&w) == (count | flags | epoch));
	shm_sleepers_unregister_in(&w, count, epoch, epoch);
	CHECK(atomic_load(&w) == ((count - 1) | flags | epoch));
	CHECK_RC(shm_futex_wait(&gate, 1, 0), 0); /* value differs */
	CHECK_RC(shm_futex_wait(&gate, 0, 1000000), SHMLOCK_ETIMEDOUT);
}

struct sleeper {
	a32 *w, *gate;
	a32 done;
};

static void *sleep_on(void *arg)
{
	struct sleeper *s = arg;
	uint32_t ticket = shm_sleepers_register(s->w);
	while (atomic_load(s->gate) == 0)
		shm_futex_wait(s->gate, 0, -1);
	shm_sleepers_unregister(s->w, ticket);
	atomic_store(&s->done, 1);
	return NULL;
}

static void test_wake(void)
{
	a32 w = 0, gate = 0;
	struct sleeper s = {&w, &gate, 0};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, sleep_on, &s) == 0);
	while ((atomic_load(&w) & SHM_SLEEPERS_COUNT) == 0)
		sched_yield();
	atomic_store(&gate, 1);
	shm_sleepers_wake_one(&w, &gate);
	pthread_join(t, NULL);
	CHECK(atomic_load(&s.done) == 1);
	CHECK(atomic_load(&w) == 0);
}

int main(void)
{
	RUN(test_self);
	RUN(test_fork);
	RUN(test_zombie);
	RUN(test_leader_exited);
	RUN(test_other_time_namespace);
	RUN(test_holders);
	RUN(test_boot_clock);
	RUN(test_clock_tracks_kernel);
	RUN(test_sleepers);
	RUN(test_wake);
	return CHECK_DONE();
}
