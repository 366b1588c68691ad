/* futex.c: futex wait and wake on words of the shared segment, and the
 * sleepers-word protocol of internal/sleepers.
 *
 * FUTEX_PRIVATE_FLAG is left off on purpose: the words live in a MAP_SHARED
 * file used by several processes, and a private futex is keyed by this
 * process's address space, so a waker in another process (Go or C) could
 * never find our waiters.
 *
 * A sleepers word counts the waiters registered to sleep on a gate:
 *
 *	bits  0..15  registered sleepers (SHM_SLEEPERS_COUNT)
 *	bits 16..23  the drop epoch (SHM_SLEEPERS_EPOCH)
 *	bits 24..30  wakes in a row that found nobody in the kernel (futile)
 *	bit  31      a woken sleeper has not run yet (wake pending)
 *
 * Waiters register before they re-check and sleep, and unregister after;
 * wakers skip the system call when nobody is registered or a wake is still
 * pending. Registered sleepers that died are noticed by FutileMax futile
 * wakes in a row, which drop the count and move the epoch on, so that a
 * sleeper that was only preempted before its futex call does not, when it
 * unregisters, take the count of one that registered after the drop.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define FUTEX_WAIT_SHARED FUTEX_WAIT /* no FUTEX_PRIVATE_FLAG: see above */
#define FUTEX_WAKE_SHARED FUTEX_WAKE
#define SLEEPERS_FUTILE_ONE (UINT32_C(1) << SHM_SLEEPERS_FUTILE_SHIFT)

int shm_futex_wait(a32 *w, uint32_t val, int64_t timeout_ns)
{
	struct timespec ts, *tsp = NULL; /* relative, as FUTEX_WAIT takes it */
	if (timeout_ns >= 0) {
		ts.tv_sec = timeout_ns / 1000000000;
		ts.tv_nsec = timeout_ns % 1000000000;
		tsp = &ts;
	}
	long r = syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_SHARED, val, tsp, NULL, 0);
	if (r == 0)
		return 0;
	switch (errno) {
	case ETIMEDOUT:
		return SHMLOCK_ETIMEDOUT;
	case EAGAIN: /* *w != val */
	case EINTR:
		return 0;
	default:
		return shm_sys_error(errno);
	}
}

int shm_futex_wake(a32 *w, int n)
{
	if (n <= 0)
		return 0; /* the kernel would wake one for 0 */
	long r = syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_SHARED, n, NULL, NULL, 0);
	return r < 0 ? 0 : (int)r;
}

uint32_t shm_sleepers_register(a32 *w) { return shm_sleepers_register_in(w, SHM_SLEEPERS_EPOCH); }

/* A full count takes no more: one more would carry into the epoch (and from
 * the last epoch into the caller's flags), and read zero (internal/sleepers). */
uint32_t shm_sleepers_register_in(a32 *w, uint32_t epoch)
{
	uint32_t full = (epoch & -epoch) - 1; /* the count's bits: every bit below the epoch's */
	uint32_t v = atomic_load(w);
	for (;;) {
		if ((v & full) == full)
			return v & epoch;
		if (atomic_compare_exchange_weak(w, &v, v + 1))
			return (v + 1) & epoch;
	}
}

void shm_sleepers_unregister(a32 *w, uint32_t ticket)
{
	shm_sleepers_unregister_in(w, SHM_SLEEPERS_COUNT, SHM_SLEEPERS_EPOCH, ticket);
}

/* Takes the sleeper of ticket off the count bits, unless a drop has moved
 * the epoch on since it registered (its registration is gone: taking one
 * off would take a later sleeper's), never below zero, and clears the
 * futile count and wake-pending either way: whoever returns from the
 * kernel, woken or not, shows the sleepers alive. Bits outside count, the
 * futile count and wake-pending are kept. */
void shm_sleepers_unregister_in(a32 *w, uint32_t count, uint32_t epoch, uint32_t ticket)
{
	uint32_t v = atomic_load(w);
	for (;;) {
		uint32_t n = v & count;
		if (n > 0 && (v & epoch) == ticket)
			n--;
		uint32_t next = (v & ~(count | SHM_SLEEPERS_FUTILE | SHM_SLEEPERS_WAKE_PENDING)) | n;
		if (atomic_compare_exchange_weak(w, &v, next))
			return;
	}
}

/* Counts a wake that found nobody in the kernel, clearing the bits clear,
 * and drops the count at the 127th such wake in a row, moving the epoch
 * (the bits epoch) on (internal/sleepers/doc.go). */
static void futile(a32 *w, uint32_t count, uint32_t epoch, uint32_t clear)
{
	uint32_t v = atomic_load(w);
	for (;;) {
		uint32_t next = (v & ~clear) + SLEEPERS_FUTILE_ONE;
		if ((v & count) == 0) {
			next = v & ~(clear | SHM_SLEEPERS_FUTILE);
		} else if ((next & SHM_SLEEPERS_FUTILE) == SHM_SLEEPERS_FUTILE) {
			next = v & ~(clear | SHM_SLEEPERS_FUTILE | count);
			next = (next & ~epoch) | ((v + (epoch & -epoch)) & epoch); /* epoch & -epoch: its lowest bit */
		}
		if (atomic_compare_exchange_weak(w, &v, next))
			return;
	}
}

bool shm_sleepers_wake_one(a32 *w, a32 *gate)
{
	uint32_t v = atomic_load(w);
	for (;;) {
		if ((v & SHM_SLEEPERS_COUNT) == 0 || (v & SHM_SLEEPERS_WAKE_PENDING))
			return false;
		if (atomic_compare_exchange_weak(w, &v, v | SHM_SLEEPERS_WAKE_PENDING))
			break;
	}
	/* Nobody woken: the sleepers are not in the kernel yet (they will find
	 * the gate changed) or they died; nobody is on the way to clear the bit. */
	if (shm_futex_wake(gate, 1) == 0) {
		futile(w, SHM_SLEEPERS_COUNT, SHM_SLEEPERS_EPOCH, SHM_SLEEPERS_WAKE_PENDING);
		return false;
	}
	return true;
}

/* Leaves wake-pending alone: it belongs to a wake_one whose sleeper clears it. */
bool shm_sleepers_wake_all(a32 *w, a32 *gate)
{
	if ((atomic_load(w) & SHM_SLEEPERS_COUNT) == 0)
		return false;
	if (shm_futex_wake(gate, INT_MAX) == 0) {
		futile(w, SHM_SLEEPERS_COUNT, SHM_SLEEPERS_EPOCH, 0);
		return false;
	}
	return true;
}

void shm_sleepers_futile_in(a32 *w, uint32_t count, uint32_t epoch) { futile(w, count, epoch, 0); }
