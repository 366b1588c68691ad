/* helper.h: what the helper programs of the Go tests share. A helper is a
 * small C program (one per part: spin, upgrade, lockmgr) that the Go tests
 * of package clib start beside Go helper processes; it takes options
 * (helper_options), a subcommand and arguments, prints lines the test
 * waits for ("held", "done N", ...), and exits 0 on success, 1 on a failed
 * invariant (with a message on stderr), 2 on bad usage. */
#ifndef SHMLOCK_HELPER_H
#define SHMLOCK_HELPER_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h" /* shm_test_liveness_ns */
#include "shmlock.h"

static inline void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static inline __attribute__((noreturn)) void die(const char *what, int rc)
{
	fprintf(stderr, "%s: %d (%s)\n", what, rc, shmlock_strerror(rc));
	exit(1);
}

static inline long helper_atol(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || end == s) {
		fprintf(stderr, "not a number: %s\n", s);
		exit(2);
	}
	return v;
}

/* helper_options takes the options a test may put before the subcommand off
 * argv, setting what they ask for:
 *
 *   -liveness=S   waits sleep up to S seconds between their looks for a
 *                 dead holder, in place of the library's 50 ms: a test that
 *                 counts the wake-up its release gives this helper's sleeper
 *                 (clib/stats_test.go) keeps the sleeper in the kernel until
 *                 the release, which a timed-out sleep just before it would
 *                 leave nobody to wake. Not for a test that waits for this
 *                 helper to find a holder dead. */
static inline void helper_options(int *argc, char ***argv)
{
	const char *live = "-liveness=";
	while (*argc > 1 && !strncmp((*argv)[1], live, strlen(live))) {
		long s = helper_atol((*argv)[1] + strlen(live));
		if (s <= 0 || s > INT64_MAX / 1000000000) {
			fprintf(stderr, "bad %s\n", (*argv)[1]);
			exit(2);
		}
		shm_test_liveness_ns = (int64_t)s * 1000000000;
		(*argv)[1] = (*argv)[0];
		(*argc)--;
		(*argv)++;
	}
}
#endif
