/* quickstart.c: count to N under a named spinlock, beside any other process
 * (Go, C, C++, Python) that counts in the same segment.
 *
 *   cc -O2 quickstart.c -I../include ../build/libshmlock.a -pthread -o quickstart
 *   ./quickstart jobs 1000        # the segment /dev/shm/jobs, created if missing
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "shmlock.h"

static int fail(const char *what, int rc)
{
	fprintf(stderr, "quickstart: %s: %s\n", what, shmlock_strerror(rc));
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: quickstart SEGMENT N\n");
		return 2;
	}
	long n = atol(argv[2]);

	shmlock_segment *seg;
	int rc = shmlock_open_or_create(argv[1], NULL, &seg);
	if (rc < 0)
		return fail("open", rc);
	shmlock_spin *lock;
	if ((rc = shmlock_spin_named(seg, "counter", SHMLOCK_PIDTID, &lock)) < 0)
		return fail("spinlock", rc);
	uint64_t *counter; /* guarded by the lock: a plain word, no atomics */
	if ((rc = shmlock_data(seg, "counter", sizeof *counter, (void **)&counter)) < 0)
		return fail("data region", rc);

	uint64_t me = shmlock_holder_new();
	for (long i = 0; i < n; i++) {
		rc = shmlock_spin_lock(lock, me);
		if (rc < 0)
			return fail("lock", rc);
		if (rc == SHMLOCK_OWNERDEAD || rc == SHMLOCK_INCONSISTENT) {
			/* A holder died inside its critical section. An increment is
			 * all-or-nothing here, so the counter is whole: say so. */
			shmlock_spin_mark_consistent(lock, me);
		}
		(*counter)++;
		if ((rc = shmlock_spin_unlock(lock, me)) < 0)
			return fail("unlock", rc);
	}

	shmlock_spin_lock(lock, me);
	printf("counter %" PRIu64 "\n", *counter);
	shmlock_spin_unlock(lock, me);
	shmlock_spin_close(lock);
	return shmlock_close(seg) < 0;
}
