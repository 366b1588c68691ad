/* helper.h: what the helper programs of the Go tests share. A helper is a
 * small C program (one per part: spin, upgrade, lockmgr) that the Go tests
 * of package clib start beside Go helper processes; it takes a subcommand
 * and arguments, prints lines the test waits for ("held", "done N", ...),
 * and exits 0 on success, 1 on a failed invariant (with a message on
 * stderr), 2 on bad usage. */
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
#endif
