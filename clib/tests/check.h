/* check.h: the C unit tests' few macros. A test program is a main that runs
 * its cases with RUN(name); a failed CHECK prints where and what, and the
 * program exits 1 at the end. They run under ASan and UBSan (make test). */
#ifndef SHMLOCK_CHECK_H
#define SHMLOCK_CHECK_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmlock.h"

static int check_failures;
static int check_skipped __attribute__((unused)); /* the running case could not run here (CHECK_SKIP) */

#define CHECK(cond)                                                                        \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
			check_failures++;                                                  \
		}                                                                          \
	} while (0)

/* CHECK_RC(got, want): a return code, printed with its description. */
#define CHECK_RC(got, want)                                                                  \
	do {                                                                                 \
		int got_ = (got), want_ = (want);                                            \
		if (got_ != want_) {                                                         \
			fprintf(stderr, "%s:%d: %s = %d (%s), want %d (%s)\n", __FILE__, __LINE__, \
			        #got, got_, shmlock_strerror(got_), want_, shmlock_strerror(want_)); \
			check_failures++;                                                    \
		}                                                                            \
	} while (0)

/* CHECK_SKIP(why): the running case cannot run on this machine; RUN
 * reports it as skipped (unless a CHECK failed too), not as passed. */
#define CHECK_SKIP(why)                                       \
	do {                                                  \
		fprintf(stderr, "skip: %s\n", (why));         \
		check_skipped = 1;                            \
	} while (0)

#define RUN(fn)                                        \
	do {                                           \
		int before_ = check_failures;          \
		check_skipped = 0;                     \
		fn();                                  \
		fprintf(stderr, "%s %s\n", check_failures != before_ ? "FAIL" : check_skipped ? "skip" : "ok  ", #fn); \
	} while (0)

#define CHECK_DONE() (check_failures ? (fprintf(stderr, "%d failures\n", check_failures), 1) : 0)

/* A fresh segment path in /dev/shm for this test process; the test removes it. */
static inline void check_temp_path(char *buf, size_t n, const char *what)
{
	snprintf(buf, n, "/dev/shm/shmlock-ctest-%s-%d-%d", what, (int)getpid(), rand());
}

/* The golden segment images (testdata/segments), found via SHMLOCK_TESTDATA. */
static inline void check_testdata(char *buf, size_t n, const char *rel)
{
	const char *root = getenv("SHMLOCK_TESTDATA");
	snprintf(buf, n, "%s/%s", root ? root : "../testdata", rel);
}
#endif
