/* clock.c: CLOCK_MONOTONIC in nanoseconds (shm_now_ns), the clock every
 * process of one boot shares and the segment's times are kept in: Go's
 * internal/mono, whose fast clock this is. On x86-64, where the kernel keeps
 * time by the time-stamp counter and the counter ticks at one constant rate
 * through sleep states, a reading extrapolates the counter from the newest
 * anchor (a counter reading and the vDSO clock at it) by the counter's rate
 * against the vDSO clock, measured over a baseline of earlier anchors. An
 * anchor answers for ANCHOR_SPAN_NS after it; the first reading past that
 * takes a new one, so whoever calls reads the vDSO clock once a
 * millisecond. Elsewhere, or with SHMLOCK_CLOCK=vdso, every reading is the
 * vDSO clock's.
 *
 * Why: the lock manager reads the clock twice per acquire+release, and the
 * vDSO's read (its counter read is fenced, behind a sequence lock) took
 * about 30 ns on the benchmark VM, a third of an uncontended C
 * acquire+release, where Go's extrapolation took about 19.
 *
 * Invariants and error bound (as internal/mono/tsc.go):
 *   - the first rate is measured over at least CALIBRATE_OVER_NS, later ones
 *     over at least RECALIBRATE_AT_NS, from samples whose two counter reads
 *     lie at most MAX_PAIR_TICKS apart; the baseline moves up after
 *     REBASE_AFTER_NS, so the rate follows NTP's slewing;
 *   - between anchors a reading is off by at most the rate's error times
 *     the span: under MAX_ERROR_NS;
 *   - each new anchor checks the one before it: a miss of more than
 *     MAX_ERROR_NS, or a rate that moved by more than 1/2^MAX_RATE_SHIFT,
 *     means the counter does not keep time with the kernel (a migrated or
 *     resumed guest, a changed clocksource): readings go back to the vDSO
 *     clock, the clocksource is read again, and calibration starts over.
 * Readings of one process may step back by up to MAX_ERROR_NS where a new
 * anchor is taken; every use here (expiry, hold times, waits) allows that.
 * A fork's child keeps the anchor: the counter and the kernel's clock are
 * the machine's. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define MAX_ERROR_NS 1000
#define ANCHOR_SPAN_NS 1000000
#define CALIBRATE_OVER_NS 10000000
#define RECALIBRATE_AT_NS 100000000
#define REBASE_AFTER_NS 1000000000
#define MAX_PAIR_TICKS 2000
#define MAX_RATE_SHIFT 12
#define MULT_SHIFT 32
#define NEVER_DUE INT64_MAX

static int64_t vdso_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#if defined(__x86_64__)

static inline uint64_t rdtsc(void)
{
	uint32_t lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
}

/* An anchor: the counter at tsc was the clock's mono; mult is nanoseconds
 * per tick in 32.32 fixed point; span the ticks after tsc it answers for
 * (0: none). Published behind a sequence lock (seq odd while rewritten). */
struct anchor {
	uint64_t tsc, mult, span;
	int64_t mono;
};

static struct {
	a32 seq;
	a64 tsc, mono, mult, span;
} fast;

static _Atomic int64_t due; /* the vDSO clock from which slow_now samples; 0 at first */

/* The calibration, behind its lock; one thread samples at a time, the
 * others read the vDSO clock meanwhile (never wait: a fork's child may
 * inherit the lock taken). */
static pthread_mutex_t calib_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	bool checked; /* the environment and the CPU's flags were read */
	uint64_t base_tsc, mult;
	int64_t base_mono;
} calib;

static struct anchor load_anchor(void)
{
	uint32_t seq = atomic_load(&fast.seq);
	struct anchor a = {atomic_load(&fast.tsc), atomic_load(&fast.mult), atomic_load(&fast.span),
	                   (int64_t)atomic_load(&fast.mono)};
	if ((seq & 1) != 0 || atomic_load(&fast.seq) != seq)
		a.span = 0;
	return a;
}

static void store_anchor(struct anchor a)
{
	atomic_fetch_add(&fast.seq, 1);
	atomic_store(&fast.tsc, a.tsc);
	atomic_store(&fast.mono, (uint64_t)a.mono);
	atomic_store(&fast.mult, a.mult);
	atomic_store(&fast.span, a.span);
	atomic_fetch_add(&fast.seq, 1);
}

static inline int64_t anchor_at(struct anchor a, uint64_t t)
{
	return a.mono + (int64_t)((t - a.tsc) * a.mult >> MULT_SHIFT);
}

/* clocksource_is_tsc reports whether the kernel keeps time by the
 * time-stamp counter now. */
static bool clocksource_is_tsc(void)
{
	FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
	if (f == NULL)
		return false;
	char src[32] = "";
	bool tsc = fgets(src, sizeof src, f) != NULL && strcmp(src, "tsc\n") == 0;
	fclose(f);
	return tsc;
}

/* tsc_invariant reports whether the CPU says its time-stamp counter ticks
 * at one constant rate, also through sleep states (the first "flags" line
 * of /proc/cpuinfo has constant_tsc and nonstop_tsc). */
static bool tsc_invariant(void)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	if (f == NULL)
		return false;
	char *line = NULL;
	size_t cap = 0;
	bool constant = false, nonstop = false;
	while (getline(&line, &cap, f) > 0) {
		if (strncmp(line, "flags", 5) != 0)
			continue;
		char *flags = strchr(line, ':'), *save = NULL;
		if (flags == NULL)
			break;
		for (char *w = strtok_r(flags + 1, " \t\n", &save); w != NULL; w = strtok_r(NULL, " \t\n", &save)) {
			constant = constant || strcmp(w, "constant_tsc") == 0;
			nonstop = nonstop || strcmp(w, "nonstop_tsc") == 0;
		}
		break;
	}
	free(line);
	fclose(f);
	return constant && nonstop;
}

/* distrust turns the fast clock off and starts calibration over, if the
 * kernel still keeps time by the counter. Under calib_mu. */
static void distrust(void)
{
	store_anchor((struct anchor){0});
	calib.base_tsc = calib.mult = 0;
	calib.base_mono = 0;
	atomic_store(&due, clocksource_is_tsc() ? 0 : NEVER_DUE);
}

/* rate is ns/ticks in 32.32 fixed point; 0 if it does not fit or would
 * make an anchor's span overflow or vanish. */
static uint64_t rate(uint64_t ticks, int64_t ns)
{
	if (ticks == 0 || ns <= 0)
		return 0;
	unsigned __int128 q = ((unsigned __int128)(uint64_t)ns << MULT_SHIFT) / ticks;
	if (q == 0 || q > UINT64_MAX)
		return 0;
	uint64_t mult = (uint64_t)q;
	return ((uint64_t)ANCHOR_SPAN_NS << MULT_SHIFT) / mult != 0 ? mult : 0;
}

/* sample reads the counter around the vDSO clock, checks the anchor in use
 * against it, updates the rate and publishes a new anchor; it returns the
 * clock's reading. Under calib_mu. */
static int64_t sample(void)
{
	uint64_t t0 = rdtsc();
	int64_t m = vdso_now();
	uint64_t t1 = rdtsc();
	if (t1 - t0 > MAX_PAIR_TICKS) /* preempted, or the counter went back: at the next call */
		return m;
	uint64_t t = t0 + (t1 - t0) / 2;
	struct anchor a = load_anchor();
	if (a.span != 0 && t - a.tsc < 4 * a.span) {
		int64_t miss = anchor_at(a, t) - m;
		if (miss > MAX_ERROR_NS || miss < -MAX_ERROR_NS) {
			distrust();
			return m;
		}
	}
	if (calib.base_tsc == 0) {
		calib.base_tsc = t;
		calib.base_mono = m;
	} else if (t <= calib.base_tsc || m <= calib.base_mono) {
		distrust();
		return m;
	} else if ((calib.mult == 0 && m - calib.base_mono >= CALIBRATE_OVER_NS) ||
	           m - calib.base_mono >= RECALIBRATE_AT_NS) {
		uint64_t mult = rate(t - calib.base_tsc, m - calib.base_mono);
		uint64_t change = calib.mult >> MAX_RATE_SHIFT;
		if (mult == 0 || (calib.mult != 0 && (mult > calib.mult + change || mult + change < calib.mult))) {
			distrust();
			return m;
		}
		calib.mult = mult;
		if (m - calib.base_mono >= REBASE_AFTER_NS) {
			calib.base_tsc = t;
			calib.base_mono = m;
		}
	}
	if (calib.mult == 0) {
		atomic_store(&due, calib.base_mono + CALIBRATE_OVER_NS);
		return m;
	}
	store_anchor((struct anchor){.tsc = t,
	                             .mono = m,
	                             .mult = calib.mult,
	                             .span = ((uint64_t)ANCHOR_SPAN_NS << MULT_SHIFT) / calib.mult});
	atomic_store(&due, m + ANCHOR_SPAN_NS);
	return m;
}

/* slow_now reads the vDSO clock, and samples the counter against it when
 * an anchor or a calibration step is due. The first call decides whether
 * the fast clock may run at all. */
static int64_t slow_now(void)
{
	int64_t m = vdso_now();
	if (m < atomic_load(&due) || pthread_mutex_trylock(&calib_mu) != 0)
		return m;
	if (!calib.checked) {
		calib.checked = true;
		const char *env = getenv("SHMLOCK_CLOCK");
		if ((env != NULL && strcmp(env, "vdso") == 0) || !tsc_invariant() || !clocksource_is_tsc()) {
			atomic_store(&due, NEVER_DUE);
			pthread_mutex_unlock(&calib_mu);
			return m;
		}
	}
	m = sample();
	pthread_mutex_unlock(&calib_mu);
	return m;
}

int shm_clock_state(void)
{
	if (atomic_load(&due) == NEVER_DUE)
		return -1;
	return load_anchor().span != 0 ? 1 : 0;
}

int64_t shm_now_ns(void)
{
	struct anchor a = load_anchor();
	if (a.span != 0) {
		uint64_t t = rdtsc();
		if (t - a.tsc < a.span) /* also false if the counter read before a.tsc */
			return anchor_at(a, t);
	}
	return slow_now();
}

#else

int shm_clock_state(void) { return -1; }

int64_t shm_now_ns(void) { return vdso_now(); }

#endif

int64_t shm_vdso_now_ns(void) { return vdso_now(); }
